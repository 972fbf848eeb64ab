"""Lane operations: RTL (hw/ lanes under pyverilator, and the unit through the batch driver)
== golden model == numpy float32, bit for bit, on edge cases and random values."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from pimrt.pim import fp, isa, testing

OPS = list(isa.LANE_OPS)
ARITH = ["ADD", "SUB", "MUL", "MAD", "FMA"]
bits = st.integers(0, 2**32 - 1)
column = st.lists(bits, min_size=8, max_size=8).map(lambda v: np.array(v, np.uint32))


def _abc(name, a, b, c=None):
    if c is None:
        c = np.resize(testing.EDGES[::-1], a.shape).astype(np.uint32)
    if name == "SEL":
        c = np.where(np.arange(a.size) % 3 == 0, np.uint32(0), c).astype(np.uint32)
    return a, b, c


# ---- golden == numpy (no build needed) ---------------------------------------------------

@pytest.mark.parametrize("name", OPS)
def test_golden_matches_numpy_on_edges(name):
    a, b, c = _abc(name, *testing.edge_pairs())
    got = fp.apply(name, a, b, c)
    ref = testing.numpy_reference(name, a, b, c)
    assert testing.agrees_with_numpy(name, got, ref).all()


@given(a=column, b=column, c=column)
def test_golden_matches_numpy_random(a, b, c):
    for name in OPS:
        assert testing.agrees_with_numpy(name, fp.apply(name, a, b, c),
                                         testing.numpy_reference(name, a, b, c)).all(), name


def test_nan_results_are_canonical():
    a, b = testing.edge_pairs()
    for name in ARITH + ["MAX", "MIN"]:
        got = fp.apply(name, a, b, a)
        assert (got[fp.isnan(got)] == isa.QNAN).all()


def test_signed_zero_and_ties_policy():
    pz, nz = np.uint32(0), np.uint32(0x80000000)
    assert fp.add(pz, nz) == 0 and fp.add(nz, nz) == nz and fp.sub(pz, pz) == 0
    assert fp.vmax(nz, pz) == nz and fp.vmax(pz, nz) == pz    # ties keep the first operand
    assert fp.vmin(nz, pz) == nz and fp.vmin(pz, nz) == pz
    one, half_ulp = np.uint32(0x3F800000), np.uint32(0x33800000)
    assert fp.add(one, half_ulp) == one                          # tie -> even
    assert fp.add(np.uint32(0x3F800001), half_ulp) == 0x3F800002  # tie -> even (up)
    assert fp.mul(np.uint32(0x7F7FFFFF), np.uint32(0x40000000)) == 0x7F800000  # overflow
    assert fp.mul(np.uint32(0x00800000), np.uint32(0x3F000000)) == 0x00400000  # to subnormal


def test_mad_rounds_twice():
    a = np.float32(1 + 2**-12)
    got = fp.mad(*(np.array([v], np.float32).view(np.uint32) for v in (a, a, np.float32(-1))))
    assert got.view(np.float32)[0] == np.float32(a * a) - np.float32(1)


def test_fma_rounds_once():
    """FMA: a*b + c exact, then one rounding (2^-11 + 2^-24 here; MAD's first rounding loses
    the 2^-24), as torch.addcmul on CPU."""
    a = np.float32(1 + 2**-12)
    got = fp.fma(*(np.array([v], np.float32).view(np.uint32) for v in (a, a, np.float32(-1))))
    assert got.view(np.float32)[0] == np.float32(2**-11 + 2**-24)
    torch = pytest.importorskip("torch")
    t = torch.tensor([float(a)])
    assert torch.addcmul(torch.tensor([-1.0]), t, t).item() == 2**-11 + 2**-24


# ---- RTL lanes (pyverilator) == golden ---------------------------------------------------

@pytest.fixture(scope="module")
def lanes():
    testing.skip_without_verilator()
    return testing.lane_rtl()


@pytest.mark.parametrize("name", OPS)
def test_rtl_lanes_match_golden_on_edges(lanes, name):
    a, b, c = _abc(name, *testing.edge_pairs())
    got = lanes.compute(name, a, b, c)
    want = fp.apply(name, a, b, c)
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, [(name, hex(a[i]), hex(b[i]), hex(c[i]), hex(got[i]), hex(want[i]))
                           for i in bad[:5]]


@given(a=column, b=column, c=column)
def test_rtl_lanes_match_golden_random(lanes, a, b, c):
    for name in OPS:
        got = lanes.compute(name, a, b, c)
        assert (got == fp.apply(name, a, b, c)).all(), (name, a, b, c, got)


@given(e=st.lists(st.sampled_from(list(testing.EDGES)) | bits, min_size=24, max_size=24))
def test_rtl_lanes_mixed_edges(lanes, e):
    a, b, c = (np.array(e[i::3], np.uint32) for i in range(3))
    for name in ARITH:
        assert (lanes.compute(name, a, b, c) == fp.apply(name, a, b, c)).all(), name


# ---- the unit (batch driver) on big random buffers == golden == numpy --------------------

def _random_bits(rng, n):
    v = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    kind = rng.integers(0, 8, n)
    v = np.where(kind == 0, v & np.uint32(0x807FFFFF), v)                      # subnormals, zeros
    v = np.where(kind == 1, (v & np.uint32(0x80FFFFFF)) | np.uint32(0x3F000000), v)  # near 1
    v = np.where(kind == 2, rng.choice(testing.EDGES, n), v)
    return v.astype(np.uint32)


@pytest.mark.parametrize("name", OPS)
def test_unit_lane_ops_bulk(name):
    testing.skip_without_verilator()
    drv = testing.driver()
    rng = np.random.default_rng(abs(hash(name)) % 2**32)
    n = 1 << 15
    a, b, c = (_random_bits(rng, n) for _ in range(3))
    b[::5] = (a[::5] & np.uint32(0x807FFFFF)) | ((((a[::5] >> 23) & 0xFF) - 3) & 0xFF) << 23
    got = testing.run_lane_op(drv, name, a, b, c)
    want = fp.apply(name, a, b, c)
    assert (got == want).all()
    assert testing.agrees_with_numpy(name, got, testing.numpy_reference(name, a, b, c)).all()


# ---- the adder's alignment, sticky and normalisation paths, on the unit ------------------

def _neighbours(rng, a, distance):
    """b: a's magnitude moved down `distance` binades (clamped at the subnormals), a few low
    mantissa bits changed, a random sign: every alignment distance, sticky bits, and with a
    sign change near-total cancellation (the long normalisation shifts)."""
    e = (a >> 23) & np.uint32(0xFF)
    e2 = np.where(e > distance, e - distance, np.uint32(0)).astype(np.uint32)
    low = rng.integers(0, 1 << rng.integers(1, 24), a.size).astype(np.uint32)
    b = ((a & np.uint32(0x007FFFFF)) ^ low) | (e2 << np.uint32(23))
    return (b | (rng.integers(0, 2, a.size).astype(np.uint32) << np.uint32(31))).astype(np.uint32)


@settings(max_examples=12)
@given(seed=st.integers(0, 2**32 - 1), top=st.integers(1, 254),
       far=st.integers(0, 40))
def test_unit_adder_every_alignment_and_cancellation(seed, top, far):
    """hw/fp_add.vh computes its datapath as multiplexers (for simulation speed): ADD, SUB
    and MAD on the batch driver == golden == numpy at every exponent distance 0..far, near
    cancellation, subnormal results and rounding carries."""
    testing.skip_without_verilator()
    drv = testing.driver()
    rng = np.random.default_rng(seed)
    n = 4096
    exp = rng.integers(max(top - 30, 0), top + 1, n).astype(np.uint32)
    a = (rng.integers(0, 1 << 23, n).astype(np.uint32) | (exp << np.uint32(23))
         | (rng.integers(0, 2, n).astype(np.uint32) << np.uint32(31))).astype(np.uint32)
    b = _neighbours(rng, a, rng.integers(0, far + 1, n).astype(np.uint32))
    c = _neighbours(rng, fp.mul(a, b), rng.integers(0, far + 1, n).astype(np.uint32))
    for name in ("ADD", "SUB", "MAD", "MUL", "FMA"):
        got = testing.run_lane_op(drv, name, a, b, c)
        want = fp.apply(name, a, b, c)
        bad = np.flatnonzero(got != want)
        assert bad.size == 0, [(name, hex(a[i]), hex(b[i]), hex(c[i]), hex(got[i]),
                                hex(want[i])) for i in bad[:5]]
        assert testing.agrees_with_numpy(name, got, testing.numpy_reference(name, a, b, c)).all()
