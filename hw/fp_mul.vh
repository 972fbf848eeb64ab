// fp_mul.vh: IEEE-754 binary32 multiplication as a function, included inside a module body.
// Round to nearest, ties to even; subnormals in and out; the sign of a zero or infinite
// result is the XOR of the signs; 0 * inf and any NaN input give the canonical quiet NaN.
// Datapath: 24x24 product, normalise the leading one to bit 47 (log2 shifter), shift right
// into the subnormal range when the exponent underflows (collecting sticky bits), round, pack.
function automatic [31:0] fp_mul(input [31:0] opa, input [31:0] opb);
    reg               s, top, a_nan, b_nan, a_inf, b_inf, a_zero, b_zero, rnd, lost;
    reg        [47:0] p;
    reg        [5:0]  lz, sh;
    reg signed [11:0] e;
    reg        [24:0] m;
    begin
        s = opa[31] ^ opb[31];
        a_nan = (opa[30:23] == 8'hFF) && (opa[22:0] != 23'd0);
        b_nan = (opb[30:23] == 8'hFF) && (opb[22:0] != 23'd0);
        a_inf = (opa[30:23] == 8'hFF) && (opa[22:0] == 23'd0);
        b_inf = (opb[30:23] == 8'hFF) && (opb[22:0] == 23'd0);
        a_zero = (opa[30:0] == 31'd0);
        b_zero = (opb[30:0] == 31'd0);
        fp_mul = 32'd0;
        if (a_nan || b_nan || (a_inf && b_zero) || (b_inf && a_zero)) begin
            fp_mul = `QNAN;
        end else if (a_inf || b_inf) begin
            fp_mul = {s, 8'hFF, 23'd0};
        end else if (a_zero || b_zero) begin
            fp_mul = {s, 31'd0};
        end else begin
            p = {24'd0, opa[30:23] != 8'd0, opa[22:0]} * {24'd0, opb[30:23] != 8'd0, opb[22:0]};
            // normalise: leading one to bit 47, in log2 steps (a normalisation shifter)
            lz = 6'd0;
            if (p[47:16] == 32'd0) begin p = p << 32; lz = lz + 6'd32; end
            if (p[47:32] == 16'd0) begin p = p << 16; lz = lz + 6'd16; end
            if (p[47:40] == 8'd0)  begin p = p << 8;  lz = lz + 6'd8;  end
            if (p[47:44] == 4'd0)  begin p = p << 4;  lz = lz + 6'd4;  end
            if (p[47:46] == 2'd0)  begin p = p << 2;  lz = lz + 6'd2;  end
            top = p[47];             // the last step as a multiplexer: 50/50 on normal operands
            p = top ? p : {p[46:0], 1'b0};
            lz = lz + {5'd0, !top};
            // exponent field of the result when the leading one is the hidden bit
            e = 12'sd47 - $signed({6'd0, lz}) - 12'sd173
                + ((opa[30:23] == 8'd0) ? 12'sd1 : $signed({4'd0, opa[30:23]}))
                + ((opb[30:23] == 8'd0) ? 12'sd1 : $signed({4'd0, opb[30:23]}));
            lost = 1'b0;
            if (e < 12'sd1) begin      // subnormal result: shift right, keeping a sticky bit
                sh = (e < -12'sd46) ? 6'd48 : 6'(12'sd1 - e);
                lost = (p & ~(48'hFFFF_FFFF_FFFF << sh)) != 48'd0;
                p = (sh == 6'd48) ? 48'd0 : p >> sh;
                e = 12'sd1;
            end
            rnd = p[23] & ((|p[22:0]) | lost | p[24]);
            m = {1'b0, p[47:24]} + {24'd0, rnd};
            if (m[24]) begin
                m = m >> 1;
                e = e + 12'sd1;
            end
            if (e >= 12'sd255) fp_mul = {s, 8'hFF, 23'd0};
            else fp_mul = {s, m[23] ? e[7:0] : 8'd0, m[22:0]};
        end
    end
endfunction
