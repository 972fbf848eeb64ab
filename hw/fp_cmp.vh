// fp_cmp.vh: binary32 comparisons, included inside a module body.
// fp_lt / fp_eq follow IEEE-754: false when either input is NaN, +0 == -0.
// fp_max / fp_min: a NaN input gives the canonical quiet NaN; otherwise the larger (smaller)
// value, and on a tie (equal values, or +0 and -0) the first operand, as torch.maximum,
// torch.relu (max(-0, 0) = -0) and max pooling (the first maximum of a window) do.
// Order is taken on a key that maps binary32 to unsigned integers monotonically
// (negative: all bits inverted; positive: sign bit set); -0 and +0 get adjacent keys,
// so fp_lt also checks for the +0/-0 pair.
function automatic fp_isnan(input [30:0] mag);
    fp_isnan = (mag[30:23] == 8'hFF) && (mag[22:0] != 23'd0);
endfunction

function automatic [31:0] fp_key(input [31:0] x);
    fp_key = x[31] ? ~x : {1'b1, x[30:0]};
endfunction

function automatic fp_lt(input [31:0] opa, input [31:0] opb);
    fp_lt = !fp_isnan(opa[30:0]) && !fp_isnan(opb[30:0]) && fp_key(opa) < fp_key(opb)
            && ((opa[30:0] | opb[30:0]) != 31'd0);
endfunction

function automatic fp_eq(input [31:0] opa, input [31:0] opb);
    fp_eq = !fp_isnan(opa[30:0]) && !fp_isnan(opb[30:0])
            && ((opa == opb) || ((opa[30:0] | opb[30:0]) == 31'd0));
endfunction

function automatic [31:0] fp_max(input [31:0] opa, input [31:0] opb);
    if (fp_isnan(opa[30:0]) || fp_isnan(opb[30:0])) fp_max = `QNAN;
    else fp_max = fp_lt(opa, opb) ? opb : opa;
endfunction

function automatic [31:0] fp_min(input [31:0] opa, input [31:0] opb);
    if (fp_isnan(opa[30:0]) || fp_isnan(opb[30:0])) fp_min = `QNAN;
    else fp_min = fp_lt(opb, opa) ? opb : opa;
endfunction
