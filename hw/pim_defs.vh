// pim_defs.vh: constants shared by the PIM unit RTL (opcodes, operand kinds, error codes).
// The same table lives in pimrt/pim/isa.py; tests check that the two agree.
`ifndef PIM_DEFS_VH
`define PIM_DEFS_VH

// Lane operations (the `op` input of pim_lane).
`define LOP_MOV    4'd0
`define LOP_ADD    4'd1
`define LOP_SUB    4'd2
`define LOP_MUL    4'd3
`define LOP_MAD    4'd4
`define LOP_MAX    4'd5
`define LOP_MIN    4'd6
`define LOP_CMPGT  4'd7
`define LOP_CMPGE  4'd8
`define LOP_CMPEQ  4'd9
`define LOP_SEL    4'd10
`define LOP_CVTLO  4'd11
`define LOP_CVTHI  4'd12
`define LOP_CVTPK  4'd13
`define LOP_FMA    4'd14

// Instruction opcodes (bits [31:27] of a command word).
`define OP_NOP    5'd0
`define OP_EXIT   5'd1
`define OP_JMP    5'd2
`define OP_LOOP   5'd3
`define OP_ADDP   5'd4
`define OP_MOV    5'd8
`define OP_ADD    5'd9
`define OP_SUB    5'd10
`define OP_MUL    5'd11
`define OP_MAD    5'd12
`define OP_MAX    5'd13
`define OP_MIN    5'd14
`define OP_CMPGT  5'd15
`define OP_CMPGE  5'd16
`define OP_CMPEQ  5'd17
`define OP_SEL    5'd18
`define OP_CVTLO  5'd19
`define OP_CVTHI  5'd20
`define OP_CVTPK  5'd21
`define OP_FMA    5'd22

// Data dtypes (bits [2:0] of a data op; 3 reserved): 16-bit elements two per lane word. With
// bit 2 set, a widening form: the binary32 op on operand a's 16-bit element widened (bit 1:
// 0 binary16, 1 bfloat16; bit 0: 0 low half, 1 high half; pim_lane_op.vh).
`define DT_F32   2'd0
`define DT_F16   2'd1
`define DT_BF16  2'd2

// Operand kinds (bits [5:4] of a 6-bit operand field).
`define K_GRF  2'd0
`define K_SRF  2'd1
`define K_BANK 2'd2
`define K_ACC  2'd3

// Error codes (err_code output).
`define E_NONE     3'd0
`define E_OPCODE   3'd1
`define E_REG      3'd2
`define E_OPERAND  3'd3
`define E_ADDR     3'd4
`define E_PC       3'd5

// The canonical quiet NaN every arithmetic NaN result is replaced by.
`define QNAN 32'h7FC00000

`endif
