// pim_top.v: one PIM unit beside one bank. The harness drives clk, rst_n, mode, the host
// bank port (h_*), the configuration port (cfg_*) and start; it watches busy / done /
// err_code / err_pc / cycles. mode is registered: it acts from the clock after it is set.
// Handshake: with mode 1 (set a clock earlier), pulse start for one clock while busy is
// low; the unit runs from pc 0 and drops busy (done high) on EXIT or on a fault.
module pim_top #(
    parameter LANES = 8,
    parameter ROWS  = 256,
    parameter COLS  = 32
) (
    input                   clk,
    input                   rst_n,
    input                   mode,
    input                   start,
    input                   cfg_we,
    input  [1:0]            cfg_sel,
    input  [4:0]            cfg_idx,
    input  [31:0]           cfg_wdata,
    input                   h_en,
    input                   h_we,
    input  [15:0]           h_addr,
    input  [32*LANES-1:0]   h_wdata,
    output [32*LANES-1:0]   h_rdata,
    output                  h_rvalid,
    output                  h_err,
    output                  busy,
    output                  done,
    output [2:0]            err_code,
    output [5:0]            err_pc,
    output [31:0]           cycles,
    output [5:0]            pc,
    // the unit's bank port, for recording its accesses: a read of p_raddr this clock
    // (p_re), a write of p_waddr landing this clock (p_we)
    output                  p_re,
    output [15:0]           p_raddr,
    output                  p_we,
    output [15:0]           p_waddr
);
    wire [32*LANES-1:0]   p_rdata, p_wdata;

    // The mode input is sampled at each clock: a change takes effect from the next cycle
    // (and keeps the unit's datapath off the combinational paths from the top inputs).
    reg mode_q;
    always @(posedge clk) mode_q <= rst_n ? mode : 1'b0;

    pim_unit #(.LANES(LANES), .DEPTH(ROWS * COLS), .AW(16)) u_unit (
        .clk(clk), .rst_n(rst_n), .mode(mode_q), .start(start),
        .cfg_we(cfg_we), .cfg_sel(cfg_sel), .cfg_idx(cfg_idx), .cfg_wdata(cfg_wdata),
        .busy(busy), .done(done), .err_code(err_code), .err_pc(err_pc),
        .cycles(cycles), .pc(pc),
        .b_raddr(p_raddr), .b_re(p_re), .b_rdata(p_rdata), .b_we(p_we), .b_waddr(p_waddr), .b_wdata(p_wdata)
    );

    bank_array #(.LANES(LANES), .ROWS(ROWS), .COLS(COLS), .AW(16)) u_bank (
        .clk(clk), .mode(mode_q),
        .h_en(h_en), .h_we(h_we), .h_addr(h_addr), .h_wdata(h_wdata),
        .h_rdata(h_rdata), .h_rvalid(h_rvalid), .h_err(h_err),
        .p_raddr(p_raddr), .p_rdata(p_rdata), .p_we(p_we), .p_waddr(p_waddr), .p_wdata(p_wdata)
    );
endmodule
