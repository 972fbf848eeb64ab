// fp_add.vh: IEEE-754 binary32 addition as a function, included inside a module body.
// Round to nearest, ties to even; subnormals in and out; x + (-x) = +0 and (-0) + (-0) = -0;
// inf - inf and any NaN input give the canonical quiet NaN 32'h7FC00000.
// Datapath: order by magnitude, align the smaller operand with guard, round and sticky bits,
// add or subtract, normalise (at most to the subnormal exponent), round, pack.
function automatic [31:0] fp_add(input [31:0] opa, input [31:0] opb);
    reg [31:0] big, sml;          // big: the operand of larger magnitude
    reg [9:0]  ex, ey, d, e, sh;
    reg [27:0] mx, my, al, r; // {carry, hidden, 23 fraction bits, G, R, S}
    reg [4:0]  lz;
    reg [24:0] m;
    reg [26:0] t;
    reg        a_nan, b_nan, a_inf, b_inf, rnd;
    begin
        a_nan = (opa[30:23] == 8'hFF) && (opa[22:0] != 23'd0);
        b_nan = (opb[30:23] == 8'hFF) && (opb[22:0] != 23'd0);
        a_inf = (opa[30:23] == 8'hFF) && (opa[22:0] == 23'd0);
        b_inf = (opb[30:23] == 8'hFF) && (opb[22:0] == 23'd0);
        fp_add = 32'd0;
        if (a_nan || b_nan) begin
            fp_add = `QNAN;
        end else if (a_inf && b_inf) begin
            fp_add = (opa[31] == opb[31]) ? opa : `QNAN;
        end else if (a_inf) begin
            fp_add = opa;
        end else if (b_inf) begin
            fp_add = opb;
        end else begin
            if (opa[30:0] >= opb[30:0]) begin big = opa; sml = opb; end
            else begin big = opb; sml = opa; end
            ex = (big[30:23] == 8'd0) ? 10'd1 : {2'b00, big[30:23]};
            ey = (sml[30:23] == 8'd0) ? 10'd1 : {2'b00, sml[30:23]};
            mx = {1'b0, big[30:23] != 8'd0, big[22:0], 3'b000};
            my = {1'b0, sml[30:23] != 8'd0, sml[22:0], 3'b000};
            d = ex - ey;
            if (d >= 10'd28) begin
                al = {27'd0, my != 28'd0};
            end else begin
                al = my >> d;
                al[0] = al[0] | (|(my << (10'd28 - d)));
            end
            r = (big[31] ^ sml[31]) ? (mx - al) : (mx + al);
            if (r == 28'd0) begin
                fp_add = {opa[31] & opb[31], 31'd0};
            end else begin
                e = ex;
                if (r[27]) begin
                    r = {1'b0, r[27:2], r[1] | r[0]};
                    e = e + 10'd1;
                end else begin
                    // leading zeros of r[26:0] in log2 steps (a normalisation shifter)
                    lz = 5'd0;
                    t = r[26:0];
                    if (t[26:11] == 16'd0) begin t = t << 16; lz = lz + 5'd16; end
                    if (t[26:19] == 8'd0)  begin t = t << 8;  lz = lz + 5'd8;  end
                    if (t[26:23] == 4'd0)  begin t = t << 4;  lz = lz + 5'd4;  end
                    if (t[26:25] == 2'd0)  begin t = t << 2;  lz = lz + 5'd2;  end
                    if (!t[26])            begin              lz = lz + 5'd1;  end
                    sh = ({5'd0, lz} > e - 10'd1) ? e - 10'd1 : {5'd0, lz};
                    r = r << sh;
                    e = e - sh;
                end
                rnd = r[2] & (r[1] | r[0] | r[3]);
                m = {1'b0, r[26:3]} + {24'd0, rnd};
                if (m[24]) begin
                    m = m >> 1;
                    e = e + 10'd1;
                end
                if (e >= 10'd255) fp_add = {big[31], 8'hFF, 23'd0};
                else fp_add = {big[31], m[23] ? e[7:0] : 8'd0, m[22:0]};
            end
        end
    end
endfunction
