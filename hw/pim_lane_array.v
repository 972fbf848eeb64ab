// pim_lane_array.v: the unit's datapath alone: LANES binary32 lanes side by side (one
// 256-bit column for LANES = 8), all doing the lane operation op (LOP_* of pim_defs.vh),
// computed by lanes_op (pim_lane_op.vh): lane_op on every lane, as the unit's lanes. The
// tests drive it to check each lane operation bit for bit.
`include "pim_defs.vh"
module pim_lane_array #(
    parameter LANES = 8
) (
    input  [3:0]          op,
    input  [2:0]          dtype,   // DT_*: binary32, two 16-bit elements a lane, widening
    input  [32*LANES-1:0] a,
    input  [32*LANES-1:0] b,
    input  [32*LANES-1:0] c,
    output [32*LANES-1:0] y
);
`include "pim_lane_op.vh"

    assign y = lanes_op(op, dtype, a, b, c);
endmodule
