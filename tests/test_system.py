"""The system a step runs on and the yardsticks it is measured against: the default V100 part
with its four HBM2 stacks, every PIM parameter used by the timing, GPU-only execution, and
every policy and baseline running the same work task by task."""
import dataclasses
import math

import numpy as np
import pytest

from pimrt.errors import ConfigError
from pimrt.graph import capture
from pimrt.memctl import load_part
from pimrt.runtime.placement import place_step
from pimrt.runtime.schedule import build_schedule
from pimrt.runtime.timing import alone_durations, gpu_only_schedule, step_part
from pimrt.runtime.work import FOREACH_TENSORS, GPU_KERNELS, context, task_records
from pimrt.trace.records import COMPUTE, DELAY, READ, WRITE
from test_runtime import small_cnn


@pytest.fixture(scope="module")
def graph():
    return capture(small_cnn([8, 16], [True, False], "max"), (4, 3, 16, 16))


def test_the_default_system_is_the_v100_with_its_own_memory():
    from pimrt.cli import build_parser
    from pimrt.host import load_host_part
    from pimrt.runtime.session import system
    p = load_part("v100_hbm2_pim")
    assert p.channel_count == 32 and p.org["bus_width"] == 128
    assert p.peak_bandwidth_gbs == pytest.approx(898.2, abs=0.1)       # 877 MHz, 4096 bits
    assert p.capacity_bytes == 32 << 30
    assert p.pim["units_per_bankgroup"] == 2 and p.pim_banks_per_unit == 2   # HBM-PIM
    assert p.pim["clock_mhz"] == 300 and p.pim["clock_ratio"] == pytest.approx(0.342)
    s = system("v100_hbm2_pim", "v100")
    assert s["memory"]["pim_units"] == 32 * 8 and s["memory"]["pim_lanes"] == 8
    assert s["memory"]["host_outstanding_requests"] == load_host_part("v100").outstanding(p)
    assert s["host"]["peak_tflops"] == 15.7
    parser = build_parser()
    from pimrt.runtime.session import host_part_for, part_for
    for cmd in (["run"], ["compare"], ["host-times"]):
        args = parser.parse_args(cmd)
        assert args.part is None              # the host part's own memory
        assert part_for(host_part_for(args.precision, args.host_part), args.part) \
            == "v100_hbm2_pim"
        for precision, host, part in (("amp-fp16", "v100_tc", "v100_hbm2_pim"),
                                      ("amp-bf16", "a100_tc", "a100_hbm2_pim")):
            args = parser.parse_args(cmd + ["--precision", precision])
            assert host_part_for(args.precision, args.host_part) == host
            assert part_for(host, args.part) == part
        args = parser.parse_args(cmd + ["--host-part", "a100", "--part", "hbm2_pim"])
        assert part_for(args.host_part, args.part) == "hbm2_pim"     # a part given stays
    assert part_for("my_gpu.toml", None) == "v100_hbm2_pim"
    assert load_part("hbm2_pim").channel_count == 8          # the one-stack part stays


def test_the_a100_system_is_its_five_stacks():
    from pimrt.host import load_host_part
    from pimrt.runtime.session import system
    p = load_part("a100_hbm2_pim")
    assert p.channel_count == 40 and not p.bit_fields        # 5 stacks: a mixed radix
    assert p.peak_bandwidth_gbs == pytest.approx(1555.3, abs=0.1)     # the A100 40 GB's 1555
    assert p.capacity_bytes == 40 << 30
    assert p.pim["clock_ratio"] == pytest.approx(300 / 1215, abs=1e-3)
    s = system("a100_hbm2_pim", "a100_tc")
    assert s["memory"]["pim_units"] == 40 * 8 and s["memory"]["channels"] == 40
    assert s["memory"]["host_outstanding_requests"] == \
        load_host_part("a100_tc").outstanding(p) == 3646     # 150 ns x 1555 GB/s / 64 B


