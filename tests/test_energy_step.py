"""Energy per training step (pimrt.runtime.energy): the PIM programs' lane operations walked
like the timing's walker (same cycles), the step's parts and tasks adding up to its total,
GPU-only's arithmetic on the host, and a part without energy figures reported unavailable."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pimrt.pim import access
from pimrt.pim import kernels as K
from pimrt.runtime import energy, session
from pimrt.runtime.timing import step_part


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(sorted(K.STREAM_KERNELS)), st.integers(1, 5000),
       st.sampled_from([8, 16]))
def test_stream_kernel_ops_walk_as_the_timing_does(kernel, n, lanes):
    ops, cycles = energy.kernel_ops(kernel, lanes, (("elements", n),))
    assert cycles == access.bank_cycles(kernel, lanes=lanes, elements=n)
    assert all(v >= 0 and v % lanes == 0 for v in ops.values())


@pytest.mark.parametrize("kernel", sorted(K.CHANNEL_KERNELS))
def test_channel_kernel_ops(kernel):
    ops, cycles = energy.kernel_ops(kernel, 8, (("channels", 3), ("elements", 100)))
    assert cycles == access.bank_cycles(kernel, lanes=8, channels=3, elements=100)
    more, _ = energy.kernel_ops(kernel, 8, (("channels", 6), ("elements", 100)))
    assert sum(more.values()) > sum(ops.values()) > 0


def test_sgd_update_counts_its_arithmetic():
    """sgd per element: v = m v + g (a multiply-add), w = w - lr v (a multiply-add or
    a multiply and a subtraction): at least two operations per element and lane."""
    n = 8 * 64
    ops, _ = energy.kernel_ops("sgd", 8, (("elements", n),))
    assert ops["fma"] + ops["mul"] + ops["add"] >= 2 * n


@pytest.fixture(scope="module")
def runs():
    g = session.captured("resnet_cifar_20", 2, 32)
    part = step_part("v100_hbm2_pim", "v100")
    out = {p: session.timed(g, p, 4 if p != "serial" and p != "gpu_only" else 1,
                            "v100_hbm2_pim", "v100", True, p)
           for p in ("gpu_only", "serial", "authority")}
    return part, out


def test_step_energy_adds_up(runs):
    part, out = runs
    for policy, run in out.items():
        e = energy.step_energy(run, part, "v100")
        assert e["available"]
        assert e["total"] == pytest.approx(sum(e[k] for k in energy.PARTS))
        assert sum(e["components"].values()) == pytest.approx(e["total"])
        assert sum(e["per_task_mj"]) == pytest.approx(e["total"])
        assert all(v >= 0 for v in e["components"].values())
        assert e["components"]["host_static"] == pytest.approx(50.0 * run.seconds * 1e3)
        assert e["dram"] * 1e9 == pytest.approx(
            run.stats["energy_pj"]["total"] - run.stats["energy_pj"]["components"]["pim_read"]
            - run.stats["energy_pj"]["components"]["pim_write"])
        assert e["io"] == pytest.approx(run.stats["requestors"]["host"]["bytes"] * 6.0 * 1e-9)
        if policy == "gpu_only":
            assert e["pim"] == 0 and e["counts"]["gpu_elementwise_flops"] > 0
        else:
            assert e["pim"] > 0 and e["counts"]["gpu_elementwise_flops"] == 0


def test_same_conv_work_whatever_the_policy(runs):
    part, out = runs
    flops = {p: energy.step_energy(r, part, "v100")["counts"]["host_conv_flops"]
             for p, r in out.items()}
    assert len(set(flops.values())) == 1
    lanes = {p: energy.step_energy(r, part, "v100")["counts"]["pim_lane_ops"]
             for p, r in out.items() if p != "gpu_only"}
    # the units run whole columns: each group's share is padded to them, so more groups
    # (authority's) execute at least serial's lanes (at batch 2, many more)
    for k in energy.FLOPS_PER_OP:
        assert lanes["authority"].get(k, 0) >= lanes["serial"].get(k, 0)


def test_summary_ratios_and_unavailable(runs):
    part, out = runs
    meta = {"part": "v100_hbm2_pim", "host_part": "v100", "model": "resnet_cifar_20"}
    s = energy.summary(out["authority"], out["serial"], out["gpu_only"], meta)
    assert s["vs_serial"] == pytest.approx(s["total"] / s["serial_total"])
    assert s["vs_gpu_only"] == pytest.approx(s["total"] / s["gpu_only_total"])
    line = energy.line({"policy": "authority", "energy_mj": s})
    assert line.startswith("energy per step ") and "of GPU-only's" in line
    bare = energy.step_energy(out["serial"], part, "a100")   # a host part without [energy]
    assert bare == {"available": False, "note": bare["note"]}
    assert "host part A100" in bare["note"] or "a100" in bare["note"].lower()
    assert energy.line({"policy": "serial", "energy_mj": bare}).startswith("energy: unavailable")


def test_summary_takes_the_runs_own_part_keys(runs):
    """A sweep point's part keys (meta["part_keys"]) reach its energy: the step ran on the
    changed parts, so its energy is figured on them, not on the parts' files alone."""
    _, out = runs
    meta = {"part": "v100_hbm2_pim", "host_part": "v100", "model": "resnet_cifar_20"}
    plain = energy.summary(out["authority"], None, None, meta)
    keyed = energy.summary(out["authority"], None, None, dict(meta, part_keys={
        "host": {"energy": {"static_w": 100.0}}, "memory": {"pim_energy": {"add_pj": 9.0}}}))
    seconds = out["authority"].seconds
    assert plain["components"]["host_static"] == pytest.approx(50.0 * seconds * 1e3)
    assert keyed["components"]["host_static"] == pytest.approx(100.0 * seconds * 1e3)
    assert keyed["pim"] > plain["pim"]


def test_one_run_figured_on_two_parts_that_differ_in_a_pim_key(runs):
    """A sweep gives one GPU-only run to points whose parts differ only in the PIM's lanes:
    each point's energy is figured on its own part (once the first part's was kept for both,
    since the memory part's repr names only its file)."""
    _, out = runs
    gpu = out["gpu_only"]
    part8 = step_part("v100_hbm2_pim", "v100")
    from pimrt.memctl import load_part
    part16 = step_part(load_part("v100_hbm2_pim", {"pim": {"lanes": 16}}), "v100")
    first = energy.cached_energy(gpu, part8, "v100")
    then = energy.cached_energy(gpu, part16, "v100")
    fresh = energy.step_energy(gpu, part16, "v100")
    assert then["total"] == fresh["total"] and then["counts"] == fresh["counts"]
    assert energy.cached_energy(gpu, part8, "v100")["total"] == first["total"]


@pytest.mark.parametrize("over, words", [
    ({"energy": {"flops": "int8"}}, "[energy] flops: 'int8' is not one of fp32, tensor"),
    ({"energy": {"static_w": -1}}, "[energy] static_w: must be >= 0"),
    ({"energy": {"io_pj_per_byte": 0}}, "[energy] io_pj_per_byte: must be > 0"),
])
def test_host_energy_checks_name_the_key(over, words):
    from pimrt.errors import ConfigError
    from pimrt.host.part import load_host_part
    with pytest.raises(ConfigError) as exc:
        load_host_part("v100", over)
    assert words in str(exc.value)


def test_host_parts_energy():
    from pimrt.host.part import load_host_part
    assert load_host_part("v100").pj_per_flop == 14.6
    assert load_host_part("v100_tc").pj_per_flop == 1.84
    assert load_host_part("a100").energy is None
    assert load_host_part("v100").to_dict()["energy"]["static_w"] == 50.0
