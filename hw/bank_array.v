// bank_array.v: a DRAM bank as ROWS x COLS columns of 32*LANES bits (column address =
// row * COLS + col) with two ports that the mode input gates:
//   mode 0 (host): the host port reads and writes; a read's data is valid (h_rvalid) on the
//                  clock after h_en. The PIM port reads zero and its writes are dropped.
//   mode 1 (all-bank PIM): the PIM port reads combinationally and writes on the clock; a
//                  read of the column being written this clock returns the new data
//                  (forwarding); a host access is refused (h_err pulses) and changes nothing.
// An address past the bank also gives h_err.
module bank_array #(
    parameter LANES = 8,
    parameter ROWS  = 256,
    parameter COLS  = 32,
    parameter AW    = 16
) (
    input                       clk,
    input                       mode,
    input                       h_en,
    input                       h_we,
    input      [AW-1:0]         h_addr,
    input      [32*LANES-1:0]   h_wdata,
    output reg [32*LANES-1:0]   h_rdata,
    output reg                  h_rvalid,
    output reg                  h_err,
    input      [AW-1:0]         p_raddr,
    output     [32*LANES-1:0]   p_rdata,
    input                       p_we,
    input      [AW-1:0]         p_waddr,
    input      [32*LANES-1:0]   p_wdata
);
    localparam DEPTH = ROWS * COLS;
    localparam IW = $clog2(DEPTH);

    reg [32*LANES-1:0] mem [0:DEPTH-1];

    wire h_ok = {16'd0, h_addr} < 32'(DEPTH);
    wire p_ok = {16'd0, p_raddr} < 32'(DEPTH);
    assign p_rdata = !(mode && p_ok) ? {32*LANES{1'b0}}
                   : (p_we && p_waddr == p_raddr) ? p_wdata : mem[p_raddr[IW-1:0]];

    always @(posedge clk) begin
        h_rvalid <= 1'b0;
        h_err <= 1'b0;
        if (mode) begin
            if (p_we && {16'd0, p_waddr} < 32'(DEPTH)) mem[p_waddr[IW-1:0]] <= p_wdata;
            if (h_en) h_err <= 1'b1;
        end else if (h_en) begin
            if (!h_ok) h_err <= 1'b1;
            else if (h_we) mem[h_addr[IW-1:0]] <= h_wdata;
            else begin
                h_rdata <= mem[h_addr[IW-1:0]];
                h_rvalid <= 1'b1;
            end
        end
    end
endmodule