@pytest.mark.parametrize("name, tck", [("v100_hbm2_pim", 1.14), ("a100_hbm2_pim", 0.823)])
def test_a_gpu_part_converts_every_nanosecond_timing_to_its_clock(name, tck):
    """v100_hbm2_pim and a100_hbm2_pim take hbm2.toml's timings (DRAMsim3's HBM2 at 1 GHz, so
    cycles = ns) to 877 and 1215 MHz: each one the JEDEC tables give in ns is ceil(ns / tCK),
    tREFI rounded down, tRC the larger of its own and tRAS + tRP; clock counts stay. A key
    left unconverted (as the V100 part's per-bank refresh tRFCb and tRREFD were) keeps 1 GHz
    cycles at another clock."""
    import math
    base, v100 = load_part("hbm2").timing, load_part(name).timing
    assert base["tCK"] == 1.0 and v100["tCK"] == tck
    clock_counts = {"CWL", "tCCD_S", "tCCD_L", "tRTRS", "tCK"}
    checked = set()
    for key, ns in base.items():
        if key in clock_counts or not isinstance(ns, (int, float)):
            continue
        if key == "tREFI":
            want = math.floor(ns / tck)
        elif key == "tRC":
            want = max(math.ceil(ns / tck), v100["tRAS"] + v100["tRP"])
        else:
            want = math.ceil(ns / tck - 1e-9)
        assert v100[key] == want, key
        checked.add(key)
    assert {"CL", "tRCDRD", "tRP", "tRAS", "tFAW", "tREFI", "tRFC", "tRFCb", "tRREFD"} <= checked


def _pim_cycles(graph, part) -> int:
    """The PIM's work alone on `part`: every PIM task of the step timed with the memory to
    itself, summed."""
    sched = build_schedule(graph, 1, pipelined=False)
    d = alone_durations(sched, graph, step_part(part, "v100"), "v100")
    from pimrt.runtime.plan import task_key
    return sum(d[task_key(t)] for t in sched.tasks if t.side == "pim")


def test_each_pim_parameter_moves_the_pims_time(graph):
    from pimrt.runtime.work import pim_memory_cycles
    base = load_part("hbm2_pim")
    # a slower unit clock: the same unit cycles take more memory cycles (maps large enough
    # for the units' compute to matter beside the commands' latency)
    big = capture(small_cnn([16], [False], None), (16, 3, 64, 64))
    slow_part = load_part("hbm2_pim", {"pim.clock_mhz": 300})
    assert _pim_cycles(big, slow_part) > 1.5 * _pim_cycles(big, base)
    ctx = [context(graph, p, place_step(graph, p)) for p in (base, slow_part)]
    assert pim_memory_cycles("relu_fwd", 10**6, ctx[1]) == \
        pytest.approx(pim_memory_cycles("relu_fwd", 10**6, ctx[0]) / 0.3)
    # more units (one per bank instead of one per bank group): each takes fewer elements
    # and fewer banks' columns between two all-bank commands
    many_part = load_part("hbm2_pim", {"pim.units_per_bankgroup": 4})
    many = context(graph, many_part, place_step(graph, many_part))
    assert (ctx[0].pim_units, ctx[0].pim_column_cycles) == (4, 8)
    assert (many.pim_units, many.pim_column_cycles) == (16, 2)
    assert pim_memory_cycles("relu_fwd", 10**6, many) == \
        pytest.approx(pim_memory_cycles("relu_fwd", 10**6, ctx[0]) / 4)
    # the mode switch is the part's too
    assert load_part("hbm2_pim", {"pim.mode_switch_cycles": 100}).pim["mode_switch_cycles"] == 100


def test_more_lanes_take_fewer_cycles_and_unmeasured_lanes_are_refused(graph):
    from pimrt.pim import cycles
    from pimrt.runtime.work import pim_memory_cycles
    assert cycles.lanes() == [8, 16]
    ctx = {lanes: context(graph, p, place_step(graph, p)) for lanes, p in
           ((n, load_part("v100_hbm2_pim", {"pim.lanes": n})) for n in (8, 16, 32))}
    eight, sixteen = (pim_memory_cycles("relu_fwd", 1 << 20, ctx[n]) for n in (8, 16))
    assert 0.45 * eight < sixteen < 0.55 * eight          # twice the lanes, half the cycles
    sched = build_schedule(graph, 1, pipelined=False)
    task = next(t for t in sched.tasks if t.side == "pim")
    with pytest.raises(ConfigError, match="lanes = 32: the PIM kernels are checked on the RTL "
                                          "at 8, 16 lanes only"):
        task_records(task, ctx[32])


