// fp_add.vh: IEEE-754 binary32 addition as a function, included inside a module body.
// Round to nearest, ties to even; subnormals in and out; x + (-x) = +0 and (-0) + (-0) = -0;
// inf - inf and any NaN input give the canonical quiet NaN 32'h7FC00000.
// Datapath: order by magnitude, align the smaller operand with guard, round and sticky bits,
// add or subtract, normalise (at most to the subnormal exponent), round, pack.
// The datapath is written as multiplexers (both sides of each choice computed, one selected,
// as gates do), so a simulator runs it without branches on the operands' values, which a
// CPU mispredicts half the time on random data; only the rare cases (an infinite or NaN
// operand, an exact zero) are if/else. Same gates, same results as the if/else form.
function automatic [31:0] fp_add(input [31:0] opa, input [31:0] opb);
    reg [31:0] big, sml, num;     // big: the operand of larger magnitude
    reg [7:0]  eb, es;
    reg [9:0]  ex, ey, d, sh, en, e2;
    reg [4:0]  dd, lz;
    reg [55:0] wide;              // {my, 28 zeros} >> d: the aligned operand, then what fell off
    reg [27:0] mx, my, al, r;     // {carry, hidden, 23 fraction bits, G, R, S}
    reg [26:0] rn;                // r normalised, without its (now clear) carry bit
    reg [14:0] t1;                // the leading-zero count's steps keep the bits they test:
    reg [6:0]  t2;                // the top 15, 7, 3 bits of r[26:0] after each shift
    reg [2:0]  t3;
    reg [24:0] m;
    reg        swap, z16, z8, z4, z2, z1, rnd, a_nan, b_nan, a_inf, b_inf;
    begin
        swap = opa[30:0] < opb[30:0];
        big = swap ? opb : opa;
        sml = swap ? opa : opb;
        eb = big[30:23];
        es = sml[30:23];
        ex = {2'b00, eb} | {9'd0, eb == 8'd0};        // a subnormal's exponent is 1
        ey = {2'b00, es} | {9'd0, es == 8'd0};
        mx = {1'b0, eb != 8'd0, big[22:0], 3'b000};
        my = {1'b0, es != 8'd0, sml[22:0], 3'b000};
        // align: shift right by d (at most 28), the bits shifted out make the sticky bit
        d = ex - ey;
        dd = (d >= 10'd28) ? 5'd28 : d[4:0];
        wide = {my, 28'd0} >> dd;
        al = wide[55:28] | {27'd0, wide[27:0] != 28'd0};
        r = (big[31] ^ sml[31]) ? (mx - al) : (mx + al);
        // normalise: a carry shifts right by one; otherwise the leading zeros of r[26:0]
        // (log2 shifter) shift left, at most to the subnormal exponent
        z16 = r[26:11] == 16'd0;  t1 = z16 ? {r[10:0], 4'd0} : r[26:12];
        z8  = t1[14:7] == 8'd0;   t2 = z8  ? t1[6:0] : t1[14:8];
        z4  = t2[6:3] == 4'd0;    t3 = z4  ? t2[2:0] : t2[6:4];
        z2  = t3[2:1] == 2'd0;
        z1  = z2 ? !t3[0] : !t3[2];
        lz = {z16, z8, z4, z2, z1};
        sh = ({5'd0, lz} > ex - 10'd1) ? ex - 10'd1 : {5'd0, lz};
        rn = r[27] ? {r[27:2], r[1] | r[0]} : 27'(r << sh);
        en = r[27] ? ex + 10'd1 : ex - sh;
        // round to nearest even; a carry out of the mantissa (m = 2^24) is 1.0 one exponent up
        rnd = rn[2] & (rn[1] | rn[0] | rn[3]);
        m = {1'b0, rn[26:3]} + {24'd0, rnd};
        e2 = en + {9'd0, m[24]};
        num = (e2 >= 10'd255) ? {big[31], 8'hFF, 23'd0}
            : {big[31], (m[24] | m[23]) ? e2[7:0] : 8'd0, m[22:0]};
        // special operands (rare: a branch a simulator predicts), else the result
        if (opa[30:23] == 8'hFF || opb[30:23] == 8'hFF) begin
            a_nan = opa[22:0] != 23'd0 && opa[30:23] == 8'hFF;
            b_nan = opb[22:0] != 23'd0 && opb[30:23] == 8'hFF;
            a_inf = opa[30:0] == 31'h7F800000;
            b_inf = opb[30:0] == 31'h7F800000;
            fp_add = (a_nan | b_nan) ? `QNAN
                   : (a_inf & b_inf) ? ((opa[31] == opb[31]) ? opa : `QNAN)
                   : a_inf ? opa : opb;
        end else if (r == 28'd0) begin
            fp_add = {opa[31] & opb[31], 31'd0};
        end else begin
            fp_add = num;
        end
    end
endfunction
