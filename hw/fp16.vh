// fp16.vh: 16-bit lanes, included inside a module body after fp_add.vh, fp_mul.vh, fp_cmp.vh.
// dt 1: IEEE binary16, dt 2: bfloat16; two elements in a 32-bit lane word (element 2i in lane
// i's low half). A 16-bit op is the binary32 op on the widened elements, then the narrowing
// (torch's CPU kernels compute Half and BFloat16 so: docs/pim.md, "16-bit lanes"). The
// conversions are torch's, bit for bit:
//   h_widen:  exact. bf16: shifted up (a NaN keeps its payload). fp16: subnormals normalised;
//             a NaN keeps sign and payload and is made quiet (sign | 7FC00000 | payload<<13).
//   h_narrow: round to nearest even, subnormals, overflow to infinity. A NaN: bf16 FFFF (any
//             NaN); fp16 sign | 7E00 | the top 9 payload bits.
function automatic [31:0] h_widen(input [1:0] hdt, input [15:0] h);
    reg [3:0]  lz;
    reg [9:0]  m;
    integer    i;
    begin
        if (hdt == `DT_BF16) begin
            h_widen = {h, 16'd0};
        end else if (h[14:10] == 5'h1F) begin
            h_widen = (h[9:0] == 10'd0) ? {h[15], 8'hFF, 23'd0} : {h[15], 9'h1FF, h[8:0], 13'd0};
        end else if (h[14:10] != 5'd0) begin
            h_widen = {h[15], {3'd0, h[14:10]} + 8'd112, h[9:0], 13'd0};
        end else if (h[9:0] == 10'd0) begin
            h_widen = {h[15], 31'd0};
        end else begin
            // subnormal: m * 2^-24; the leading one at bit 9 - lz becomes the hidden bit
            lz = 4'd0;
            for (i = 0; i < 10; i = i + 1)
                if (h[i]) lz = 4'(9 - i);
            m = h[9:0] << (lz + 4'd1);
            h_widen = {h[15], 8'd112 - {4'd0, lz}, m, 13'd0};
        end
    end
endfunction

function automatic [15:0] h_narrow(input [1:0] hdt, input [31:0] u);
    reg [33:0] wide;
    reg [7:0]  sh;
    reg        rnd;
    begin
        if (hdt == `DT_BF16) begin
            rnd = u[15] & ((u[14:0] != 15'd0) | u[16]);
            h_narrow = fp_isnan(u[30:0]) ? 16'hFFFF : u[31:16] + {15'd0, rnd};
        end else if (u[30:23] == 8'hFF) begin
            h_narrow = (u[22:0] == 23'd0) ? {u[31], 15'h7C00} : {u[31], 6'h3F, u[21:13]};
        end else if (u[30:23] >= 8'd143) begin        // 2^16 and up: past the largest finite
            h_narrow = {u[31], 15'h7C00};
        end else if (u[30:23] >= 8'd113) begin        // normal: 10 fraction bits, round
            rnd = u[12] & ((u[11:0] != 12'd0) | u[13]);
            h_narrow = {u[31], 5'(u[30:23] - 8'd112), u[22:13]} + {15'd0, rnd};   // a carry
        end else begin                                // steps the exponent (to inf)
            // subnormal or zero: the significand shifted right by sh = 126 - exponent, at
            // least 14; from 25 on nothing is left (a binary32 subnormal: sh 126)
            sh = 8'd126 - u[30:23];
            wide = {u[30:23] != 8'd0, u[22:0], 10'd0} >> ((sh > 8'd25) ? 8'd11 : sh - 8'd14);
            rnd = wide[23] & ((wide[22:0] != 23'd0) | wide[24]);
            h_narrow = {u[31], 5'd0, wide[33:24]} + {15'd0, rnd};
        end
    end
endfunction

// One lane op on one 16-bit element (dt 1 or 2); lop as in lane_op, conversions apart.
// MAD rounds to 16 bits twice (a*b, then + c), as torch's a*b + c on 16-bit tensors; FMA is
// the binary32 fused multiply-add narrowed, as torch's addcmul.
// Compares give an all-ones or zero element; MOV and SEL move bits.
function automatic [15:0] lane_op16(input [3:0] lop, input [1:0] hdt, input [15:0] ha,
                                    input [15:0] hb, input [15:0] hc);
    reg [31:0] wa, wb;
    begin
        wa = h_widen(hdt, ha);
        wb = h_widen(hdt, hb);
        case (lop)
            `LOP_MOV:   lane_op16 = ha;
            `LOP_ADD:   lane_op16 = h_narrow(hdt, fp_add(wa, wb));
            `LOP_SUB:   lane_op16 = h_narrow(hdt, fp_add(wa, {~wb[31], wb[30:0]}));
            `LOP_MUL:   lane_op16 = h_narrow(hdt, fp_mul(wa, wb));
            `LOP_MAD:   lane_op16 = h_narrow(hdt, fp_add(h_widen(hdt, h_narrow(hdt, fp_mul(wa, wb))),
                                                        h_widen(hdt, hc)));
            `LOP_MAX:   lane_op16 = h_narrow(hdt, fp_max(wa, wb));
            `LOP_MIN:   lane_op16 = h_narrow(hdt, fp_min(wa, wb));
            `LOP_CMPGT: lane_op16 = {16{fp_lt(wb, wa)}};
            `LOP_CMPGE: lane_op16 = {16{fp_lt(wb, wa) | fp_eq(wa, wb)}};
            `LOP_CMPEQ: lane_op16 = {16{fp_eq(wa, wb)}};
            `LOP_SEL:   lane_op16 = (hc != 16'd0) ? ha : hb;
            `LOP_FMA:   lane_op16 = h_narrow(hdt, fp_fma(wa, wb, h_widen(hdt, hc)));
            default:    lane_op16 = 16'd0;
        endcase
    end
endfunction

// A lane op with a 16-bit dtype on a 32-bit lane word: the conversions (CVTLO, CVTHI: a
// half widened; CVTPK: a and b narrowed into the low and high halves) or lane_op16 on each
// half.
function automatic [31:0] lane_op_h(input [3:0] lop, input [1:0] hdt, input [31:0] la,
                                    input [31:0] lb, input [31:0] lc);
    case (lop)
        `LOP_CVTLO: lane_op_h = h_widen(hdt, la[15:0]);
        `LOP_CVTHI: lane_op_h = h_widen(hdt, la[31:16]);
        `LOP_CVTPK: lane_op_h = {h_narrow(hdt, lb), h_narrow(hdt, la)};
        default:    lane_op_h = {lane_op16(lop, hdt, la[31:16], lb[31:16], lc[31:16]),
                                 lane_op16(lop, hdt, la[15:0], lb[15:0], lc[15:0])};
    endcase
endfunction
