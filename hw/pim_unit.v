// pim_unit.v: one PIM unit after HBM-PIM: a sequencer over a command register file (CRF),
// general registers (GRF), host-loaded scalar registers (SRF), accumulators (ACC), bank
// pointers (PTR) and loop counts (CNT), and a LANES-wide SIMD datapath: binary32 lanes, or
// two binary16 or bfloat16 elements a lane (a data op's dtype, bits [2:0]; with bit 2 set,
// binary32 with operand a a 16-bit element widened).
// One instruction per clock while busy. An instruction reads at most one bank column: its
// address (b_raddr) is decoded combinationally from the current instruction and the data
// (b_rdata) is used on the clock; a bank write leaves on the registered write port
// (b_we/b_waddr/b_wdata) and lands on the next clock (the bank forwards it to a read of the
// same column meanwhile). Encoding and semantics: docs/pim.md and pimrt/pim/isa.py.
// The sequencer is one clocked process; each lane is a clocked process of its own (its GRF
// and ACC words, its share of the bank write data) that evaluates only the operation being
// executed, so a simulator may schedule the lanes apart.
`include "pim_defs.vh"
module pim_unit #(
    parameter LANES = 8,
    parameter DEPTH = 8192,          // bank size in columns; pointers at or past it fault
    parameter AW    = 16             // pointer width
) (
    input                       clk,
    input                       rst_n,
    input                       mode,      // 1: all-bank PIM mode (the unit may run)
    input                       start,     // pulse while idle in PIM mode: run from pc 0
    input                       cfg_we,    // host load while idle: 0 CRF, 1 SRF, 2 PTR, 3 CNT
    input      [1:0]            cfg_sel,
    input      [4:0]            cfg_idx,
    input      [31:0]           cfg_wdata,
    output reg                  busy,
    output reg                  done,
    output reg [2:0]            err_code,
    output reg [5:0]            err_pc,
    output reg [31:0]           cycles,
    output reg [5:0]            pc,
    output     [AW-1:0]         b_raddr,
    output                      b_re,      // the current instruction reads b_raddr
    input      [32*LANES-1:0]   b_rdata,
    output reg                  b_we,
    output reg [AW-1:0]         b_waddr,
    output     [32*LANES-1:0]   b_wdata
);
`include "pim_lane_op.vh"
    reg [31:0]   crf [0:31];
    reg [31:0]   srf [0:15];
    reg [31:0]   cnt [0:3];
    // pointers and live loop counters, packed (pointer k at [k*AW +: AW], counter k at
    // [k*32 +: 32]) so each is written once a clock
    reg [8*AW-1:0] ptrs;
    reg [127:0]    lcs;

    // ---- the read address: the one bank pointer the current instruction reads ------------
    wire [31:0] ins = crf[pc[4:0]];
    wire [4:0]  i_op = ins[31:27];
    wire        i_data = i_op >= `OP_MOV && i_op <= `OP_FMA;
    // operand b is used by every data op but MOV and the widening conversions
    wire        i_useb = i_op != `OP_MOV && i_op != `OP_CVTLO && i_op != `OP_CVTHI;
    wire        rd_b = i_useb && ins[14:13] == `K_BANK;
    wire [2:0]  rd_p = ins[20:19] == `K_BANK ? ins[17:15] : (rd_b ? ins[11:9] : ins[5:3]);
    assign b_raddr = ptrs[rd_p * AW +: AW];
    assign b_re = busy && mode && !pc[5] && i_data && (ins[20:19] == `K_BANK
                  || (i_useb && ins[14:13] == `K_BANK)
                  || ((i_op == `OP_MAD || i_op == `OP_SEL || i_op == `OP_FMA)
                      && ins[8:7] == `K_BANK));

    function automatic bad_acc(input [5:2] f);   // ACC index past A3
        bad_acc = f[5:4] == `K_ACC && f[3:2] != 2'd0;
    endfunction

    // ---- sequencer and datapath ------------------------------------------------------------
    // decode of the current instruction, shared by the sequencer and the lanes
    wire [4:0]  op = ins[31:27];
    wire [5:0]  fd = ins[26:21], fa = ins[20:15], fb = ins[14:9], fc = ins[8:3];
    wire        is_data = i_data;
    wire        use_b = is_data && i_useb;
    // a data op's dtype: 3 reserved, and a conversion needs a plain 16-bit dtype (not
    // binary32, not a widening form)
    wire [2:0]  dt = ins[2:0];
    wire        bad_dt = dt == 3'd3
                         || (op >= `OP_CVTLO && op <= `OP_CVTPK && (dt == 3'd0 || dt[2]));
    wire        use_c = op == `OP_MAD || op == `OP_SEL || op == `OP_FMA;
    wire        ba = is_data && fa[5:4] == `K_BANK;
    wire        bb = use_b && fb[5:4] == `K_BANK;
    wire        bc = use_c && fc[5:4] == `K_BANK;
    wire        bd = is_data && fd[5:4] == `K_BANK;
    wire [2:0]  rp = ba ? fa[2:0] : (bb ? fb[2:0] : fc[2:0]);
    // faults, checked before anything is written (same order as pimrt/pim/isa.py)
    wire [2:0]  fault =
        pc[5] ? `E_PC
        : ((!is_data && op > `OP_ADDP) || (is_data && bad_dt)) ? `E_OPCODE
        : (is_data && (fd[5:4] == `K_SRF || bad_acc(fd[5:2]) || bad_acc(fa[5:2])
                       || (use_b && bad_acc(fb[5:2])) || (use_c && bad_acc(fc[5:2])))) ? `E_REG
        : ((bb && fb[2:0] != rp) || (bc && fc[2:0] != rp)) ? `E_OPERAND
        : (((ba | bb | bc) && {16'd0, ptrs[rp * AW +: AW]} >= 32'(DEPTH))
           || (bd && {16'd0, ptrs[fd[2:0] * AW +: AW]} >= 32'(DEPTH))) ? `E_ADDR
        : `E_NONE;
    // the lanes execute the current data instruction on this clock
    wire        go = rst_n && busy && mode && is_data && fault == `E_NONE;
    wire [3:0]  lop = op[3:0] - 4'd8;
    reg [8*AW-1:0] pn;
    reg [31:0]  lcur;
    integer     l;

    // The decode and datapath values above are temporaries of this process (blocking
    // assignments, used within the same clock), hence the BLKSEQ waiver.
    /* verilator lint_off BLKSEQ */
    always @(posedge clk) begin
        b_we <= 1'b0;
        if (!rst_n) begin
            busy <= 1'b0;
            done <= 1'b0;
            err_code <= `E_NONE;
            err_pc <= 6'd0;
            cycles <= 32'd0;
            pc <= 6'd0;
        end else if (!busy) begin
            if (cfg_we) begin
                case (cfg_sel)
                    2'd0: crf[cfg_idx] <= cfg_wdata;
                    2'd1: srf[cfg_idx[3:0]] <= cfg_wdata;
                    2'd2: ptrs[cfg_idx[2:0] * AW +: AW] <= cfg_wdata[AW-1:0];
                    default: cnt[cfg_idx[1:0]] <= cfg_wdata;
                endcase
            end
            if (start && mode) begin
                busy <= 1'b1;
                done <= 1'b0;
                err_code <= `E_NONE;
                pc <= 6'd0;
                cycles <= 32'd0;
                lcs <= {cnt[3], cnt[2], cnt[1], cnt[0]};
            end
        end else if (mode) begin
            cycles <= cycles + 32'd1;
            pc <= pc + 6'd1;
            if (fault != `E_NONE) begin
                busy <= 1'b0;
                done <= 1'b1;
                err_code <= fault;
                err_pc <= pc;
                pc <= pc;
            end else if (is_data) begin
                // the lanes compute and write the result (below); the bank write leaves here
                if (bd) begin
                    b_we <= 1'b1;
                    b_waddr <= ptrs[fd[2:0] * AW +: AW];
                end
                // post-increments: once per named pointer
                if ((bd && fd[3]) || (ba && fa[3]) || (bb && fb[3]) || (bc && fc[3])) begin
                    pn = ptrs;
                    if (bd && fd[3]) pn[fd[2:0] * AW +: AW] = ptrs[fd[2:0] * AW +: AW] + 1'b1;
                    if (ba && fa[3]) pn[fa[2:0] * AW +: AW] = ptrs[fa[2:0] * AW +: AW] + 1'b1;
                    if (bb && fb[3]) pn[fb[2:0] * AW +: AW] = ptrs[fb[2:0] * AW +: AW] + 1'b1;
                    if (bc && fc[3]) pn[fc[2:0] * AW +: AW] = ptrs[fc[2:0] * AW +: AW] + 1'b1;
                    ptrs <= pn;
                end
            end else begin
                case (op)
                    `OP_EXIT: begin
                        busy <= 1'b0;
                        done <= 1'b1;
                        pc <= pc;
                    end
                    `OP_JMP: pc <= {1'b0, ins[26:22]};
                    `OP_LOOP: begin
                        lcur = lcs[ins[21:20] * 32 +: 32];
                        if (lcur > 32'd1) begin
                            lcs[ins[21:20] * 32 +: 32] <= lcur - 32'd1;
                            pc <= {1'b0, ins[26:22]};
                        end else begin
                            lcs[ins[21:20] * 32 +: 32] <= cnt[ins[21:20]];
                        end
                    end
                    `OP_ADDP: begin
                        pn = ptrs;
                        for (l = 0; l < 8; l = l + 1)
                            if (ins[19 + l])
                                pn[l * AW +: AW] = ptrs[l * AW +: AW] + {{(AW-16){ins[15]}}, ins[15:0]};
                        ptrs <= pn;
                    end
                    default: ;   // NOP
                endcase
            end
        end
    end

    // ---- the lanes: each its own process over its own registers ------------------------------
    genvar g;
    generate
        for (g = 0; g < LANES; g = g + 1) begin : lane
            reg [31:0] grf [0:15];
            reg [31:0] acc [0:3];
            reg [31:0] wd;                 // this lane's bank write data
            reg [31:0] va, vb, vc, vy;
            assign b_wdata[32*g +: 32] = wd;
            always @(posedge clk) begin
                if (go) begin
                    case (fa[5:4])
                        `K_GRF:  va = grf[fa[3:0]];
                        `K_SRF:  va = srf[fa[3:0]];
                        `K_BANK: va = b_rdata[32*g +: 32];
                        default: va = acc[fa[1:0]];
                    endcase
                    case (fb[5:4])
                        `K_GRF:  vb = grf[fb[3:0]];
                        `K_SRF:  vb = srf[fb[3:0]];
                        `K_BANK: vb = b_rdata[32*g +: 32];
                        default: vb = acc[fb[1:0]];
                    endcase
                    case (fc[5:4])
                        `K_GRF:  vc = grf[fc[3:0]];
                        `K_SRF:  vc = srf[fc[3:0]];
                        `K_BANK: vc = b_rdata[32*g +: 32];
                        default: vc = acc[fc[1:0]];
                    endcase
                    if (dt[2]) va = widen_a(dt[1:0], va);     // a widening form
                    vy = lane_op(lop, lane_dt(dt), va, vb, vc);
                    case (fd[5:4])
                        `K_GRF:  grf[fd[3:0]] <= vy;
                        `K_ACC:  acc[fd[1:0]] <= vy;
                        `K_BANK: wd <= vy;
                        default: ;
                    endcase
                end
            end
        end
    endgenerate
    /* verilator lint_on BLKSEQ */
endmodule
