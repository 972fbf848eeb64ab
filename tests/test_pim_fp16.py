"""16-bit lanes (binary16, bfloat16; docs/pim.md "16-bit lanes"): golden model == torch's CPU
kernels, bit for bit (a NaN result of fp16 arithmetic matches any NaN: torch's own fp16 NaN
payloads depend on the tensor's length), exhaustive over the 65,536 patterns for the
conversions and the unary ops, edge cases and hypothesis for the binary ones; then the RTL
(pyverilator lanes and the batch driver) == golden model, bit for bit."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from pimrt.pim import fp, isa, testing
from pimrt.pim.asm import assemble
from pimrt.pim.errors import PimAsmError, PimFaultError
from pimrt.pim.golden import GoldenBackend

torch = pytest.importorskip("torch")

DTYPES = {isa.F16: torch.float16, isa.BF16: torch.bfloat16}
IDS = {isa.F16: "f16", isa.BF16: "bf16"}
ALL16 = np.arange(65536, dtype=np.uint32)
BINARY = ["ADD", "SUB", "MUL", "MAX", "MIN", "CMPGT", "CMPGE", "CMPEQ"]
dtypes = pytest.mark.parametrize("dt", [isa.F16, isa.BF16], ids=IDS.get)


def _t(h, dt):
    """16-bit patterns -> a torch tensor of that dtype."""
    return torch.from_numpy(np.asarray(h, np.uint32).astype(np.uint16).view(np.int16)).view(DTYPES[dt])


def _bits(t) -> np.ndarray:
    return t.contiguous().view(torch.int16).numpy().view(np.uint16).astype(np.uint32)


def torch_ref(name, dt, a, b=None, c=None) -> np.ndarray:
    """What torch's CPU kernels give for lane op `name` on 16-bit tensors (compares: 0xFFFF
    where true)."""
    ta = _t(a, dt)
    tb = None if b is None else _t(b, dt)
    if name == "ADD":
        return _bits(ta + tb)
    if name == "SUB":
        return _bits(ta - tb)
    if name == "MUL":
        return _bits(ta * tb)
    if name == "MAD":
        return _bits(ta * tb + _t(c, dt))
    if name == "FMA":
        return _bits(torch.addcmul(_t(c, dt), ta, tb))
    if name == "MAX":
        return _bits(torch.maximum(ta, tb))
    if name == "MIN":
        return _bits(torch.minimum(ta, tb))
    cmp = {"CMPGT": torch.gt, "CMPGE": torch.ge, "CMPEQ": torch.eq}[name]
    return np.where(cmp(ta, tb).numpy(), np.uint32(0xFFFF), np.uint32(0))


def agrees(name, dt, got, ref) -> np.ndarray:
    """got == ref bit for bit; except: an fp16 NaN matches any NaN (torch's fp16 payloads
    differ between its vectorised loop and its scalar tail), and a MAX/MIN of +0 and -0 matches
    either zero (torch's vectorised loop returns the second operand, its tail the first)."""
    got, ref = np.asarray(got, np.uint32), np.asarray(ref, np.uint32)
    ok = got == ref
    if dt == isa.F16:
        ok |= fp.isnan(fp.widen16(got, dt)) & fp.isnan(fp.widen16(ref, dt))
    if name in ("MAX", "MIN"):
        ok |= ((got & 0x7FFF) == 0) & ((ref & 0x7FFF) == 0)
    return ok


def _check(name, dt, a, b=None, c=None, got=None):
    got = fp.apply16(name, dt, a, b, c) if got is None else got
    ref = torch_ref(name, dt, a, b, c)
    bad = np.flatnonzero(~agrees(name, dt, got, ref))
    assert bad.size == 0, [(name, IDS[dt], *(hex(int(v[i])) for v in (a, b, c) if v is not None),
                            "got", hex(int(got[i])), "torch", hex(int(ref[i]))) for i in bad[:5]]


# ---- conversions: golden == torch ----------------------------------------------------------

@dtypes
def test_widen_every_pattern_equals_torch(dt):
    """All 65,536 patterns to binary32: torch's tensor conversion (payload of an fp16 NaN kept
    and made quiet, as its vectorised loop gives it)."""
    want = _t(ALL16, dt).float().view(torch.int32).numpy().view(np.uint32)
    assert (fp.widen16(ALL16, dt) == want).all()


def rounding_boundaries(dt) -> np.ndarray:
    """binary32 patterns at every 16-bit rounding boundary: each finite 16-bit value, the
    midpoints to its neighbours (ties), one binary32 ulp either side of those, and the
    overflow threshold."""
    w = fp.widen16(ALL16, dt)
    mag = ALL16 & 0x7FFF
    with np.errstate(all="ignore"):               # signalling NaNs cast to float64
        x = fp.f32(w).astype(np.float64)
        up = fp.f32(fp.widen16(np.where(mag < 0x7FFF, ALL16 + 1, ALL16), dt)).astype(np.float64)
        below = fp.f32(fp.widen16(np.where(mag > 0, ALL16 - 1, ALL16), dt)).astype(np.float64)
        nxt = np.where(np.isinf(up), 2 * x - below, up)       # past the largest finite: its ulp
        mid = ((x + nxt) / 2).astype(np.float32).view(np.uint32)[np.isfinite(x)]
    pts = np.concatenate([w, w + 1, w - 1, mid, mid + 1, mid - 1, testing.EDGES])
    return pts.astype(np.uint32)


@dtypes
def test_narrow_rounding_boundaries_equal_torch(dt):
    u = rounding_boundaries(dt)
    assert u.size > 5 * 65536
    want = _bits(torch.from_numpy(u.view(np.int32)).view(torch.float32).to(DTYPES[dt]))
    got = fp.narrow16(u, dt)
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, [(hex(u[i]), hex(got[i]), hex(want[i])) for i in bad[:5]]


@dtypes
@settings(max_examples=20)
@given(seed=st.integers(0, 2**32 - 1))
def test_narrow_random_words_equal_torch(dt, seed):
    u = np.random.default_rng(seed).integers(0, 2**32, 1 << 16, dtype=np.uint64).astype(np.uint32)
    want = _bits(torch.from_numpy(u.view(np.int32)).view(torch.float32).to(DTYPES[dt]))
    assert (fp.narrow16(u, dt) == want).all()


def test_nan_conversions_are_torchs():
    assert fp.narrow16(np.array([0x7FC00000, 0xFF800001, 0x7FFFFFFF], np.uint32), isa.BF16).tolist() == [0xFFFF] * 3
    assert fp.narrow16(np.array([0x7F802000, 0xFF800001], np.uint32), isa.F16).tolist() == [0x7E01, 0xFE00]
    assert fp.widen16(np.array([0x7C01, 0xFC00], np.uint32), isa.F16).tolist() == [0x7FC02000, 0xFF800000]
    assert fp.canon16(isa.F16) == 0x7E00 and fp.canon16(isa.BF16) == 0xFFFF


# ---- unary ops over every pattern: golden == torch -----------------------------------------

@dtypes
def test_relu_and_relu6_every_pattern(dt):
    """ReLU as the kernels compute it, MAX(x, +0), and ReLU6, MIN(MAX(x, +0), 6), against
    torch.relu and torch.nn.functional.relu6 on all 65,536 patterns."""
    zero, six = np.zeros_like(ALL16), fp.narrow16(np.full(ALL16.shape, 0x40C00000, np.uint32), dt)
    y = fp.apply16("MAX", dt, ALL16, zero)
    ref = _bits(torch.relu(_t(ALL16, dt)))
    assert agrees("RELU", dt, y, ref).all()
    y6 = fp.apply16("MIN", dt, y, six)
    ref6 = _bits(torch.nn.functional.relu6(_t(ALL16, dt)))
    assert agrees("RELU", dt, y6, ref6).all()


@dtypes
@pytest.mark.parametrize("name", BINARY + ["MAD", "FMA"])
def test_every_pattern_against_each_edge(dt, name):
    """Each binary op with operand a over all 65,536 patterns and b (and MAD's c) every edge
    value, both orders: 2 x 32 x 65,536 cases an op."""
    for e in testing.EDGES16[dt]:
        k = np.full_like(ALL16, e)
        _check(name, dt, ALL16, k, ALL16[::-1].copy())
        _check(name, dt, k, ALL16, k)


# ---- binary ops: edge cases and hypothesis: golden == torch --------------------------------

@dtypes
@pytest.mark.parametrize("name", BINARY + ["MAD", "FMA"])
def test_edge_cross_product(dt, name):
    e = testing.EDGES16[dt]
    a, b, c = (g.ravel() for g in np.meshgrid(e, e, e, indexing="ij"))
    _check(name, dt, a, b, c)


def _near(dt):
    """16-bit patterns: random, or from the edges, or an edge's neighbour."""
    e = [int(v) for v in testing.EDGES16[dt]]
    return (st.integers(0, 0xFFFF) | st.sampled_from(e)
            | st.tuples(st.sampled_from(e), st.integers(-3, 3)).map(lambda t: (t[0] + t[1]) & 0xFFFF))


@dtypes
@given(data=st.data())
def test_binary_ops_hypothesis(dt, data):
    n = 64
    a, b, c = (np.array(data.draw(st.lists(_near(dt), min_size=n, max_size=n)), np.uint32)
               for _ in range(3))
    for name in BINARY + ["MAD", "FMA"]:
        _check(name, dt, a, b, c)


@dtypes
def test_ties_overflow_and_cancellation(dt):
    """Sums landing exactly halfway between 16-bit values (ties to even), products that
    overflow to infinity or underflow to subnormals and zero, and x - x = +0."""
    rng = np.random.default_rng(5)
    a = rng.integers(0, 65536, 1 << 16).astype(np.uint32)
    half_ulp = fp.narrow16(((fp.widen16(a, dt) & np.uint32(0x7F800000))
                            - np.uint32((12 if dt == isa.F16 else 9) << 23)) & np.uint32(0x7F800000), dt)
    _check("ADD", dt, a, half_ulp)
    _check("SUB", dt, a, a)
    _check("MUL", dt, a, a)
    big = np.full_like(a, 0x7BFF if dt == isa.F16 else 0x7F7F)
    _check("MUL", dt, a, big)
    _check("MAD", dt, a, big, a)
    _check("FMA", dt, a, big, a)
    _check("FMA", dt, a, a, fp.apply16("MUL", dt, a, a) ^ 0x8000)   # c = -round(a*a)


def test_packed_words_keep_element_order():
    """Element 2i of a column is lane i's low half: a uint16 array viewed as uint32 words."""
    rng = np.random.default_rng(1)
    for dt in (isa.F16, isa.BF16):
        a, b = (rng.integers(0, 65536, 64).astype(np.uint16) for _ in range(2))
        words = fp.apply("ADD", a.view(np.uint32), b.view(np.uint32), dtype=dt)
        assert (words.view(np.uint16).astype(np.uint32) == fp.apply16("ADD", dt, a, b)).all()
        lo, hi = fp.apply("CVTLO", a.view(np.uint32), dtype=dt), fp.apply("CVTHI", a.view(np.uint32), dtype=dt)
        assert (lo == fp.widen16(a[0::2], dt)).all() and (hi == fp.widen16(a[1::2], dt)).all()
        back = fp.apply("CVTPK", lo, hi, dtype=dt).view(np.uint16)
        nan = fp.isnan(fp.widen16(a, dt))         # a NaN comes back as torch narrows it
        assert (back == a)[~nan].all() and fp.isnan(fp.widen16(back[nan], dt)).all()


# ---- the ISA: assembler, faults ------------------------------------------------------------

def test_assembler_dtype_suffixes_round_trip():
    prog = assemble("""
        ADD.f16 G0, G1, B[p0+]
        MAD.bf16 B[p1+], G0, S0, G2
        CVTLO.f16 G3, B[p2+]
        CVTPK.bf16 B[p3+], G3, G4
        ADD.f32 G0, G0, G0
        EXIT""")
    assert [isa.decode(w).dtype for w in prog.words[:5]] == [1, 2, 1, 2, 0]
    assert assemble("\n".join(isa.disassemble(w) for w in prog.words)).words == prog.words
    assert isa.disassemble(prog.words[0]) == "ADD.f16 G0, G1, B[p0+]"


@pytest.mark.parametrize("text, needle", [
    ("CVTLO G0, G1", "needs a 16-bit dtype"),
    ("ADD.f8 G0, G1, G2", "bad dtype suffix"),
    ("LOOP.f16 c0, 0", "bad dtype suffix"),
])
def test_assembler_refuses_bad_dtypes(text, needle):
    with pytest.raises(PimAsmError, match=needle):
        assemble(text)


@pytest.mark.parametrize("dtype_bits", [0, 3, 4, 5, 6, 7])
def test_reserved_dtype_bits_fault(dtype_bits):
    """dtype 3 is reserved on every data op; a conversion takes only a plain 16-bit dtype (not
    binary32, not a widening form)."""
    cvt = (assemble("CVTLO.f16 G0, G0").words[0] & ~7) | dtype_bits
    add = assemble("ADD G0, G0, G0").words[0] | dtype_bits
    for words in ([cvt], [add]) if dtype_bits == 3 else ([cvt],):
        g = GoldenBackend(rows=4, cols=32)
        g.load_program(words)
        with pytest.raises(PimFaultError) as info:
            g.run()
        assert info.value.code == isa.E_OPCODE


def test_golden_16bit_accumulator_is_stepped_and_equal():
    """A 16-bit ADD into an accumulator rounds to 16 bits each time: the vectorised loop must
    not fold it in float32."""
    prog = assemble("""
        MOV A0, S0
    top: ADD.f16 A0, A0, B[p0+]
        LOOP c0, top
        MOV B[p1+], A0
        EXIT""")
    x = np.full((40, 8), 0x3C003C00, np.uint32)      # 1.0 in both halves
    out = []
    for vec in (True, False):
        g = GoldenBackend(rows=4, cols=32, vectorise=vec)
        g.load_program(prog)
        g.write_bank(0, x)
        g.set_scalars([0.0])
        g.set_pointers([0, 100])
        g.set_counts([40])
        g.run()
        out.append(g.read_bank(100, 1))
    assert (out[0] == out[1]).all()
    assert (out[0].view(np.uint16) == fp.narrow16(np.float32(40).view(np.uint32), isa.F16)).all()


# ---- RTL == golden -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def lanes():
    testing.skip_without_verilator()
    return testing.lane_rtl()


@dtypes
@pytest.mark.parametrize("name", sorted(isa.ALL_LANE_OPS))
def test_rtl_lanes_edges(lanes, dt, name):
    """pyverilator lanes on every pair of edge values (two to a lane word, so both halves see
    every case), conversions on edge binary32 words too."""
    e = testing.EDGES16[dt]
    a, b = (g.ravel() for g in np.meshgrid(e, e, indexing="ij"))
    c = np.resize(e[::-1], a.shape).astype(np.uint32)
    wa = (a | (b[::-1] << 16)).astype(np.uint32)
    wb = (b | (a[::-1] << 16)).astype(np.uint32)
    wc = (c | (c[::-1] << 16)).astype(np.uint32)
    if name in ("CVTPK",):
        wa, wb = testing.edge_pairs()
    got = lanes.compute(name, wa, wb, wc, dtype=dt)
    want = fp.apply(name, wa, wb, wc, dtype=dt)
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, [(hex(wa[i]), hex(wb[i]), hex(got[i]), hex(want[i])) for i in bad[:5]]


def _unit_check(name, dt, a, b, c):
    drv = testing.driver()
    got = testing.run_lane_op(drv, name, a, b, c, dtype=dt)
    want = fp.apply(name, a, b, c, dtype=dt)
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, [(name, hex(a[i]), hex(b[i]), hex(c[i]), hex(got[i]), hex(want[i]))
                           for i in bad[:5]]


@dtypes
def test_unit_conversions_every_pattern(dt):
    """The batch driver: CVTLO and CVTHI on all 65,536 patterns (in both halves), CVTPK on
    every rounding boundary."""
    testing.skip_without_verilator()
    w = (ALL16 | (ALL16[::-1] << 16)).astype(np.uint32)
    for name in ("CVTLO", "CVTHI"):
        _unit_check(name, dt, w, w, w)
    u = rounding_boundaries(dt)
    _unit_check("CVTPK", dt, u, u[::-1].copy(), u)


@dtypes
def test_unit_unary_every_pattern(dt):
    """The batch driver: ReLU's MAX(x, +0), MIN(x, 6), MUL(x, 0.25) and ADD(x, 1) on all
    65,536 patterns."""
    testing.skip_without_verilator()
    w = (ALL16 | (ALL16[::-1] << 16)).astype(np.uint32)
    for name, k in (("MAX", 0), ("MIN", 0x40C00000), ("MUL", 0x3E800000), ("ADD", 0x3F800000)):
        h = int(fp.narrow16(np.array([k], np.uint32), dt)[0])
        _unit_check(name, dt, w, np.full_like(w, h | h << 16), w)


@dtypes
@settings(max_examples=6)
@given(seed=st.integers(0, 2**32 - 1))
def test_unit_binary_ops_random(dt, seed):
    """The batch driver: every lane op on 32,768 random words (a fifth of them edge values)."""
    testing.skip_without_verilator()
    rng = np.random.default_rng(seed)
    n = 1 << 15
    e = testing.EDGES16[dt]
    a, b, c = (np.where(rng.random(n) < 0.2, rng.choice(e, n) | (rng.choice(e, n) << 16),
                        rng.integers(0, 2**32, n, dtype=np.uint64)).astype(np.uint32)
               for _ in range(3))
    for name in sorted(isa.ALL_LANE_OPS):
        _unit_check(name, dt, a, b, c)


@pytest.mark.slow
@dtypes
@pytest.mark.parametrize("name", BINARY + ["MAD", "FMA", "SEL"])
def test_unit_every_pattern_against_each_edge(dt, name):
    """The batch driver: operand a over all 65,536 patterns against every edge b, as
    test_every_pattern_against_each_edge checks the golden model against torch."""
    testing.skip_without_verilator()
    for e in testing.EDGES16[dt]:
        k = np.full(65536, e | (e << 16), np.uint32)
        w = (ALL16 | (ALL16[::-1] << 16)).astype(np.uint32)
        _unit_check(name, dt, w, k, w[::-1].copy())
        _unit_check(name, dt, k, w, k)


# ---- stream ops (pimrt.pim.ops16, what `pimrt bench pim16` measures) -----------------------

def test_dtype_defines_match_verilog():
    import re

    from pimrt.pim import build
    text = (build.HW_DIR / "pim_defs.vh").read_text()
    defs = {m[0]: int(m[1]) for m in re.findall(r"`define (\w+)\s+\d+'d(\d+)", text)}
    assert {"DT_F32": isa.F32, "DT_F16": isa.F16, "DT_BF16": isa.BF16}.items() <= defs.items()


def _stream_inputs(name, dt, lanes, blocks, rng):
    from pimrt.pim import ops16
    words = ops16.block(name) * lanes * blocks * (2 if name == "NARROW" else 1)
    return [rng.integers(0, 2**32, words, dtype=np.uint64).astype(np.uint32)
            for _ in range(ops16.OPS[name].inputs)]


@pytest.mark.parametrize("dt", [isa.F32, isa.F16, isa.BF16], ids=["f32", "f16", "bf16"])
def test_stream_ops_golden_compute_the_lane_op(dt):
    """Each stream op's output is its lane op on the input words, in the documented layout,
    and costs (phases * b + 1) cycles a block plus EXIT."""
    from pimrt.pim import ops16
    rng = np.random.default_rng(dt)
    L = 8
    for name, op in ops16.OPS.items():
        if dt == isa.F32 and name in ("WIDEN", "NARROW"):
            continue
        ins = _stream_inputs(name, dt, L, 3, rng)
        g = GoldenBackend(rows=64, cols=32)
        g.set_scalars([0.0])
        y, cycles = ops16.run(g, name, dt, ins)
        b = ops16.block(name)
        assert cycles == 3 * (len(op.phases) * b + 1) + 1
        if name == "RELU":
            want = fp.apply("MAX", ins[0], np.zeros_like(ins[0]), dtype=dt)
        elif name in ("WIDEN", "NARROW"):
            cols = ins[0].reshape(-1, b, L)
            if name == "WIDEN":
                want = np.stack([fp.apply("CVTLO", cols, dtype=dt), fp.apply("CVTHI", cols, dtype=dt)], 1)
            else:
                pairs = cols.reshape(-1, 2, b, L)
                want = fp.apply("CVTPK", pairs[:, 0], pairs[:, 1], dtype=dt)
        else:
            want = fp.apply(name, *ins, dtype=dt)
        assert (y == np.asarray(want).ravel()).all(), name


@pytest.mark.parametrize("lanes", [8, 16])
def test_stream_ops_rtl_equal_golden(lanes):
    """The batch driver at 8 and 16 lanes: every stream op in every dtype == golden model,
    values and cycles (the cycle figures of docs/pim.md)."""
    testing.skip_without_verilator()
    from pimrt.pim import ops16
    from pimrt.pim.driver import PimDriver
    drv = PimDriver(lanes=lanes, units=1)          # the default bank: the tests' cached builds
    g = GoldenBackend(lanes=lanes)
    rng = np.random.default_rng(lanes)
    for b in (drv, g):
        b.set_scalars([0.0])
    for name in ops16.OPS:
        for dt in (isa.F32, isa.F16, isa.BF16):
            if dt == isa.F32 and name in ("WIDEN", "NARROW"):
                continue
            ins = _stream_inputs(name, dt, lanes, 9, rng)
            (y, c), (yg, cg) = ops16.run(drv, name, dt, ins), ops16.run(g, name, dt, ins)
            assert c == cg and (y == yg).all(), (name, dt)
