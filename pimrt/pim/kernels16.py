"""The bodies of the kernels of an AMP step (docs/pim.md, "Kernels of an AMP step"): the
16-bit variants of the activation kernels and the fp32 AMP update, as phase templates that
pimrt.pim.kernels turns into kernels (`{dt}` is the 16-bit dtype's suffix, `.f16` / `.bf16`).

A 16-bit stream holds two values a lane word. Element-wise ops that torch computes as one
fp32 op rounded to 16 bits run as the 16-bit op itself (MAX.f16, ADD.f16, ...); the rest
(batch norm, average pooling's fp32 sum) take each word's low and high values into fp32
({i} the low values, {j} the high) by a widening form of their first op (`SUB.f16lo`: operand
a's low value widened, isa.WIDENING) or CVTLO / CVTHI, compute in fp32 and narrow with CVTPK. A `pair `
line runs once per two block columns ({e}, {o}: G(2i), G(2i+1)): sgd_amp narrows two fp32
columns into one 16-bit column.
"""
from __future__ import annotations

DTYPES16 = ("f16", "bf16")

# ---- stream kernels: name -> (body, scalars); streams as the fp32 base's -------------------
STREAM16 = {
    "relu_fwd": (("MAX{dt} G{i}, B[{x}+], S0", "MOV B[{y}+], G{i}"), ("zero",)),
    "relu_bwd": (("CMPGE{dt} G{i}, S0, B[{y}+]", "MOV G{j}, B[{dy}+]",
                  "SEL{dt} B[{dx}+], S0, G{j}, G{i}"), ("zero",)),
    "relu6_fwd": (("MAX{dt} G{i}, B[{x}+], S0", "MIN{dt} B[{y}+], G{i}, S1"), ("zero", "six")),
    "relu6_bwd": (("MOV G{i}, B[{y}+]", "CMPGE{dt} G{j}, S0, G{i}",
                   "SEL{dt} G{j}, S0, B[{dy}+], G{j}", "CMPGE{dt} G{i}, G{i}, S1",
                   "SEL{dt} B[{dx}+], S0, G{j}, G{i}"), ("zero", "six")),
    "copy": (("MOV G{i}, B[{x}+]", "MOV B[{y}+], G{i}"), ()),
    "residual_add": (("MOV G{i}, B[{a}+]", "ADD{dt} G{i}, G{i}, B[{b}+]", "MOV B[{y}+], G{i}"),
                     ()),
}

# the AMP update: fp32 master weights w, gradient g, momentum v; w16 the 16-bit copy
SGD_AMP = ("MOV G{i}, B[{w}+]", "MAD G{j}, G{i}, S0, B[{g}+]", "MAD G{j}, B[{v}+], S1, G{j}",
           "MOV B[{v_out}+], G{j}", "MAD G{i}, G{j}, S2, G{i}", "MOV B[{w_out}+], G{i}",
           "pair CVTPK{dt} B[{w16}+], G{e}, G{o}")
# GradSA's and LaySA's apply (sgd_apply: w = d*(-lr) + w, fp32) on a CONV's master weights,
# writing the 16-bit copy the next forward reads as sgd_amp does
SGD_APPLY_AMP = ("MOV G{i}, B[{w}+]", "MAD G{i}, B[{d}+], S0, G{i}", "MOV B[{w_out}+], G{i}",
                 "pair CVTPK{dt} B[{w16}+], G{e}, G{o}")
# the scaler's unscale: g = g * inv_scale; A0 = A0 + g*0 is NaN in a lane that saw an inf or
# a NaN (an fp32 g*0 is +-0 exactly when g is finite)
AMP_UNSCALE = ("MOV G{i}, B[{g}+]", "MAD A0, G{i}, S1, A0", "MUL B[{g_out}+], G{i}, S0")
# a CONV's 16-bit weight gradient (g16, as the CONV writes it) made its fp32 gradient g (the
# cast autograd's copy back does, exact) and unscaled as above: each 16-bit column read once
# into a register; the pair of fp32 columns it packs (the weights' pair layout, as sgd_amp
# writes w16) takes its low values, then its high ones, each widened by the first op that
# reads them ({wp}: `.f16lo` for the pair's even column, `.f16hi` for its odd one)
AMP_UNSCALE16 = ("pair MOV G{o}, B[{g16}+]", "MAD{wp} A0, G{pg}, S1, A0",
                 "MUL{wp} B[{g}+], G{pg}, S0")


def _widen(reg_raw: str, lo: str, hi: str, src: str) -> tuple[str, ...]:
    """Read one 16-bit column into {raw}, then its low and high values as fp32."""
    return (f"MOV {reg_raw}, {src}", f"CVTLO{{dt}} {lo}, {reg_raw}", f"CVTHI{{dt}} {hi}, {reg_raw}")


