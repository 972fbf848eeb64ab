"""The batch driver (C++ around the Verilated model, through cffi): every kernel on big
buffers == golden (values and cycles), faults, the cycle cap, host-port mode, the build
cache and the message when Verilator is missing."""
import numpy as np
import pytest

from pimrt.pim import build, isa, kernels as K, testing
from pimrt.pim.asm import assemble
from pimrt.pim.errors import PimBuildError, PimCycleCapError, PimFaultError
from pimrt.pim.golden import GoldenBackend


@pytest.fixture(scope="module")
def drv():
    testing.skip_without_verilator()
    return testing.driver()


def _same(a, b):
    """Bit for bit, any dtype (the 16-bit kernels' outputs are uint16 patterns)."""
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and (a.view(np.uint8) == b.view(np.uint8)).all()


@pytest.mark.parametrize("name", sorted(K.STREAM_KERNELS))
def test_stream_kernels_driver_equal_golden(drv, name):
    k = K.STREAM_KERNELS[name]
    rng = np.random.default_rng(len(name) + 100)
    n = 60_001                                        # several chunks of the 8192-column bank
    arrays = {s: (rng.standard_normal(n) * 3).astype(np.float32) for s in k.inputs}
    scal = {s: float(rng.standard_normal()) for s in k.scalars}
    g = GoldenBackend()
    rg, rd = K.run_stream(g, name, arrays, scal), K.run_stream(drv, name, arrays, scal)
    assert rd.cycles == rg.cycles and rd.chunks == rg.chunks
    for s in rg.outputs:
        assert _same(rd.outputs[s], rg.outputs[s]), s


def test_training_step_pieces_driver_equal_golden(drv):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((8, 16, 8, 8)).astype(np.float32)
    gamma, beta = rng.random(16).astype(np.float32) + 0.5, rng.standard_normal(16).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    g = GoldenBackend()
    fwd_g, fwd_d = K.batchnorm_forward(g, x, gamma, beta), K.batchnorm_forward(drv, x, gamma, beta)
    assert all(_same(a, b) for a, b in zip(fwd_g, fwd_d))
    _, mean, invstd = fwd_g
    bwd_g = K.batchnorm_backward(g, x, dy, gamma, mean, invstd)
    bwd_d = K.batchnorm_backward(drv, x, dy, gamma, mean, invstd)
    assert all(_same(a, b) for a, b in zip(bwd_g, bwd_d))
    for fn in (K.avgpool2_forward, K.maxpool2_forward):
        assert _same(fn(drv, x), fn(g, x))
    d2 = rng.standard_normal((8, 16, 4, 4)).astype(np.float32)
    assert _same(K.avgpool2_backward(drv, d2, x.shape), K.avgpool2_backward(g, d2, x.shape))


def test_faults_and_cycle_cap(drv):
    drv.load_program([isa.encode_plain("NOP"), 0xF8000000])
    with pytest.raises(PimFaultError, match="unknown opcode") as info:
        drv.run()
    assert info.value.pc == 1
    drv.load_program(assemble("NOP\nNOP\nMOV G0, B[p3]\nEXIT"))
    drv.set_pointers({3: drv.depth})
    with pytest.raises(PimFaultError, match="pc 2: bank pointer past the end") as info:
        drv.run()
    drv.load_program(assemble("top: NOP\nNOP\nJMP top"))
    with pytest.raises(PimCycleCapError, match="within 100000 cycles") as info:
        drv.run(max_cycles=100_000)
    assert info.value.pc in (0, 1, 2)
    drv.load_program(assemble("EXIT"))
    assert drv.run() == 1                            # usable after the cap


def test_via_host_port_equals_backdoor(drv):
    from pimrt.pim.driver import PimDriver
    port = PimDriver(via_port=True)
    x = np.random.default_rng(6).standard_normal(5000).astype(np.float32)
    a, b = K.relu_forward(drv, x), K.relu_forward(port, x)
    assert _same(a[0], b[0]) and (a[1] == b[1]).all()
    assert port.clock_count > 3 * 5000 / 8           # data moved a column per clock


