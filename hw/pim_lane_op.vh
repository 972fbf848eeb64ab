// pim_lane_op.vh: the datapath: one lane operation (LOP_* of pim_defs.vh) on every lane of
// a column, as a function included inside a module body that defines LANES. pim_unit.v (in
// its clocked process) and pim_lane_array.v (alone, for tests) share it, so both compute the
// same gates. The operation is chosen once, then applied lane by lane.
// MAD rounds twice: (a*b) rounded, then + c rounded. SEL: c != 0 ? a : b. Compares give an
// all-ones lane (true) or zero. MOV and SEL move bits (NaN payloads kept); every arithmetic
// NaN result is the canonical quiet NaN 32'h7FC00000.
`include "fp_add.vh"
`include "fp_mul.vh"
`include "fp_cmp.vh"

function automatic [32*LANES-1:0] lanes_op(input [3:0] lop, input [32*LANES-1:0] va,
                                           input [32*LANES-1:0] vb, input [32*LANES-1:0] vc);
    integer i;
    lanes_op = {32*LANES{1'b0}};
    case (lop)
        `LOP_MOV: lanes_op = va;
        `LOP_ADD: for (i = 0; i < LANES; i = i + 1)
            lanes_op[32*i +: 32] = fp_add(va[32*i +: 32], vb[32*i +: 32]);
        `LOP_SUB: for (i = 0; i < LANES; i = i + 1)
            lanes_op[32*i +: 32] = fp_add(va[32*i +: 32], {~vb[32*i+31], vb[32*i +: 31]});
        `LOP_MUL: for (i = 0; i < LANES; i = i + 1)
            lanes_op[32*i +: 32] = fp_mul(va[32*i +: 32], vb[32*i +: 32]);
        `LOP_MAD: for (i = 0; i < LANES; i = i + 1)
            lanes_op[32*i +: 32] = fp_add(fp_mul(va[32*i +: 32], vb[32*i +: 32]), vc[32*i +: 32]);
        `LOP_MAX: for (i = 0; i < LANES; i = i + 1)
            lanes_op[32*i +: 32] = fp_max(va[32*i +: 32], vb[32*i +: 32]);
        `LOP_MIN: for (i = 0; i < LANES; i = i + 1)
            lanes_op[32*i +: 32] = fp_min(va[32*i +: 32], vb[32*i +: 32]);
        `LOP_CMPGT: for (i = 0; i < LANES; i = i + 1)
            lanes_op[32*i +: 32] = {32{fp_lt(vb[32*i +: 32], va[32*i +: 32])}};
        `LOP_CMPGE: for (i = 0; i < LANES; i = i + 1)
            lanes_op[32*i +: 32] = {32{fp_lt(vb[32*i +: 32], va[32*i +: 32])
                                       | fp_eq(va[32*i +: 32], vb[32*i +: 32])}};
        `LOP_CMPEQ: for (i = 0; i < LANES; i = i + 1)
            lanes_op[32*i +: 32] = {32{fp_eq(va[32*i +: 32], vb[32*i +: 32])}};
        `LOP_SEL: for (i = 0; i < LANES; i = i + 1)
            lanes_op[32*i +: 32] = (vc[32*i +: 32] != 32'd0) ? va[32*i +: 32] : vb[32*i +: 32];
        default: ;
    endcase
endfunction
