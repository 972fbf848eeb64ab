// pim_lane_op.vh: the datapath: one lane operation (LOP_* of pim_defs.vh) on one lane
// (lane_op) and on every lane of a column (lanes_op), as functions included inside a module
// body that defines LANES. pim_unit.v (each lane a clocked process of its own, calling
// lane_op) and pim_lane_array.v (alone, for tests: lanes_op) share them, so both compute the
// same gates.
// MAD rounds twice: (a*b) rounded, then + c rounded; FMA once. SEL: c != 0 ? a : b. Compares give an
// all-ones lane (true) or zero. MOV and SEL move bits (NaN payloads kept); every arithmetic
// NaN result is the canonical quiet NaN 32'h7FC00000. dt (DT_*): binary32, or two 16-bit
// elements a lane word (fp16.vh: lane_op_h). A data op's widening forms (its dtype bits
// [2:0] 4-7: the binary32 op with operand a one 16-bit element of its word widened, dt[1]
// the format, 0 binary16, 1 bfloat16, dt[0] the half, 0 low, 1 high) widen a first
// (widen_a) and run lane_op in binary32 (lane_dt); lane_op itself is unchanged, so a
// simulator's binary32 and 16-bit paths cost what they did.
`include "fp_add.vh"
`include "fp_mul.vh"
`include "fp_cmp.vh"
`include "fp_fma.vh"
`include "fp16.vh"

function automatic [31:0] lane_op(input [3:0] lop, input [1:0] ldt, input [31:0] la,
                                  input [31:0] lb, input [31:0] lc);
    if (ldt != `DT_F32) lane_op = lane_op_h(lop, ldt, la, lb, lc);
    else case (lop)
        `LOP_MOV:   lane_op = la;
        `LOP_ADD:   lane_op = fp_add(la, lb);
        `LOP_SUB:   lane_op = fp_add(la, {~lb[31], lb[30:0]});
        `LOP_MUL:   lane_op = fp_mul(la, lb);
        `LOP_MAD:   lane_op = fp_add(fp_mul(la, lb), lc);
        `LOP_MAX:   lane_op = fp_max(la, lb);
        `LOP_MIN:   lane_op = fp_min(la, lb);
        `LOP_CMPGT: lane_op = {32{fp_lt(lb, la)}};
        `LOP_CMPGE: lane_op = {32{fp_lt(lb, la) | fp_eq(la, lb)}};
        `LOP_CMPEQ: lane_op = {32{fp_eq(la, lb)}};
        `LOP_SEL:   lane_op = (lc != 32'd0) ? la : lb;
        `LOP_FMA:   lane_op = fp_fma(la, lb, lc);
        default:    lane_op = 32'd0;
    endcase
endfunction

// a widening form's operand a: the 16-bit element dt names, widened (as CVTLO / CVTHI)
function automatic [31:0] widen_a(input [1:0] wdt, input [31:0] la);
    widen_a = h_widen(wdt[1] ? `DT_BF16 : `DT_F16, wdt[0] ? la[31:16] : la[15:0]);
endfunction

// the dtype lane_op runs a data op in: binary32 for a widening form
function automatic [1:0] lane_dt(input [2:0] wdt);
    lane_dt = wdt[2] ? `DT_F32 : wdt[1:0];
endfunction

function automatic [32*LANES-1:0] lanes_op(input [3:0] lop, input [2:0] ldt, input [32*LANES-1:0] va,
                                           input [32*LANES-1:0] vb, input [32*LANES-1:0] vc);
    integer i;
    reg [31:0] wa;
    for (i = 0; i < LANES; i = i + 1) begin
        wa = ldt[2] ? widen_a(ldt[1:0], va[32*i +: 32]) : va[32*i +: 32];
        lanes_op[32*i +: 32] = lane_op(lop, lane_dt(ldt), wa, vb[32*i +: 32], vc[32*i +: 32]);
    end
endfunction
