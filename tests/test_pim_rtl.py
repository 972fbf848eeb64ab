"""The RTL under pyverilator, driven signal by signal: lint, host port, mode gating, the
start/busy/done handshake, faults, and each kernel RTL == golden (values and cycles)."""
import subprocess

import numpy as np
import pytest

from pimrt.pim import build, isa, kernels as K, testing
from pimrt.pim.asm import assemble
from pimrt.pim.errors import PimCycleCapError, PimFaultError
from pimrt.pim.golden import GoldenBackend

ROWS, COLS = 8, 32      # a small bank: 256 columns


@pytest.fixture(scope="module")
def rtl():
    testing.skip_without_verilator()
    from pimrt.pim.rtl import PimRtl
    return PimRtl(rows=ROWS, cols=COLS)


def test_verilog_is_lint_clean():
    testing.skip_without_verilator()
    for top in ("pim_top", "pim_lane_array"):
        out = subprocess.run([build.verilator(), "--lint-only", "-Wall", f"-I{build.HW_DIR}",
                              str(build.HW_DIR / f"{top}.v")], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr


def test_host_port_round_trip(rtl):
    data = np.random.default_rng(1).integers(0, 2**32, (20, 8), dtype=np.uint64).astype(np.uint32)
    rtl.write_bank(100, data)
    assert (rtl.read_bank(100, 20) == data).all()


def test_mode_gates_host_and_pim(rtl):
    sim = rtl.sim
    rtl.write_bank(5, np.full((1, 8), 7, np.uint32))
    rtl.set_mode(1)                       # PIM mode: host access refused, bank unchanged
    sim["h_en"], sim["h_we"], sim["h_addr"], sim["h_wdata"] = 1, 1, 5, 0
    rtl.tick()
    assert sim["h_err"] == 1
    sim["h_en"] = 0
    rtl.tick()
    assert sim["h_err"] == 0
    assert (rtl.read_bank(5, 1) == 7).all()   # read_bank switches back to host mode
    rtl.load_program(assemble("EXIT"))
    sim["start"] = 1                      # host mode: start is ignored
    rtl.tick()
    sim["start"] = 0
    assert sim["busy"] == 0 and sim["mode"] == 0


def test_handshake_busy_done_cycles(rtl):
    rtl.load_program(assemble("top: NOP\nLOOP c0, top\nEXIT"))
    rtl.set_counts([5])
    sim = rtl.sim
    rtl.set_mode(1)
    sim["start"] = 1
    rtl.tick()
    sim["start"] = 0
    seen = 0
    while sim["busy"]:
        assert sim["done"] == 0
        rtl.tick()
        seen += 1
    assert sim["done"] == 1 and sim["err_code"] == 0
    assert seen == sim["cycles"] == 5 * 2 + 1


@pytest.mark.parametrize("source, code, pc", [
    ("NOP\n.bad", isa.E_OPCODE, 1),
    ("ADD A5, G0, G0", isa.E_REG, 0),
    ("MOV S3, G0", isa.E_REG, 0),
    ("ADD G0, B[p0], B[p1]", isa.E_OPERAND, 0),
    ("MOV G0, B[p7]", isa.E_ADDR, 0),
    ("NOP\n" * 32, isa.E_PC, 32),
])
def test_faults_match_golden(rtl, source, code, pc):
    words = []
    for line in source.splitlines():
        if line == ".bad":
            words.append(0x38000000)                               # opcode 7: unknown
        elif line.startswith(("ADD A5", "MOV S3", "ADD G0, B[p0], B[p1]")):
            ops = {"ADD A5, G0, G0": ("ADD", {"d": isa.Operand(isa.K_ACC, 5),
                                              "a": isa.Operand(isa.K_GRF, 0),
                                              "b": isa.Operand(isa.K_GRF, 0)}),
                   "MOV S3, G0": ("MOV", {"d": isa.Operand(isa.K_SRF, 3),
                                          "a": isa.Operand(isa.K_GRF, 0)}),
                   "ADD G0, B[p0], B[p1]": ("ADD", {"d": isa.Operand(isa.K_GRF, 0),
                                                    "a": isa.Operand(isa.K_BANK, 0),
                                                    "b": isa.Operand(isa.K_BANK, 1)})}[line]
            words.append(isa.encode_data(*ops))
        else:
            words.extend(assemble(line).words)
    for backend in (rtl, GoldenBackend(rows=ROWS, cols=COLS)):
        backend.load_program(words)
        backend.set_pointers([0] * 7 + [ROWS * COLS + 3])
        with pytest.raises(PimFaultError) as info:
            backend.run()
        assert (info.value.code, info.value.pc) == (code, pc), backend.name
        assert f"pc {pc}" in str(info.value)


def test_loop_without_exit_is_stopped_and_unit_recovers(rtl):
    rtl.load_program(assemble("top: ADD G0, G0, S0\nJMP top"))
    with pytest.raises(PimCycleCapError, match=r"within 300 cycles \(stopped at pc \d"):
        rtl.run(max_cycles=300)
    rtl.load_program(assemble("EXIT"))
    assert rtl.run() == 1


def _compare_stream(rtl, name, n):
    k = K.STREAM_KERNELS[name]
    rng = np.random.default_rng(len(name))
    arrays = {s: rng.standard_normal(n).astype(np.float32) for s in k.inputs}
    scal = {s: float(rng.standard_normal()) for s in k.scalars}
    g = GoldenBackend(rows=ROWS, cols=COLS)
    rg, rr = K.run_stream(g, name, arrays, scal), K.run_stream(rtl, name, arrays, scal)
    assert rr.cycles == rg.cycles
    for s in rg.outputs:
        assert rr.outputs[s].dtype == rg.outputs[s].dtype
        assert (rr.outputs[s].view(np.uint8) == rg.outputs[s].view(np.uint8)).all(), s


@pytest.mark.parametrize("name", sorted(K.STREAM_KERNELS))
def test_stream_kernels_rtl_equal_golden(rtl, name):
    _compare_stream(rtl, name, 8 * 37 + 3)      # a partial column and a partial block


@pytest.mark.parametrize("fn", [K.avgpool2_forward, K.maxpool2_forward])
def test_pool_kernels_rtl_equal_golden(rtl, fn):
    x = np.random.default_rng(3).standard_normal((2, 10, 4, 6)).astype(np.float32)
    g = GoldenBackend(rows=ROWS, cols=COLS)
    assert (fn(rtl, x).view(np.uint32) == fn(g, x).view(np.uint32)).all()
    name = fn.__name__.replace("_forward", "_fwd")
    assert rtl.stats[name][0] == g.stats[name][0]


def test_avgpool_backward_rtl_equal_golden(rtl):
    dy = np.random.default_rng(4).standard_normal((2, 9, 2, 3)).astype(np.float32)
    g = GoldenBackend(rows=ROWS, cols=COLS)
    a = K.avgpool2_backward(rtl, dy, (2, 9, 4, 6))
    assert (a.view(np.uint32) == K.avgpool2_backward(g, dy, (2, 9, 4, 6)).view(np.uint32)).all()


@pytest.mark.slow
def test_rtl_at_16_lanes_equals_golden():
    """The pyverilator models at 16 lanes (their own cached builds): every lane op on edge
    values, every stream kernel, pooling and batch norm == the golden model at 16 lanes,
    values and cycles."""
    testing.skip_without_verilator()
    from pimrt.pim import fp
    from pimrt.pim.rtl import LaneRtl, PimRtl
    lanes = LaneRtl(lanes=16)
    a, b = testing.edge_pairs()
    c = np.resize(testing.EDGES[::-1], a.shape).astype(np.uint32)
    for name in isa.LANE_OPS:
        assert (lanes.compute(name, a, b, c) == fp.apply(name, a, b, c)).all(), name
    rtl = PimRtl(rows=ROWS, cols=COLS, lanes=16)
    g = GoldenBackend(rows=ROWS, cols=COLS, lanes=16)
    rng = np.random.default_rng(16)
    for name, k in sorted(K.STREAM_KERNELS.items()):
        arrays = {s: rng.standard_normal(16 * 19 + 5).astype(np.float32) for s in k.inputs}
        scal = {s: float(rng.standard_normal()) for s in k.scalars}
        rg, rr = K.run_stream(g, name, arrays, scal), K.run_stream(rtl, name, arrays, scal)
        assert rr.cycles == rg.cycles, name
        for s in rg.outputs:
            assert rr.outputs[s].dtype == rg.outputs[s].dtype
            assert (rr.outputs[s].view(np.uint8) == rg.outputs[s].view(np.uint8)).all(), (name, s)
    x = rng.standard_normal((2, 20, 4, 6)).astype(np.float32)
    for fn in (K.avgpool2_forward, K.maxpool2_forward):
        assert (fn(rtl, x).view(np.uint32) == fn(g, x).view(np.uint32)).all(), fn.__name__
    gamma, beta = rng.random(20).astype(np.float32) + 0.5, rng.standard_normal(20).astype(np.float32)
    for got, want in zip(K.batchnorm_forward(rtl, x, gamma, beta), K.batchnorm_forward(g, x, gamma, beta)):
        assert (np.asarray(got).view(np.uint32) == np.asarray(want).view(np.uint32)).all()
    assert {k: v[0] for k, v in rtl.stats.items()} == {k: v[0] for k, v in g.stats.items()}