@pytest.mark.parametrize("override, message", [
    ({"pim.lanes": 6}, "[pim] lanes: must be a power of two"),
    ({"pim.clock_ratio": 0}, "[pim] clock_ratio: must be positive"),
    ({"pim.clock_mhz": 0}, "[pim] clock_mhz: must be positive"),
    ({"pim.clock_mhz": 2000}, "[pim] clock_ratio: the units would run at 2.28 x the memory"),
    ({"pim.units_per_bankgroup": 8}, "[pim] units_per_bankgroup: 8 units per bank group are "
                                     "more than its 4 banks"),
    ({"pim.units_per_bankgroup": 3}, "[pim] units_per_bankgroup: 3 units do not divide"),
])
def test_a_pim_that_cannot_be_honoured_is_refused(override, message):
    with pytest.raises(ConfigError) as e:
        load_part("v100_hbm2_pim", override)
    assert message in str(e.value) and "v100_hbm2_pim.toml" in str(e.value)


def test_an_unknown_part_lists_the_shipped_ones(capsys):
    from pimrt.cli import main
    assert main(["run", "--part", "v100_hbm", "--functional", "none", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "no such part: 'v100_hbm'" in err and "v100_hbm2_pim" in err and "hbm2_pim" in err


def test_the_units_clock_is_given_one_way():
    one = load_part("v100_hbm2_pim", {"pim.clock_ratio": 0.5})   # replaces the file's MHz
    assert one.pim["clock_ratio"] == 0.5 and one.pim["clock_mhz"] == pytest.approx(500 / 1.14)


# ---- GPU-only ---------------------------------------------------------------------------------

def test_gpu_only_runs_the_serial_steps_ops_all_on_the_host(graph):
    serial = build_schedule(graph, 1, pipelined=False)
    gpu = gpu_only_schedule(graph)
    assert {t.side for t in gpu.tasks} == {"host"}
    assert [(t.layer, t.kind, t.phase) for t in gpu.tasks] == \
        [(t.layer, t.kind, t.phase) for t in serial.tasks]
    part = step_part("v100_hbm2_pim", "v100")
    ctx = context(graph, part, place_step(graph, part))
    for t in gpu.tasks:
        if (t.kind, t.phase) not in GPU_KERNELS:
            continue
        recs = task_records(t, ctx)
        # memory-bound kernels: each pass a kernel with its fixed cost (a DELAY before its
        # requests), then paced by COMPUTEs to the streaming bandwidth
        launches = 1.0
        if (t.kind, t.phase) == ("update", "update"):     # torch's foreach SGD: a launch a
            launches = len(graph[t.layer].params) / FOREACH_TENSORS   # 48 tensors
        launch = math.ceil(launches * ctx.host_part.kernel_overhead_s * 1e9
                           / part.timing["tCK"] - 1e-9)
        assert list(recs["value"][recs["op"] == DELAY]) == \
            [launch] * len(GPU_KERNELS[(t.kind, t.phase)])
        floor = int((recs["op"] <= WRITE).sum()) * 64 / (
            ctx.host_part.stream_fraction * part.peak_bandwidth_gbs) / part.timing["tCK"]
        assert abs(int(recs["value"][recs["op"] == COMPUTE].sum()) - floor) <= \
            len(GPU_KERNELS[(t.kind, t.phase)])
        moved = int((recs["op"] <= WRITE).sum()) * 64
        expect = 0
        for passes in GPU_KERNELS[(t.kind, t.phase)]:
            for rw, role, frac in passes:
                if role == "input":
                    nbytes = graph[graph[t.layer].inputs[0]].bytes
                elif role in ("output", "result"):
                    nbytes = graph[t.layer].bytes
                elif role == "index":
                    nbytes = graph[t.layer].numel * 8
                elif role in ("grad_output",):
                    nbytes = graph[t.layer].bytes
                elif role == "grad_input":
                    nbytes = graph[graph[t.layer].inputs[0]].bytes
                elif role in ("param", "pgrad", "momentum"):
                    nbytes = graph[t.layer].param_bytes
                else:
                    nbytes = None
                if nbytes is None:
                    expect = None
                    break
                expect += -(-nbytes // 64) * 64
            if expect is None:
                break
        if expect is not None:
            assert moved == expect, t.label
    # batch norm: the statistics pass reads x, the apply pass reads x and writes y
    bn = next(t for t in gpu.tasks if t.kind == "batchnorm" and t.phase == "fwd")
    recs = task_records(bn, ctx)
    x = graph[graph[bn.layer].inputs[0]].bytes // 64
    assert (recs["op"] == READ).sum() == 2 * x and (recs["op"] == WRITE).sum() == x


# ---- the same work under every policy --------------------------------------------------------

def _work(schedule, graph, part, policy):
    ctx = context(graph, part, place_step(graph, part), policy=policy)
    return [task_records(t, ctx) for t in schedule.tasks]


@pytest.mark.parametrize("pipelined", [False, True])
@pytest.mark.parametrize("shape", [(4, 3, 16, 16), (16, 3, 64, 64)])
def test_every_policy_runs_the_same_work_task_by_task(pipelined, shape):
    """serial, authority and bank partitioning give each task of one schedule the same host
    requests, compute and PIM bytes; partitioning adds only its copies of the shared maps (the
    host's output moved between its banks and the PIM's, pinned here) and runs the PIM's bytes
    as commands on half the banks (twice as many)."""
    graph = capture(small_cnn([8, 16], [True, False], "max"), shape)
    part = step_part("v100_hbm2_pim", "v100")
    s = build_schedule(graph, 2, pipelined=pipelined)
    serial, auth, bp = (_work(s, graph, part, p)
                        for p in ("serial", "authority", "bank_partition"))
    for t, a, b, c in zip(s.tasks, serial, auth, bp):
        assert np.array_equal(a, b), t.label               # serial == authority, record by record
        if t.side == "pim":
            # the same bytes on half the banks: each all-bank command moves half as much, so
            # at least as many commands and at most twice as many plus the padding of each
            # bank's share to the program's blocks
            pa, pc = a[a["op"] <= WRITE], c[c["op"] <= WRITE]
            for op in (READ, WRITE):
                na, nc = (pa["op"] == op).sum(), (pc["op"] == op).sum()
                assert na <= nc <= 2 * na + 64 * 32, t.label
            if t.numel >= 1 << 16:                          # large enough to fill the blocks
                assert len(pc) == pytest.approx(2 * len(pa), rel=0.15), t.label
        else:
            extra = len(c[c["op"] <= WRITE]) - len(a[a["op"] <= WRITE])
            share = t.tensors.get("output") or t.tensors.get("grad_input")
            if t.kind in ("conv", "linear") and share:
                nbytes = share[1] // max(t.groups, 1) // max(t.slices if t.slice >= 0 else 1, 1)
                assert extra == 2 * -(-nbytes // 64) or abs(extra - 2 * nbytes / 64) <= 2, \
                    t.label                               # read and write the share once
            else:
                assert extra == 0, t.label
            compute = (DELAY, COMPUTE)       # the same compute, however it is laid out
            assert a["value"][np.isin(a["op"], compute)].sum() == \
                c["value"][np.isin(c["op"], compute)].sum()


def test_a_handicapped_baseline_is_caught(graph, monkeypatch):
    """If the serial baseline's PIM ran with half-bank commands (as bank partitioning must),
    the same-work check above would fail: the serial context is the authority context."""
    part = step_part("v100_hbm2_pim", "v100")
    s = build_schedule(graph, 1, pipelined=False)
    serial = _work(s, graph, part, "serial")
    handicapped = [task_records(t, dataclasses.replace(
        context(graph, part, place_step(graph, part), policy="serial"),
        pim_scope=8)) for t in s.tasks]
    assert any(not np.array_equal(a, b) for a, b in zip(serial, handicapped))


def test_amp_bf16_runs_on_the_a100_with_its_own_memory(tmp_path):
    """amp-bf16's default host part is the A100's Tensor Cores, so its default memory is the
    A100's five stacks (40 channels: a mixed-radix mapping end to end)."""
    import json
    from pimrt.cli import main
    out = tmp_path / "r"
    assert main(["run", "--model", "resnet_cifar_20", "--batch", "2", "--input", "32",
                 "--precision", "amp-bf16", "--functional", "none", "--quiet",
                 "--out", str(out)]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert (s["part"], s["host_part"]) == ("a100_hbm2_pim", "a100_tc")
    mem = s["system"]["memory"]
    assert (mem["name"], mem["channels"], mem["pim_units"]) == ("A100_HBM2_x5_PIM", 40, 320)
    assert s["requests"] > 0 and 0 < s["lower_bound_step_ms"] <= s["step_ms"] * 1.001
