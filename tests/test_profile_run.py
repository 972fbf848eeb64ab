"""scripts/profile_run.py (docs/architecture.md, "Simulator speed"): the requests memctl
simulated for each run of a `pimrt run` are the streams' own: serial's holds every request of
the step once, the authority policy's slack rule simulates the step twice (its profiled step
under the per-layer rule, then its own), the plan's tasks alone once and, where the plan moved
weight gradients, again from the copy of the controller where the two streams part (only the
requests after it), and GPU-only, whose batch norms, ReLUs and adds are host kernels' lines,
more than serial."""
import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_requests_by_run(tmp_path):
    out, doc = tmp_path / "run", tmp_path / "profile.json"
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "profile_run.py"), "--json",
                           str(doc), "--", "run", "--model", "mobilenetv2", "--batch", "4",
                           "--input", "32", "--functional", "none", "--quiet", "--out",
                           str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    got = json.loads(doc.read_text())["requests_by_run"]
    step = summary["requests"]
    assert summary["authority_rule"] == "slack" and summary["deferred_weight_gradients"]
    assert got["serial"] == step and step < got["alone (plan)"] < 2 * step
    assert got["authority"] == 2 * step
    assert got["gpu_only"] > step
    assert "M req/CPU s" in done.stdout
