"""The batch driver on several Verilated units at once (PimDriver(units=N), each unit beside
its own bank, a thread each): a kernel's chunks spread over the units give the bits and the
cycles of one unit, and of the golden model; bad unit or thread counts are clear errors."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from pimrt import cli
from pimrt.pim import kernels as K, testing
from pimrt.pim.errors import PimCycleCapError, PimError
from pimrt.pim.golden import GoldenBackend

ROWS = 16          # 512 columns: a few thousand values a chunk, so most draws take several


@pytest.fixture(scope="module")
def units():
    testing.skip_without_verilator()
    from pimrt.pim.driver import PimDriver
    return {n: PimDriver(rows=ROWS, cols=32, units=n) for n in (1, 2, 3)}


def _bits(a):
    return np.asarray(a, np.float32).view(np.uint32)


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(sorted(K.STREAM_KERNELS)), n=st.integers(1, 12_000),
       seed=st.integers(0, 2**32 - 1))
def test_stream_kernels_same_on_any_number_of_units(units, name, n, seed):
    k = K.STREAM_KERNELS[name]
    rng = np.random.default_rng(seed)
    arrays = {s: rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
              if i % 2 else (rng.standard_normal(n) * 5).astype(np.float32)
              for i, s in enumerate(k.inputs)}
    scal = {s: float(rng.standard_normal()) for s in k.scalars}
    ref = K.run_stream(GoldenBackend(rows=ROWS, cols=32), name, arrays, scal)
    for u, drv in units.items():
        got = K.run_stream(drv, name, arrays, scal)
        assert (got.cycles, got.chunks) == (ref.cycles, ref.chunks), (u, name)
        for s in ref.outputs:
            assert (_bits(got.outputs[s]) == _bits(ref.outputs[s])).all(), (u, name, s)


def test_batch_norm_and_pooling_same_on_three_units(units):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((6, 24, 8, 8)) * 4 + 300).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    gamma, beta = rng.random(24).astype(np.float32) + 0.5, rng.standard_normal(24).astype(np.float32)
    g, one, three = GoldenBackend(rows=ROWS, cols=32), units[1], units[3]
    fwd = [K.batchnorm_forward_2pass(b, x, gamma, beta) for b in (g, one, three)]
    for got in fwd[1:]:
        assert all((_bits(a) == _bits(b)).all() for a, b in zip(fwd[0], got))
    _, mean, invstd = fwd[0]
    bwd = [K.batchnorm_backward_channels(b, x, dy, gamma, mean, invstd) for b in (g, one, three)]
    for got in bwd[1:]:
        assert all((_bits(a) == _bits(b)).all() for a, b in zip(bwd[0], got))
    for fn in (K.avgpool2_forward, K.maxpool2_forward):
        ref = fn(g, x)
        assert (_bits(fn(one, x)) == _bits(ref)).all() and (_bits(fn(three, x)) == _bits(ref)).all()
    d2 = rng.standard_normal((6, 24, 4, 4)).astype(np.float32)
    ref = K.avgpool2_backward(g, d2, x.shape)
    assert (_bits(K.avgpool2_backward(three, d2, x.shape)) == _bits(ref)).all()
    assert len(three._siblings) == 2                 # the chunks did run on three units
    # the per-kernel cycle tally is the one unit's (the chunks' cycles summed)
    for name in ("bn_stats_ch", "avgpool2_fwd", "maxpool2_fwd"):
        assert three.stats[name][:2] == one.stats[name][:2] == g.stats[name][:2], name


def test_a_chunk_at_the_cycle_cap_raises_and_the_units_stay_usable(units):
    x = np.ones(10_000, np.float32)
    with pytest.raises(PimCycleCapError, match="did not EXIT within 50 cycles"):
        K.run_stream(units[3], "relu_fwd", {"x": x}, max_cycles=50)
    y, _ = K.relu_forward(units[3], -x)
    assert (_bits(y) == 0).all()                     # relu(-1) = +0 on every chunk


def test_unit_and_thread_counts_are_checked(monkeypatch):
    testing.skip_without_verilator()
    from pimrt.pim.driver import PimDriver, default_units
    with pytest.raises(PimError, match="PimDriver units must be a whole number"):
        PimDriver(rows=ROWS, cols=32, units=0)
    with pytest.raises(PimError, match="Verilator threads must be an integer from 1 to 64"):
        PimDriver(rows=ROWS, cols=32, threads=0)
    monkeypatch.setenv("PIMRT_PIM_UNITS", "two")
    with pytest.raises(PimError, match="PIMRT_PIM_UNITS must be a whole number .* 'two'"):
        default_units()
    monkeypatch.setenv("PIMRT_PIM_UNITS", "3")
    assert default_units() == 3
    assert PimDriver(rows=ROWS, cols=32).units == 3
    assert PimDriver(rows=ROWS, cols=32, record=True).units == 1   # accesses in program order


def test_bench_unit_and_thread_options_are_checked(capsys):
    assert cli.main(["bench", "pim", "--units", "0"]) == 2
    assert "--units must be 1 or more, got 0" in capsys.readouterr().err
    assert cli.main(["bench", "pim_ops", "--threads", "0"]) == 2
    assert "--threads must be 1 or more, got 0" in capsys.readouterr().err


@pytest.mark.slow
def test_threaded_model_equals_golden():
    """Verilator --threads 2 (the lanes are processes of their own, so it may schedule them
    apart): same bits and cycles; slower here (docs/pim.md)."""
    testing.skip_without_verilator()
    from pimrt.pim.driver import PimDriver
    drv, g = PimDriver(rows=ROWS, cols=32, threads=2, units=1), GoldenBackend(rows=ROWS, cols=32)
    rng = np.random.default_rng(2)
    arrays = {s: rng.standard_normal(3000).astype(np.float32) for s in ("w", "g", "v")}
    scal = {"weight_decay": 1e-4, "momentum": 0.9, "neg_lr": -0.1}
    a, b = K.run_stream(drv, "sgd", arrays, scal), K.run_stream(g, "sgd", arrays, scal)
    assert a.cycles == b.cycles
    assert all((_bits(a.outputs[s]) == _bits(b.outputs[s])).all() for s in b.outputs)