def test_build_key_follows_sources_and_flags(tmp_path):
    testing.skip_without_verilator()
    f = tmp_path / "a.v"
    f.write_text("module a; endmodule\n")
    k1 = build.build_key("x", [f], ["-O3"])
    assert build.build_key("x", [f], ["-O3"]) == k1
    assert build.build_key("x", [f], ["-O2"]) != k1
    f.write_text("module a; wire w; endmodule\n")
    assert build.build_key("x", [f], ["-O3"]) != k1


def test_missing_verilator_says_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("PIMRT_VERILATOR", "verilator-not-here")
    monkeypatch.setenv("PIMRT_CACHE", str(tmp_path))
    with pytest.raises(PimBuildError, match=r"apt-get install -y verilator"):
        build.verilator()
    from pimrt.pim.driver import build_driver
    with pytest.raises(PimBuildError, match="scripts/bootstrap.sh"):
        build_driver(8, 4, 32)


@pytest.mark.slow
def test_safe_clock_build_equals_fast_clock(monkeypatch):
    """The driver built to evaluate the falling clock edge too gives the same results."""
    testing.skip_without_verilator()
    from pimrt.pim.driver import PimDriver
    monkeypatch.setenv("PIMRT_PIM_SAFE_CLOCK", "1")
    safe = PimDriver(rows=16, cols=32)
    monkeypatch.delenv("PIMRT_PIM_SAFE_CLOCK")
    fast, g = PimDriver(rows=16, cols=32), GoldenBackend(rows=16, cols=32)
    x = np.random.default_rng(9).standard_normal(3000).astype(np.float32)
    outs = [K.run_channels(b, "bn_stats_ch", {"x": x.reshape(3, -1)}) for b in (safe, fast, g)]
    assert outs[0].cycles == outs[1].cycles == outs[2].cycles
    assert (outs[0].acc == outs[2].acc).all() and (outs[1].acc == outs[2].acc).all()


def test_sixteen_lanes_driver_equals_golden():
    """LANES=16: every kernel on the RTL equals the golden model at 16 lanes (bits, cycles)."""
    testing.skip_without_verilator()
    from pimrt.pim.driver import PimDriver
    drv, g = PimDriver(lanes=16), GoldenBackend(lanes=16)
    rng = np.random.default_rng(16)
    for name, k in K.STREAM_KERNELS.items():
        arrays = {s: (rng.standard_normal(5003) * 3).astype(np.float32) for s in k.inputs}
        scal = {s: float(rng.standard_normal()) for s in k.scalars}
        rg, rd = K.run_stream(g, name, arrays, scal), K.run_stream(drv, name, arrays, scal)
        assert rd.cycles == rg.cycles, name
        assert all(_same(rd.outputs[s], rg.outputs[s]) for s in rg.outputs), name
    x = rng.standard_normal((4, 20, 6, 10)).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    gamma, beta = np.ones(20, np.float32), np.zeros(20, np.float32)
    fg = K.batchnorm_forward_2pass(g, x, gamma, beta)
    assert all(_same(a, b) for a, b in zip(fg, K.batchnorm_forward_2pass(drv, x, gamma, beta)))
    bg = K.batchnorm_backward_channels(g, x, dy, gamma, fg[1], fg[2])
    bd = K.batchnorm_backward_channels(drv, x, dy, gamma, fg[1], fg[2])
    assert all(_same(a, b) for a, b in zip(bg, bd))
    for fn in (K.avgpool2_forward, K.maxpool2_forward):
        assert _same(fn(drv, x), fn(g, x))
    d2 = rng.standard_normal((4, 20, 3, 5)).astype(np.float32)
    assert _same(K.avgpool2_backward(drv, d2, x.shape), K.avgpool2_backward(g, d2, x.shape))
    assert drv.stats == g.stats
