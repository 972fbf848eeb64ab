"""The simulator's outputs do not move when it gets faster (issue 38): `pimrt run` on small
cases (every policy, the layer rule, channel groups, Layrub, a GradSA and a LaySA update)
writes the same summary.json (but its wall-clock and path fields), layers.csv and trace.json
as the goldens in tests/speed_identity/, which the simulator before the speed work wrote.

A change meant to move cycles (a new bound, a new timing rule) regenerates them, with one
command, and commits them with it:

    PYTHONPATH=. .venv/bin/python tests/test_speed_identity.py --regenerate
"""
from __future__ import annotations

import gzip
import json
import pathlib
import sys

import pytest

HERE = pathlib.Path(__file__).parent
GOLDEN = HERE / "speed_identity"
ROOT = HERE.parent
BASE = ["run", "--model", "resnet_cifar_20", "--batch", "4", "--input", "32",
        "--functional", "none", "--quiet"]
CASES = {
    "serial": ["--policy", "serial"],
    "bank_partition": ["--policy", "bank_partition"],
    "authority": ["--policy", "authority"],
    "authority_layer_rule": ["--authority-rule", "layer"],
    "groups4": ["--groups", "4", "--slices", "1"],
    "layrub": ["--layrub"],
    "gradsa": ["--update", "gradsa"],
    "laysa": ["--update", "laysa"],
}
# summary fields that are not the simulation's result: its wall-clock time, where it wrote
WALL_CLOCK = ("simulation_wall_s", "plots")


def outputs(case: str, out: pathlib.Path) -> dict[str, bytes]:
    """`pimrt run` of one case into `out`: its summary.json (without the wall-clock fields,
    the checkout's and the output folder's paths replaced), layers.csv and trace.json."""
    from pimrt.cli import main
    assert main(BASE + CASES[case] + ["--out", str(out)]) == 0
    s = json.loads((out / "summary.json").read_text())
    for key in WALL_CLOCK:
        s.pop(key, None)
    text = json.dumps(s, indent=1, sort_keys=True).replace(str(ROOT), "<repo>")
    return {"summary.json": text.encode(), "layers.csv": (out / "layers.csv").read_bytes(),
            "trace.json": (out / "trace.json").read_bytes()}


def _golden(case: str, name: str) -> bytes:
    path = GOLDEN / case / name
    if name == "trace.json":
        return gzip.decompress(path.with_suffix(".json.gz").read_bytes())
    return path.read_bytes()


def regenerate(cases=None) -> None:
    """Write the goldens from this checkout's simulator (trace.json gzipped)."""
    import tempfile
    for case in cases or CASES:
        with tempfile.TemporaryDirectory() as tmp:
            got = outputs(case, pathlib.Path(tmp) / "out")
        folder = GOLDEN / case
        folder.mkdir(parents=True, exist_ok=True)
        for name, data in got.items():
            if name == "trace.json":
                (folder / "trace.json.gz").write_bytes(gzip.compress(data, mtime=0))
            else:
                (folder / name).write_bytes(data)
        print(f"wrote {folder}")


@pytest.mark.parametrize("case", list(CASES))
def test_outputs_identical_to_golden(case, tmp_path):
    got = outputs(case, tmp_path / "out")
    for name, data in got.items():
        want = _golden(case, name)
        if name == "summary.json":
            assert json.loads(data) == json.loads(want), f"{case}: {name}"
        assert data == want, f"{case}: {name} differs from {GOLDEN / case / name}"


@pytest.mark.parametrize("case", ["authority", "bank_partition", "layrub"])
def test_outputs_identical_in_small_blocks(case, tmp_path, monkeypatch):
    """Streams cut into small blocks and fed in small chunks: the same outputs."""
    from pimrt.runtime import sides, timing, work
    monkeypatch.setattr(work, "BLOCK_REQUESTS", 1000)
    monkeypatch.setattr(timing, "FEED_RECORDS", 4096)
    monkeypatch.setattr(sides, "SIDE_FEED_RECORDS", 4096)
    for name, data in outputs(case, tmp_path / "out").items():
        assert data == _golden(case, name), f"{case}: {name}"


if __name__ == "__main__":
    if sys.argv[1:2] != ["--regenerate"]:
        sys.exit(__doc__)
    regenerate(sys.argv[2:] or None)
