"""Measured host kernel times (`--host-times`): the kernels a run needs, the JSON file they
are kept in, the compute they replace in the host's records, and bad files refused before
any simulation. The GPU itself is stood in for here (CI has none); scripts/gpu_checks.sh
runs `pimrt run --host-times measure` on a real one."""
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from pimrt.cli import main
from pimrt.errors import ConfigError
from pimrt.runtime import host_times as ht
from pimrt.runtime.session import captured
from pimrt.trace.records import WRITE

MODEL, BATCH = "resnet_cifar_20", 2


@pytest.fixture(scope="module")
def graph():
    return captured(MODEL, BATCH, 32)


@pytest.fixture
def fake_gpu(monkeypatch):
    """A 'GPU' whose kernels take 3x the V100 model's time; records what it was asked."""
    from pimrt.host import HostWork

    class Asked(list):
        dtypes: set                          # the dtypes the kernels were timed in
    asked = Asked()
    asked.dtypes = dtypes = set()

    def measure(layer, batch, phase, rng, device, warmup=3, repeats=10, dtype=None):
        asked.append((layer.name, phase, *rng))
        dtypes.add(dtype)
        return 3 * HostWork(layer, batch, phase, rng).model_seconds() * 1e3

    monkeypatch.setattr(ht, "require_cuda", lambda *a, **kw: None)
    monkeypatch.setattr(ht, "device_name", lambda device="cuda": "Test GPU")
    monkeypatch.setattr(ht, "measure_compute_ms", measure)
    return asked


def _kernels(graph, part=None, groups=None):
    """The kernels `pimrt run` needs at its default groups and slices (on its default part)."""
    from pimrt.runtime.session import DEFAULT_PART, slices_for
    from pimrt.runtime.timing import DEFAULT_GROUPS, group_rule, slice_rule, step_part
    groups = groups or DEFAULT_GROUPS
    slices = slices_for(graph.batch)
    part = step_part(part or DEFAULT_PART, "v100")
    return ht.step_kernels(graph, groups, group_rule(part, "v100", groups), slices=slices,
                           slice_rule=slice_rule(part, slices, groups=groups))


def test_the_kernels_of_a_step():
    graph = captured("resnet18", 32, 32)  # at batch 32 the group rule splits some CONVs and
    wanted = _kernels(graph, "hbm2_pim", 4)   # the slice rule slices some (their slices fill
                                              # a row span: 256 KiB on one stack)
    assert len(wanted) == len(set(wanted))
    serial = ht.step_kernels(graph, 4, None, pipelined=False)
    convs = [n.name for n in graph if n.kind in ("conv", "linear")]
    # the serial step: every CONV/linear forward and dW whole, a dX for all but the first
    assert len(serial) == 3 * len(convs) - 1
    assert all((lo, hi, n) == (0, graph[name].attrs.get(
        "out_channels", graph[name].attrs.get("out_features")), 32) for name, _, lo, hi, n in serial)
    assert set(serial) <= set(wanted) and len(wanted) > len(serial)
    # the pipelined step adds the split CONVs' groups, which tile their output channels, and
    # the sliced CONVs' forward on 8 of the 32 images (4 slices), all channels
    sliced = {k for k in wanted if k[4] != 32}
    assert sliced and all(k[1] == "forward" and k[4] == 8 and k[2:4] == (0, graph[k[0]].attrs.get(
        "out_channels", graph[k[0]].attrs.get("out_features"))) for k in sliced)
    for name, phase, lo, hi, n in set(wanted) - set(serial) - sliced:
        groups = sorted((k[2], k[3]) for k in wanted if k[:2] == (name, phase) and k[4] == 32
                        and k[2:4] != (0, graph[name].attrs["out_channels"]))
        assert groups[0][0] == 0 and all(a[1] == b[0] for a, b in zip(groups, groups[1:]))
        assert groups[-1][1] == graph[name].attrs["out_channels"]


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_a_file_reads_back_exactly(graph, tmp_path_factory, data):
    wanted = _kernels(graph)
    picked = data.draw(st.lists(st.sampled_from(wanted), min_size=1, unique=True))
    ms = data.draw(st.lists(st.floats(1e-6, 1e4, allow_nan=False), min_size=len(picked),
                            max_size=len(picked)))
    times = dict(zip(picked, ms))
    path = tmp_path_factory.mktemp("ht") / "host_times.json"
    ht.save(path, times, {"model": MODEL, "batch": BATCH, "input_shape": [BATCH, 3, 32, 32],
                          "device": "Test GPU"})
    back, fields = ht.load(path, graph)
    assert back == times and list(back) == picked
    assert fields["device"] == "Test GPU"


