"""`pimrt bench speed` (pimrt/bench/speed.py): a --baseline that is not a pimrt checkout, or
one that cannot be built, is one line naming it (exit 2) before any run; a --fast run against
a baseline times both builds and compares their outputs."""
from __future__ import annotations

import json
import pathlib

from pimrt.cli import main

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("pimrt bench: error: --baseline "), lines[0]
    return lines[0]


def test_baseline_not_a_checkout(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    for path, words in ((tmp_path / "empty", "not a pimrt checkout"),
                        (tmp_path / "nothing", "not a folder")):
        assert main(["bench", "speed", "--fast", "--baseline", str(path),
                     "--out", str(tmp_path / "out")]) == 2
        line = _one_error_line(capsys)
        assert str(path) in line and words in line
    assert not (tmp_path / "out").exists()


def test_baseline_that_cannot_be_built(tmp_path, capsys):
    fake = tmp_path / "fake"
    for name in ("pimrt/__init__.py", "pimrt/cli.py", "pimrt/commands/run.py",
                 "pimrt/memctl/__init__.py", "memctl/sim.c"):
        (fake / name).parent.mkdir(parents=True, exist_ok=True)
        (fake / name).write_text("")
    (fake / "pimrt/memctl/_native.py").write_text(
        "raise RuntimeError('cannot build the memctl extension (no compiler)')\n")
    assert main(["bench", "speed", "--fast", "--baseline", str(fake),
                 "--out", str(tmp_path / "out")]) == 2
    line = _one_error_line(capsys)
    assert f"{fake.resolve()}: cannot be built: " in line and "no compiler" in line


def test_fast_against_itself(tmp_path, capsys):
    """This checkout as its own baseline: both timed, the same outputs."""
    assert main(["bench", "speed", "--fast", "--baseline", str(ROOT),
                 "--out", str(tmp_path / "out")]) == 0
    runs = json.loads((tmp_path / "out" / "speed.json").read_text())["runs"]
    assert [r["build"] for r in runs] == ["this", "baseline"]
    for r in runs:
        assert r["exit"] == 0 and r["cpu_s"] > 0 and r["peak_rss_mib"] > 0
    assert runs[1]["same_outputs"] is True and runs[0]["step_ms"] == runs[1]["step_ms"]
    assert "same as this build" in capsys.readouterr().out
