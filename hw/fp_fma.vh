// fp_fma.vh: IEEE-754 binary32 fused multiply-add, round(a*b + c) with one rounding to nearest
// even; subnormals in and out; included inside a module body after fp_add.vh and fp_mul.vh.
// inf*0, inf - inf and any NaN input give the canonical quiet NaN; an exact zero sum of
// nonzero terms is +0; a zero product adds as a signed zero (fp_add), a zero c gives the
// rounded product (fp_mul). Datapath: the exact 48-bit product and c, each normalised, placed
// in an 80-bit window under the larger one's top bit (bit 78; 79 takes a carry); the smaller
// one shifted right, what falls below bit 1 kept as a sticky bit 0 (exact for the rounding,
// which then happens at bit 2 or above); add or subtract; normalise to 24 bits or to the
// subnormal exponent; round; pack.
function automatic [6:0] fma_msb(input [79:0] v);    // index of the top set bit (v != 0)
    integer i;
    begin
        fma_msb = 7'd0;
        for (i = 0; i < 80; i = i + 1)
            if (v[i]) fma_msb = 7'(i);
    end
endfunction

function automatic [31:0] fp_fma(input [31:0] opa, input [31:0] opb, input [31:0] opc);
    // its own C++ function in the Verilated model: inlined into every lane process, its wide
    // temporaries cost every instruction about half its speed (docs/pim.md)
    /* verilator no_inline_task */
    reg               sp, a_nan, b_nan, c_nan, a_inf, b_inf, c_inf, a_zero, b_zero, c_zero;
    reg               big_p, neg, rnd, sticky;
    reg        [47:0] mp;
    reg        [23:0] mc;
    reg        [79:0] vp, vc, s;
    reg       [159:0] wide;
    reg        [6:0]  kp, kc, k;
    reg signed [11:0] tp, tc, t, e0, lsb, r;
    reg        [80:0] d;
    reg        [24:0] m;
    reg        [79:0] low;
    begin
        sp = opa[31] ^ opb[31];
        a_nan = fp_isnan(opa[30:0]);
        b_nan = fp_isnan(opb[30:0]);
        c_nan = fp_isnan(opc[30:0]);
        a_inf = opa[30:0] == 31'h7F800000;
        b_inf = opb[30:0] == 31'h7F800000;
        c_inf = opc[30:0] == 31'h7F800000;
        a_zero = opa[30:0] == 31'd0;
        b_zero = opb[30:0] == 31'd0;
        c_zero = opc[30:0] == 31'd0;
        fp_fma = 32'd0;
        if (a_nan || b_nan || c_nan || (a_inf && b_zero) || (b_inf && a_zero)
            || ((a_inf || b_inf) && c_inf && sp != opc[31])) begin
            fp_fma = `QNAN;
        end else if (a_inf || b_inf) begin
            fp_fma = {sp, 8'hFF, 23'd0};
        end else if (c_inf) begin
            fp_fma = opc;
        end else if (a_zero || b_zero) begin
            fp_fma = fp_add({sp, 31'd0}, opc);
        end else if (c_zero) begin
            fp_fma = fp_mul(opa, opb);
        end else begin
            mp = {24'd0, opa[30:23] != 8'd0, opa[22:0]} * {24'd0, opb[30:23] != 8'd0, opb[22:0]};
            mc = {opc[30:23] != 8'd0, opc[22:0]};
            kp = fma_msb({32'd0, mp});
            kc = fma_msb({56'd0, mc});
            // exponent of the top bit: product lsb 2^(ea + eb - 300), c lsb 2^(ec - 150)
            // (a subnormal's exponent field counts as 1)
            tp = $signed({4'd0, (opa[30:23] == 8'd0) ? 8'd1 : opa[30:23]})
                 + $signed({4'd0, (opb[30:23] == 8'd0) ? 8'd1 : opb[30:23]})
                 - 12'sd300 + $signed({5'd0, kp});
            tc = $signed({4'd0, (opc[30:23] == 8'd0) ? 8'd1 : opc[30:23]})
                 - 12'sd150 + $signed({5'd0, kc});
            big_p = tp >= tc;
            t = big_p ? tp : tc;
            e0 = t - 12'sd78;                         // exponent of window bit 0
            // each term with its top bit at 78, then the smaller one shifted right by the
            // distance (at most 80), bits under window bit 1 into the sticky bit 0
            vp = {1'b0, mp << (7'd47 - kp), 31'd0};
            vc = {1'b0, mc << (7'd23 - kc), 55'd0};
            wide = {(big_p ? vc : vp), 80'd0} >> ((t - (big_p ? tc : tp)) > 12'sd80 ? 12'sd80
                                                 : (t - (big_p ? tc : tp)));
            sticky = wide[80:0] != 81'd0;
            if (big_p) vc = {wide[159:81], sticky};
            else       vp = {wide[159:81], sticky};
            // add, or subtract the smaller magnitude (the sign of the larger)
            if (sp == opc[31]) begin
                s = vp + vc;
                neg = sp;
            end else begin
                d = {1'b0, vp} - {1'b0, vc};
                neg = d[80] ? opc[31] : sp;
                s = d[80] ? 80'(-d) : d[79:0];
            end
            if (s == 80'd0) begin
                fp_fma = 32'd0;                       // exact cancellation: +0
            end else begin
                k = fma_msb(s);
                // the result's lsb: 23 bits under its top bit, not under 2^-149
                lsb = e0 + $signed({5'd0, k}) - 12'sd23;
                if (lsb < -12'sd149) lsb = -12'sd149;
                r = lsb - e0;                         // window bit of the result's lsb
                if (r <= 12'sd0) begin                // exact: shift left
                    m = 25'(s << (-r));
                    rnd = 1'b0;
                end else begin
                    m = 25'(s >> r);
                    low = s & ~(80'hFFFF_FFFF_FFFF_FFFF_FFFF << r);
                    rnd = s[7'(r - 12'sd1)] & ((low & ~(80'd1 << (r - 12'sd1))) != 80'd0 | m[0]);
                end
                m = m + {24'd0, rnd};
                if (m[24]) begin
                    m = m >> 1;
                    lsb = lsb + 12'sd1;
                end
                if (lsb + 12'sd150 >= 12'sd255) fp_fma = {neg, 8'hFF, 23'd0};
                else fp_fma = {neg, m[23] ? 8'(lsb + 12'sd150) : 8'd0, m[22:0]};
            end
        end
    end
endfunction
