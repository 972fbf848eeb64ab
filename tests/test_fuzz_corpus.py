"""Issue 25's fuzz corpus (tests/fuzz/cases.json): hostile part files, traces, host-times
files, model files and output paths, each with the outcome it must keep: exit code 2 and one
line naming what and where (never a traceback, a hang or a silent wrong answer), or a clean run
with the figure it must print. The cases run in this process through pimrt.cli.main."""
from __future__ import annotations

import json
import pathlib

import pytest

from pimrt.cli import main

FUZZ = pathlib.Path(__file__).resolve().parent / "fuzz"
CASES = json.loads((FUZZ / "cases.json").read_text())["cases"]


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_fuzz_case(case, tmp_path, capsys):
    argv = [a.replace("{fuzz}", str(FUZZ)).replace("{tmp}", str(tmp_path)) for a in case["argv"]]
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == case["exit"], f"exit {code}, expected {case['exit']}\nstdout: {out}\nstderr: {err}"
    assert "Traceback" not in err
    if case["exit"] == 2:
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1, err                  # one clear line
        assert lines[0].startswith(f"pimrt {argv[0]}: error: ")
        assert case["stderr"] in lines[0], lines[0]
    if "stdout" in case:
        assert case["stdout"] in out, out


def test_corpus_covers_every_kind():
    kinds = {c["id"].split("_")[0] for c in CASES}
    assert {"part", "trace", "host", "model", "out"} <= kinds
    for sub in ("parts", "traces", "host_times", "models", "train", "sweeps"):
        used = {p.name for p in (FUZZ / sub).iterdir()} - {"base_hbm2.toml"}
        named = {n for c in CASES for a in c["argv"] for n in used if a.endswith(f"{sub}/{n}")
                 or f"{sub}/{n}:" in a}
        assert used == named, f"files in tests/fuzz/{sub} no case uses: {used - named}"
