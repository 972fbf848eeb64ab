"""The analysis scripts behind docs figures, on a small step. scripts/bound_gap.py (docs/
precision.md, "Where the AMP step loses against the bound"): the lag after the last phase is
the step's gap to the bound, kinds and tasks come sorted by how much they grew, peak shares
only for host tasks. scripts/gpu_only_split.py (docs/host_model.md, "Whole networks"): its
times add up to the GPU-only step and its bytes to memctl's requests (it asserts the latter
itself)."""
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "scripts"))
import bound_gap  # noqa: E402
import gpu_only_split  # noqa: E402


@pytest.fixture(scope="module")
def gap():
    return bound_gap.gap("resnet18", 4, 32, "amp-fp16", top=5)


def test_the_lag_after_the_update_is_the_gap_to_the_bound(gap):
    lag = gap["lag_at_phase_end_ms"]
    assert set(lag) == {"forward", "backward", "update"}
    assert lag["update"] == pytest.approx(gap["step_ms"] - gap["bound_ms"], abs=0.002)
    assert gap["step_over_bound"] == pytest.approx(gap["step_ms"] / gap["bound_ms"], rel=1e-3)
    assert gap["step_over_bound"] >= 1


def test_kinds_and_tasks_are_the_steps(gap):
    kinds = gap["by_kind"]
    assert all(k.split("/")[0] in ("host", "pim") for k in kinds)
    assert {"host/conv/fwd", "pim/batchnorm/fwd", "pim/batchnorm/bwd"} <= set(kinds)
    grew = [v["grew_ms"] for v in kinds.values()]
    assert grew == sorted(grew, reverse=True)           # the kinds that grew most first
    tasks = gap["tasks_grown_most"]
    assert len(tasks) == 5
    assert [t["grew_ms"] for t in tasks] == sorted((t["grew_ms"] for t in tasks), reverse=True)
    for t in tasks:
        assert (t["peak_share_alone"] is None) == (t["side"] == "pim")
        assert all(b["task"] and b["ms"] >= 0 for b in t["beside"])


def test_gpu_only_split_adds_up():
    out = gpu_only_split.split("resnet18", 4, 32, "amp-fp16")
    assert sum(out["by"].values()) == pytest.approx(out["step_ms"], abs=0.01)
    assert set(out["gb"]) == set(out["by"])
    gb = out["gb"]
    assert all(v >= 0 for v in gb.values()) and gb["batchnorm/bwd"] > gb["batchnorm/fwd"] > 0
    assert out["stream_gbs"] == pytest.approx(0.833 * 898.246, rel=0.001)


@pytest.mark.parametrize("script,args,says", [
    ("bound_gap.py", ["--precision", "amp-fp17"], "unknown precision 'amp-fp17'"),
    ("gpu_only_split.py", ["--input", "32", "--json", "/nonexistent-folder/x.json"],
     "--json /nonexistent-folder/x.json: no folder /nonexistent-folder"),
])
def test_a_bad_argument_is_one_line_not_a_traceback(script, args, says):
    import subprocess
    root = pathlib.Path(__file__).resolve().parents[1]
    r = subprocess.run([sys.executable, str(root / "scripts" / script), *args],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2
    assert r.stderr.strip() == f"{script}: error: {r.stderr.split(': error: ', 1)[1].strip()}"
    assert says in r.stderr and "Traceback" not in r.stderr and r.stdout == ""
