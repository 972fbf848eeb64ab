"""The widening forms of the data ops (docs/pim.md, "Widening operands"): `OP.f16lo`,
`OP.f16hi`, `OP.bf16lo`, `OP.bf16hi` are the binary32 op with operand a one 16-bit element
of its lane word widened first, i.e. CVTLO / CVTHI then the op in one instruction. Golden ==
that composition on every 16-bit pattern, == torch's fp32 arithmetic on the widened tensor;
the RTL (pyverilator lanes, the batch driver) == golden, bit for bit; the golden model's
vectorised folds == its stepped loop; the encoding, the assembler and the faults."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from pimrt.pim import fp, isa, testing
from pimrt.pim.asm import assemble
from pimrt.pim.errors import PimAsmError, PimFaultError
from pimrt.pim.golden import GoldenBackend

torch = pytest.importorskip("torch")

ALL16 = np.arange(65536, dtype=np.uint32)
WORDS = (ALL16 | (ALL16[::-1] << 16)).astype(np.uint32)       # every pattern in both halves
OPS = sorted(isa.LANE_OPS)                                       # the conversions apart
widenings = pytest.mark.parametrize("wd", sorted(isa.WIDENING.values()),
                                    ids=lambda v: isa.DTYPE_NAMES[v])


def _operands(seed: int, n: int):
    """b and c: random binary32 words, a fifth of them edge values."""
    rng = np.random.default_rng(seed)
    e = testing.EDGES
    return [np.where(rng.random(n) < 0.2, rng.choice(e, n),
                     rng.integers(0, 2**32, n, dtype=np.uint64)).astype(np.uint32) for _ in range(2)]


def _composition(name, wd, a, b, c):
    fmt, half = isa.widening(wd)
    wide = fp.apply("CVTHI" if half else "CVTLO", a, dtype=fmt)
    return fp.apply(name, wide, b, c)


def test_encoding_assembler_and_disassembler_round_trip():
    src = ["SUB.f16lo G1, G0, S0", "SUB.f16hi G2, G0, S0", "ADD.bf16lo A0, G3, A0",
           "MAD.bf16hi A1, B[p1+], G4, A1", "MUL.f16lo B[p2+], G5, S1"]
    prog = assemble("\n".join(src + ["EXIT"]))
    assert [isa.decode(w).dtype for w in prog.words[:5]] == [4, 5, 6, 7, 4]
    assert [isa.widening(isa.decode(w).dtype) for w in prog.words[:3]] == [
        (isa.F16, 0), (isa.F16, 1), (isa.BF16, 0)]
    assert [isa.disassemble(w) for w in prog.words[:5]] == src
    assert isa.widening(isa.F16) is None and isa.widening(isa.F32) is None


@pytest.mark.parametrize("text", ["CVTLO.f16lo G0, G1", "CVTPK.bf16hi G0, G1, G2",
                                  "ADD.f16mid G0, G1, G2", "JMP.f16lo 0"])
def test_assembler_refuses_widening_where_it_has_no_meaning(text):
    with pytest.raises(PimAsmError, match="dtype"):
        assemble(text)


@widenings
@pytest.mark.parametrize("name", OPS)
def test_golden_is_the_conversion_then_the_op_on_every_pattern(wd, name):
    b, c = _operands(wd * 31 + len(name), WORDS.size)
    got = fp.apply(name, WORDS, b, c, dtype=wd)
    assert np.array_equal(got, _composition(name, wd, WORDS, b, c))


@widenings
@pytest.mark.parametrize("name", ["ADD", "SUB", "MUL", "MAD", "FMA"])
def test_golden_is_torchs_fp32_arithmetic_on_the_widened_tensor(wd, name):
    """What a batch norm under autocast computes: the 16-bit tensor cast to float32 (exact),
    then float32 ops (a NaN matches any NaN: the unit's is the canonical one)."""
    fmt, half = isa.widening(wd)
    b, c = _operands(wd, WORDS.size)
    h = (WORDS >> 16) if half else (WORDS & 0xFFFF)
    t16 = torch.from_numpy(h.astype(np.uint16).view(np.int16)).view(
        torch.float16 if fmt == isa.F16 else torch.bfloat16)
    ta = t16.float()
    tb, tc = (torch.from_numpy(v.view(np.float32).copy()) for v in (b, c))
    ref = {"ADD": lambda: ta + tb, "SUB": lambda: ta - tb, "MUL": lambda: ta * tb,
           "MAD": lambda: ta * tb + tc, "FMA": lambda: torch.addcmul(tc, ta, tb)}[name]()
    ref = ref.numpy().view(np.uint32)
    got = fp.apply(name, WORDS, b, c, dtype=wd)
    ok = (got == ref) | (fp.isnan(got) & fp.isnan(ref))
    if name == "FMA":     # torch's addcmul on CPU is not fused: compare with the fused op
        ok = got == fp.fma(fp.widen_a(WORDS, wd), b, c)
    assert ok.all(), np.flatnonzero(~ok)[:5]


@pytest.mark.parametrize("wd", [0, 4, 5, 6, 7])
def test_golden_and_isa_fault_a_conversion_with_a_widening_dtype(wd):
    word = (assemble("CVTHI.bf16 G0, G1").words[0] & ~7) | wd
    assert isa.fault_of(isa.decode(word), 0, [0] * isa.N_PTR, 16) == isa.E_OPCODE
    g = GoldenBackend(rows=4, cols=32)
    g.load_program([word])
    with pytest.raises(PimFaultError) as info:
        g.run()
    assert (info.value.code, info.value.pc) == (isa.E_OPCODE, 0)


@settings(max_examples=25, deadline=None)
@given(wd=st.sampled_from(sorted(isa.WIDENING.values())), n=st.integers(1, 40),
       seed=st.integers(0, 2**32 - 1))
def test_golden_vectorised_folds_equal_the_stepped_loop(wd, n, seed):
    """A widening ADD / MAD folding into an accumulator (what batch norm's statistics do) runs
    as a fold in the vectorised loop: the same sums, bit for bit, as instruction by
    instruction."""
    prog = assemble(f"""
        MOV A0, S0
        MOV A1, S0
    top: MOV G0, B[p0+]
        MOV G1, B[p1+]
        ADD.{isa.DTYPE_NAMES[wd]} A0, G0, A0
        MAD.{isa.DTYPE_NAMES[wd]} A1, G0, G1, A1
        LOOP c0, top
        MOV B[p2+], A0
        MOV B[p2+], A1
        EXIT""")
    rng = np.random.default_rng(seed)
    h = rng.integers(0, 2**16, (n, 8, 2)).astype(np.uint32)
    x = np.where(rng.random((n, 8, 2)) < 0.9, h & 0xBFFF, h)      # mostly finite, small
    x = (x[..., 0] | (x[..., 1] << 16)).astype(np.uint32)
    y = np.float32(rng.standard_normal((n, 8))).view(np.uint32)
    out = []
    for vec in (True, False):
        g = GoldenBackend(rows=4, cols=64, vectorise=vec)
        g.load_program(prog)
        g.write_bank(0, x)
        g.write_bank(64, y)
        g.set_scalars([0.0])
        g.set_pointers([0, 64, 128])
        g.set_counts([n])
        cycles = g.run()
        out.append((g.read_bank(128, 2), cycles))
    assert np.array_equal(out[0][0], out[1][0]) and out[0][1] == out[1][1]
    want0 = np.zeros(8, np.uint32)
    for i in range(n):
        want0 = fp.add(fp.widen_a(x[i], wd), want0)
    assert np.array_equal(out[0][0][0], want0)


# ---- RTL == golden -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def lanes():
    testing.skip_without_verilator()
    return testing.lane_rtl()


@widenings
@pytest.mark.parametrize("name", OPS)
def test_rtl_lanes_every_pattern(lanes, wd, name):
    """pyverilator lanes: operand a over all 65,536 patterns in both halves."""
    b, c = _operands(wd + 7 * len(name), WORDS.size)
    got = lanes.compute(name, WORDS, b, c, dtype=wd)
    want = fp.apply(name, WORDS, b, c, dtype=wd)
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, [(hex(WORDS[i]), hex(b[i]), hex(got[i]), hex(want[i])) for i in bad[:5]]


@widenings
def test_unit_every_pattern(wd):
    """The batch driver (the whole unit): ADD, SUB, MUL, MAD and MAX in the widening form on
    all 65,536 patterns of a."""
    testing.skip_without_verilator()
    drv = testing.driver()
    b, c = _operands(wd, WORDS.size)
    for name in ("ADD", "SUB", "MUL", "MAD", "MAX"):
        got = testing.run_lane_op(drv, name, WORDS, b, c, dtype=wd)
        want = fp.apply(name, WORDS, b, c, dtype=wd)
        bad = np.flatnonzero(got != want)
        assert bad.size == 0, [(name, hex(WORDS[i]), hex(got[i]), hex(want[i])) for i in bad[:5]]


@pytest.mark.parametrize("wd", [0, 4, 7])
def test_unit_faults_a_conversion_with_a_widening_dtype(wd):
    testing.skip_without_verilator()
    drv = testing.driver()
    word = (assemble("CVTLO.f16 G0, G1").words[0] & ~7) | wd
    drv.load_program([assemble("NOP").words[0], word])
    with pytest.raises(PimFaultError) as info:
        drv.run()
    assert (info.value.code, info.value.pc) == (isa.E_OPCODE, 1)


@pytest.mark.parametrize("dt", ["f16", "bf16"])
def test_amp_unscale16_takes_each_half_of_its_column_register_in_a_widening_form(dt):
    """amp_unscale_<dt> reads each 16-bit column once (a `pair ` phase) and the pair of fp32
    columns it packs takes the register's low values (even column), then its high ones (odd
    column), each in the first op's widening form: no conversion of its own."""
    from pimrt.pim import kernels as K
    src = K.STREAM_KERNELS[f"amp_unscale_{dt}"].program().source
    assert not any(line.startswith(("CVTLO", "CVTHI")) for line in src)
    b = K.STREAM_KERNELS[f"amp_unscale_{dt}"].block()
    mads = [line for line in src if line.startswith("MAD")]
    muls = [line for line in src if line.startswith("MUL")]
    reads = [line for line in src if line.startswith("MOV G")]
    assert reads == [f"MOV G{2 * k + 1}, B[p0+]" for k in range(b // 2)]
    assert mads == [f"MAD.{dt}{'hi' if i % 2 else 'lo'} A0, G{2 * (i // 2) + 1}, S1, A0"
                    for i in range(b)]
    assert muls == [f"MUL.{dt}{'hi' if i % 2 else 'lo'} B[p1+], G{2 * (i // 2) + 1}, S0"
                    for i in range(b)]