def test_a_measured_time_replaces_the_modelled_compute(graph):
    from pimrt.runtime.placement import place_step
    from pimrt.runtime.schedule import build_schedule
    from pimrt.runtime.timing import step_part
    from pimrt.runtime.work import context, host_kernel, host_records
    from pimrt.trace.records import COMPUTE, DELAY
    part = step_part("hbm2_pim", "v100")
    schedule = build_schedule(graph, 1, pipelined=False)
    task = next(t for t in schedule.tasks if t.kind == "conv" and t.phase == "bwd_weight")
    kernel = host_kernel(task, graph)
    tck = part.timing["tCK"]
    for times, expect in ((None, None), ({kernel: 0.25}, math.ceil(0.25e6 / tck))):
        ctx = context(graph, part, place_step(graph, part), "v100", host_times=times)
        recs = host_records(task, ctx)
        delay = int(recs["value"][np.isin(recs["op"], (DELAY, COMPUTE))].sum())
        if expect is None:
            from pimrt.host import HostWork
            expect = HostWork(graph[task.layer], BATCH, kernel[1], kernel[2:4]).compute_cycles(
                None, tck)
        assert delay == expect
        # the request stream is the same either way
        assert (recs["op"] <= WRITE).sum() == (host_records(task, context(
            graph, part, place_step(graph, part), "v100"))["op"] <= WRITE).sum()


def test_measure_then_replay(tmp_path, capsys, fake_gpu, graph):
    measured = tmp_path / "gpu"
    args = ["run", "--model", MODEL, "--batch", str(BATCH), "--functional", "none", "--quiet"]
    assert main(args + ["--host-times", "measure", "--out", str(measured)]) == 0
    assert "measured on Test GPU, written to" in capsys.readouterr().out
    doc = json.loads((measured / "host_times.json").read_text())
    assert doc["device"] == "Test GPU" and doc["batch"] == BATCH
    assert len(fake_gpu) == len(doc["kernels"]) == len(_kernels(graph))
    s = json.loads((measured / "summary.json").read_text())
    assert s["host_times"]["source"] == "measured" and s["host_times"]["kernels"] == len(fake_gpu)
    # the serial step runs every whole kernel one after another, so it is at least their sum
    whole = sum(k["ms"] for k in doc["kernels"] if list(k["channels"]) == [
        0, graph[k["layer"]].attrs.get("out_channels", graph[k["layer"]].attrs.get(
            "out_features"))])
    assert s["serial_step_ms"] >= whole
    model = tmp_path / "model"
    assert main(args + ["--out", str(model)]) == 0
    m = json.loads((model / "summary.json").read_text())
    assert m["host_times"]["source"] == "model"
    assert m["serial_step_ms"] < s["serial_step_ms"]          # a host 3x slower than modelled
    # replayed from the folder (or the file) on a machine without a GPU: the same step
    replay = tmp_path / "replay"
    assert main(args + ["--host-times", str(measured), "--out", str(replay)]) == 0
    r = json.loads((replay / "summary.json").read_text())
    assert r["host_times"]["source"] == "file" and r["host_times"]["device"] == "Test GPU"
    assert (r["step_ms"], r["serial_step_ms"]) == (s["step_ms"], s["serial_step_ms"])


@pytest.mark.parametrize("precision, dtype", [("amp-fp16", "float16"),
                                              ("amp-bf16", "bfloat16")])