# ---- batch norm: fp32 statistics and constants, 16-bit x, y, dy, dx ------------------------
# Each 16-bit column is read once into a register; the first fp32 op on its low and on its
# high values takes them in a widening form ({wl}, {wh}: `.f16lo` / `.f16hi`, or bf16's),
# which widens operand a (CVTLO / CVTHI in the same instruction); y and dx are narrowed once
# (CVTPK, RNE). Where the 16-bit value is the second operand of the fp32 op (A0 + dy, (x -
# mean) * dy) it is taken as the first: fp32 addition and multiplication commute, bit for bit.
CHANNEL16 = {
    "bn_stats_ch": ("MOV G{j}, B[{x}+]", "SUB{wl} G{i}, G{j}, {shift}", "SUB{wh} G{j}, G{j}, {shift}",
                    "ADD A0, A0, G{i}", "ADD A0, A0, G{j}",
                    "MAD A1, G{i}, G{i}, A1", "MAD A1, G{j}, G{j}, A1"),
    "bn_apply_ch": ("MOV G{j}, B[{x}+]", "SUB{wl} G{i}, G{j}, {mean}", "SUB{wh} G{j}, G{j}, {mean}",
                    "SUB G{i}, G{i}, {mean_lo}", "SUB G{j}, G{j}, {mean_lo}",
                    "MAD G{i}, G{i}, {scale}, {shift}", "MAD G{j}, G{j}, {scale}, {shift}",
                    "CVTPK{dt} B[{y}+], G{i}, G{j}"),
    "bn_bwd_stats_ch": ("MOV G{j}, B[{x}+]", "SUB{wl} G{i}, G{j}, {mean}",
                        "SUB{wh} G{j}, G{j}, {mean}", "MOV G{i2}, B[{dy}+]",
                        "ADD{wl} A0, G{i2}, A0", "ADD{wh} A0, G{i2}, A0",
                        "MAD{wl} A1, G{i2}, G{i}, A1", "MAD{wh} A1, G{i2}, G{j}, A1"),
    "bn_bwd_apply_ch": ("MOV G{j}, B[{x}+]", "SUB{wl} G{i}, G{j}, {mean}",
                        "SUB{wh} G{j}, G{j}, {mean}",
                        "MAD G{i}, G{i}, {c1}, {c0}", "MAD G{j}, G{j}, {c1}, {c0}",
                        "MOV G{i2}, B[{dy}+]", "MAD{wl} G{i}, G{i2}, {k}, G{i}",
                        "MAD{wh} G{j}, G{i2}, {k}, G{j}", "CVTPK{dt} B[{dx}+], G{i}, G{j}"),
}

# ---- pooling: p0..p3 the window, p4 the pooled stream --------------------------------------
# average: the four values widened and summed in fp32 in row-major order (the first pixel's
# widened into two registers, each next one added in a widening form), times 0.25, narrowed
# once, plus +0 in 16 bits: torch's opmath sum, and its NCHW kernel gives +0 where the result
# rounds to -0 (a tiny negative mean, four -0). S0 = 0.25 (fp32), S1 = +0. Backward: dy*0.25
# rounded to 16 bits plus +0 (torch adds it into a zeroed gradient), S0, S1 in 16 bits.
POOL16 = {
    "avgpool2_fwd": (*_widen("G{j}", "G{i}", "G{j}", "B[p0+]"),
                     *[ph for p in (1, 2, 3) for ph in (
                         f"MOV G{{i2}}, B[p{p}+]", "ADD{wl} G{i}, G{i2}, G{i}",
                         "ADD{wh} G{j}, G{i2}, G{j}")],
                     "MUL G{i}, G{i}, S0", "MUL G{j}, G{j}, S0", "CVTPK{dt} G{i}, G{i}, G{j}",
                     "ADD{dt} B[p4+], G{i}, S1"),
    "maxpool2_fwd": ("MOV G{i}, B[p0+]", "MAX{dt} G{i}, G{i}, B[p1+]", "MAX{dt} G{i}, G{i}, B[p2+]",
                     "MAX{dt} G{i}, G{i}, B[p3+]", "MOV B[p4+], G{i}"),
    "avgpool2_bwd": ("MAD{dt} G{i}, B[p4+], S0, S1", "MOV B[p0+], G{i}", "MOV B[p1+], G{i}",
                     "MOV B[p2+], G{i}", "MOV B[p3+], G{i}"),
}


def suffixed(body, dtype: str) -> tuple[str, ...]:
    """The body with `{dt}` made the dtype's suffix, `{wl}` / `{wh}` its widening forms'
    (`.f16lo` / `.f16hi`, `.bf16lo` / `.bf16hi`), and `{wp}` the one of the half a column
    takes of its pair's register (`.f16{hf}`: {hf} set per column, pimrt.pim.kernels)."""
    return tuple(line.replace("{dt}", f".{dtype}").replace("{wl}", f".{dtype}lo")
                 .replace("{wh}", f".{dtype}hi").replace("{wp}", f".{dtype}{{hf}}")
                 for line in body)