def test_amp_kernels_are_timed_in_their_16_bit_dtype_and_replayed_only_in_it(
        tmp_path, capsys, fake_gpu, precision, dtype):
    """Under AMP every host kernel is a CONV or linear layer, which autocast runs in the
    16-bit dtype: that is what is timed, the file says so, and only a run in that precision
    replays it (fp32 times in an AMP step, or the reverse, would be a silent wrong answer)."""
    import torch
    path = tmp_path / "t.json"
    assert main(["host-times", "--model", MODEL, "--batch", str(BATCH), "--precision",
                 precision, "--out", str(path), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert f"timed in {precision} on Test GPU" in out
    assert f"replay with pimrt run --precision {precision} --host-times {path}" in out
    assert fake_gpu.dtypes == {getattr(torch, dtype)}
    doc = json.loads(path.read_text())
    assert doc["precision"] == precision
    amp = captured(MODEL, BATCH, 32, precision=precision)
    assert len(doc["kernels"]) == len(_kernels(amp))
    args = ["run", "--model", MODEL, "--batch", str(BATCH), "--functional", "none", "--quiet"]
    assert main(args + ["--precision", precision, "--host-times", str(path),
                        "--out", str(tmp_path / "replay")]) == 0
    s = json.loads((tmp_path / "replay" / "summary.json").read_text())
    assert s["host_times"]["source"] == "file" and s["host_times"]["precision"] == precision
    assert s["precision"] == precision
    capsys.readouterr()
    # an fp32 run refuses them, before any work
    assert main(args + ["--host-times", str(path), "--out", str(tmp_path / "fp32")]) == 2
    err = capsys.readouterr().err
    assert f'{path}: kernels timed in {precision} (its "precision"), this run is fp32' in err
    assert not (tmp_path / "fp32").exists()
    # and a file timed in fp32 (written before the field: no "precision") an AMP run
    fp32 = tmp_path / "fp32.json"
    _write(fp32, _full(captured(MODEL, BATCH, 32)))
    assert main(args + ["--precision", precision, "--host-times", str(fp32),
                        "--out", str(tmp_path / "amp")]) == 2
    err = capsys.readouterr().err
    assert (f'{fp32}: kernels timed in fp32 (its "precision", absent: fp32), this run is '
            f'{precision}; kernel times do not carry over between precisions: measure them '
            f'with pimrt host-times --precision {precision}') in err
    assert not (tmp_path / "amp").exists()


def test_fp32_kernels_are_timed_in_fp32(tmp_path, fake_gpu, graph):
    import torch
    assert main(["host-times", "--model", MODEL, "--batch", str(BATCH), "--out",
                 str(tmp_path / "t.json"), "--quiet"]) == 0
    assert fake_gpu.dtypes == {torch.float32}
    doc = json.loads((tmp_path / "t.json").read_text())
    assert doc["precision"] == "fp32"
    assert (doc["cudnn_allow_tf32"], doc["matmul_allow_tf32"]) == (
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
    times, fields = ht.load(tmp_path / "t.json", graph)
    assert fields["precision"] == "fp32" and len(times) == len(_kernels(graph))


def test_compare_measures_each_model_and_replays_the_folder(tmp_path, capsys, fake_gpu):
    args = ["compare", "--models", "resnet_cifar_20,resnet_cifar_32", "--policies", "authority",
            "--batch", str(BATCH), "--input", "32", "--quiet"]
    assert main(args + ["--host-times", "measure", "--out", str(tmp_path / "a")]) == 0
    for m in ("resnet_cifar_20", "resnet_cifar_32"):
        assert (tmp_path / "a" / m / "host_times.json").exists()
    assert main(args + ["--host-times", str(tmp_path / "a"), "--out", str(tmp_path / "b")]) == 0
    a, b = (json.loads((tmp_path / d / "compare.json").read_text()) for d in "ab")
    assert [r["step_ms"] for r in a] == [r["step_ms"] for r in b]
    assert {r["host_times"]["source"] for r in b} == {"file"}
    capsys.readouterr()
    # one file cannot serve two models
    assert main(args + ["--host-times", str(tmp_path / "a" / "resnet_cifar_20" /
                                            "host_times.json"),
                        "--out", str(tmp_path / "c")]) == 2
    assert "a file holds one model's times" in capsys.readouterr().err


def test_host_times_command_measures_without_the_simulator(tmp_path):
    """`pimrt host-times` on a GPU machine: the file, and no memctl extension loaded (a bare
    GPU machine may have no compiler to build it)."""
    import subprocess
    import sys
    out = tmp_path / "t.json"
    code = f"""
import sys
import pimrt.runtime.host_times as ht
from pimrt.host import HostWork
ht.require_cuda = lambda *a, **kw: None
ht.device_name = lambda device="cuda": "Test GPU"
ht.measure_compute_ms = lambda layer, batch, phase, rng, device, **kw: 0.125
from pimrt.cli import main
assert main(["host-times", "--model", "{MODEL}", "--batch", "{BATCH}", "--out", r"{out}",
             "--quiet"]) == 0
print(sorted(m for m in sys.modules if m.startswith("pimrt._memctl") or m == "matplotlib"))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == "[]"
    assert "timed in fp32 on Test GPU, written to" in r.stdout
    graph = captured(MODEL, BATCH, 32)
    times, fields = ht.load(out, graph)
    assert list(times) == _kernels(graph) and set(times.values()) == {0.125}
    assert fields["device"] == "Test GPU" and fields["input_shape"] == [BATCH, 3, 32, 32]


def test_measure_without_a_gpu_fails_before_any_work(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("pimrt.host.measure.cuda_available", lambda: False)
    monkeypatch.setattr(ht, "cuda_available", lambda: False)
    out = tmp_path / "out"
    assert main(["run", "--model", MODEL, "--batch", str(BATCH), "--host-times", "measure",
                 "--out", str(out), "--quiet"]) == 2
    assert "torch.cuda.is_available() is False" in capsys.readouterr().err
    assert not out.exists()
    assert main(["host-times", "--model", MODEL, "--out", str(out / "t.json")]) == 2
    assert "pimrt host-times times the host kernels on a CUDA GPU" in capsys.readouterr().err
    assert not out.exists()


def test_bf16_kernels_on_a_gpu_without_bf16_are_refused_before_any_work(tmp_path, capsys,
                                                                          monkeypatch):
    monkeypatch.setattr(ht, "cuda_available", lambda: True)
    monkeypatch.setattr(ht, "bf16_supported", lambda device="cuda": False)
    monkeypatch.setattr(ht, "device_name", lambda device="cuda": "Tesla V100-SXM2-32GB")
    out = tmp_path / "out"
    assert main(["host-times", "--model", MODEL, "--batch", str(BATCH), "--precision",
                 "amp-bf16", "--out", str(out / "t.json")]) == 2
    err = capsys.readouterr().err
    assert "pimrt host-times --precision amp-bf16 times the host kernels in bfloat16, and " \
           "Tesla V100-SXM2-32GB has no bfloat16 arithmetic" in err
    assert main(["run", "--model", MODEL, "--batch", str(BATCH), "--precision", "amp-bf16",
                 "--host-times", "measure", "--out", str(out), "--quiet"]) == 2
    assert "--host-times measure --precision amp-bf16 times the host kernels in bfloat16" \
        in capsys.readouterr().err
    assert not out.exists()


def test_a_kernel_the_gpu_cannot_run_is_one_line_and_no_file(tmp_path, capsys, fake_gpu,
                                                               monkeypatch):
    def fail(layer, batch, phase, rng, device, **kw):
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB\n(more lines)")
    monkeypatch.setattr(ht, "measure_compute_ms", fail)
    path = tmp_path / "t.json"
    assert main(["host-times", "--model", MODEL, "--batch", str(BATCH), "--precision",
                 "amp-fp16", "--out", str(path), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "could not time conv1 forward channels 0..16 on 2 images in float16 on cuda: " \
           "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB" in err
    assert "(more lines)" not in err and "Traceback" not in err
    assert not path.exists()


def _write(path, kernels, batch=BATCH, **head):
    doc = {"format": ht.FORMAT, "model": MODEL, "batch": batch, **head, "kernels": kernels}
    path.write_text(json.dumps(doc))
    return path


def _full(graph, ms=0.01):
    return [{"layer": k[0], "phase": k[1], "channels": [k[2], k[3]], "samples": k[4], "ms": ms}
            for k in _kernels(graph)]


@pytest.mark.parametrize("edit, message", [
    (lambda ks, h: ("{\n  \"kernels\": [,]\n}", h), r":2:\d+: not valid JSON"),
    (lambda ks, h: (ks, {**h, "batch": 8}), "measured at batch 8, this run is at batch 2"),
    (lambda ks, h: (ks, {**h, "model": "resnet18"}), "measured on model 'resnet18'"),
    (lambda ks, h: (ks, {**h, "input_shape": [2, 3, 224, 224]}), "measured with input"),
    (lambda ks, h: ([{**ks[0], "layer": "layer9_conv"}] + ks[1:], h),
     r"kernels\[0\]: 'layer9_conv' is not a CONV or linear layer of resnet_cifar_20"),
    (lambda ks, h: ([{**ks[0], "layer": "layer1_0_bn1"}] + ks[1:], h),
     "is not a CONV or linear layer"),
    (lambda ks, h: (ks[:3] + [{**ks[3], "phase": "sideways"}] + ks[4:], h),
     r"kernels\[3\]: phase 'sideways'"),
    (lambda ks, h: ([{**ks[0], "channels": [0, 999]}] + ks[1:], h),
     r"kernels\[0\]: channels \[0, 999\], expected \[lo, hi\] with 0 <= lo < hi <= 16"),
    (lambda ks, h: ([{**ks[0], "samples": 3}] + ks[1:], h),
     r"kernels\[0\]: samples 3, expected a divisor of the batch \(2\)"),
    (lambda ks, h: ([{**ks[0], "ms": -1}] + ks[1:], h), r"kernels\[0\]: ms -1, expected a "
                                                         "positive number"),
    (lambda ks, h: ([{**ks[0], "ms": "fast"}] + ks[1:], h), "ms 'fast'"),
    (lambda ks, h: ([{k: v for k, v in ks[0].items() if k != "ms"}] + ks[1:], h),
     r"kernels\[0\]: missing ms"),
    (lambda ks, h: (ks[:-2], h), r"has no time for 2 of the \d+ host kernels this run needs"),
    (lambda ks, h: (ks, {**h, "format": "other/9"}), "this pimrt reads"),
    (lambda ks, h: (ks, {**h, "precision": "fp64"}),
     "precision 'fp64', expected one of fp32, amp-fp16, amp-bf16"),
    (lambda ks, h: (ks, {**h, "precision": ["fp32"]}), r"precision \['fp32'\], expected"),
])
def test_a_bad_file_is_refused_before_any_work(graph, tmp_path, capsys, edit, message):
    kernels, head = edit(_full(graph), {})
    path = tmp_path / "times.json"
    if isinstance(kernels, str):
        path.write_text(kernels)
    else:
        _write(path, kernels, **head)
    out = tmp_path / "out"
    assert main(["run", "--model", MODEL, "--batch", str(BATCH), "--functional", "golden",
                 "--host-times", str(path), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    import re
    assert re.search(message, err), err
    assert str(path) in err
    assert not out.exists()


def test_times_for_fewer_groups_do_not_cover_a_run_with_more(tmp_path):
    from pimrt.runtime import session
    graph = captured(MODEL, 8, 32)
    path = _write(tmp_path / "serial.json",
                  [{"layer": k[0], "phase": k[1], "channels": [k[2], k[3]], "ms": 0.01}
                   for k in ht.step_kernels(graph, 1, None, pipelined=False)], batch=8)
    # a file without "samples" (as written before batch slices): each kernel on the batch
    times, info = session.host_times(graph, str(path), 4, "hbm2_pim", "v100", pipelined=False)
    assert info["kernels"] == len(times) and all(v == 0.01 for v in times.values())
    with pytest.raises(ConfigError, match="measure them on a GPU machine"):
        # (on four stacks the group rule splits CONVs of this batch-8 step)
        session.host_times(graph, str(path), 4, "v100_hbm2_pim", "v100", pipelined=True)
    assert np.isclose(sum(times.values()), 0.01 * len(times))


def test_a_sliced_forward_kernel_has_its_own_time():
    """A CONV's forward on one batch slice is its own kernel (samples = batch / slices): its
    measured time replaces that task's compute, and the whole-batch kernel's does not."""
    from pimrt.runtime.placement import place_step
    from pimrt.runtime.schedule import build_schedule
    from pimrt.runtime.timing import step_part
    from pimrt.runtime.work import context, host_kernel, host_records
    from pimrt.trace.records import COMPUTE, DELAY
    graph = captured(MODEL, 8, 32)
    part = step_part("hbm2_pim", "v100")
    task = next(t for t in build_schedule(graph, 2, slices=4).tasks
                if t.kind == "conv" and t.phase == "fwd" and t.slice == 1)
    kernel = host_kernel(task, graph)
    assert kernel[4] == 2 and kernel[2] == 0
    whole = kernel[:4] + (8,)
    for times, ms in (({kernel: 0.25, whole: 4.0}, 0.25), ({whole: 4.0}, None)):
        recs = host_records(task, context(graph, part, place_step(graph, part), "v100",
                                          host_times=times))
        delay = int(recs["value"][np.isin(recs["op"], (DELAY, COMPUTE))].sum())
        if ms is None:       # no time for the slice: the model's, for 2 images
            from pimrt.host import HostWork
            ms = HostWork(graph[task.layer], 2, kernel[1], kernel[2:4]).compute_seconds() * 1e3
            assert delay == HostWork(graph[task.layer], 2, kernel[1], kernel[2:4]) \
                .compute_cycles(None, part.timing["tCK"])
        else:
            assert delay == math.ceil(ms * 1e6 / part.timing["tCK"])
