"""Every pimrt command quoted in docs/ parses as written (fast: argparse only, so a renamed or
removed option fails here, not in a user's shell), and the command blocks marked runnable run
as a shell script in a fresh folder, `pimrt`, `python` and `.venv/bin/python` being this
checkout's: ```sh runnable cheap``` (seconds) in the fast suite, so in CI, ```sh runnable```
in the slow suite. A placeholder value (`...`) is left out with its option."""
from __future__ import annotations

import os
import pathlib
import re
import shlex
import subprocess
import sys

import pytest

from pimrt.cli import build_parser

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
# the history pages quote commands as they were run then
HISTORY = {"runtime-measurements.md", "memctl-measurements.md", "pim-measurements.md"}
RUNNABLE = {"sh runnable": "slow", "sh runnable cheap": "cheap"}
LEAD = re.compile(r"^(\.venv/bin/)?(pimrt|(\.venv/bin/)?python3? -m pimrt)\s")


def _blocks(path: pathlib.Path):
    """(info string, first line number, lines) of each fenced block."""
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("```"):
            info, start, body = lines[i][3:].strip(), i + 2, []
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            yield info, start, body
        i += 1


def _commands(body: list[str]):
    """Commands of a block: continuation lines joined, comments and prompts dropped."""
    cur = ""
    for line in body:
        line = line.strip()
        if line.startswith("$ "):
            line = line[2:]
        if cur:
            cur += " " + line
        elif LEAD.match(line):
            cur = line
        else:
            continue
        if cur.endswith("\\"):
            cur = cur[:-1].rstrip()
            continue
        yield cur
        cur = ""


def _quoted():
    for path in DOCS:
        if path.name in HISTORY:
            continue
        for info, start, body in _blocks(path):
            if info not in ("", "sh", "bash", *RUNNABLE):
                continue
            for cmd in _commands(body):
                yield pytest.param(cmd, id=f"{path.name}:{start}")


def _argv(cmd: str) -> list[str]:
    cmd = cmd.split(" #")[0].split(" > ")[0].split(" | ")[0].split(" && ")[0].split(";")[0]
    argv = shlex.split(cmd)
    argv = argv[argv.index("pimrt") + 1:] if "pimrt" in argv else argv[1:]
    # a placeholder value (...) is dropped with its option
    out = []
    for a in argv:
        if a == "...":
            if out and out[-1].startswith("--"):
                out.pop()
            continue
        out.append(a)
    return out


@pytest.mark.parametrize("cmd", list(_quoted()))
def test_a_command_in_the_docs_parses(cmd):
    argv = _argv(cmd)
    if not argv or argv[0] in ("-h", "--help"):
        return
    try:
        build_parser(argv[0]).parse_args(argv)
    except SystemExit as e:
        assert e.code == 0, f"does not parse: {cmd}"


def _runnable(kind: str):
    for path in DOCS:
        for info, start, body in _blocks(path):
            if RUNNABLE.get(info) == kind:
                yield pytest.param(path, start, body, id=f"{path.name}:{start}")


def _run_block(path, start, body, tmp_path, timeout):
    """The block as a bash script (-e: the first command that fails fails it) in tmp_path;
    in a block of `$ ` prompts, the prompted lines (the others are their output)."""
    bin_dir = tmp_path / ".bin"
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    bin_dir.mkdir()
    for where, how in ((tmp_path / ".venv" / "bin" / "python", ""), (bin_dir / "python", ""),
                       (bin_dir / "python3", ""), (bin_dir / "pimrt", " -m pimrt")):
        where.write_text(f'#!/bin/sh\nexec "{sys.executable}"{how} "$@"\n')
        where.chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT),
                                                        os.environ.get("PYTHONPATH")])))
    if any(line.startswith("$ ") for line in body):      # a prompt: the rest is output
        body = [line[2:] for line in body if line.startswith("$ ")]
    script = "set -euo pipefail\n" + "\n".join(body) + "\n"
    r = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=timeout)
    assert r.returncode == 0, f"{path.name}:{start}: exit {r.returncode}\n{r.stderr[-2000:]}"
    return r


@pytest.mark.parametrize("path,start,body", list(_runnable("cheap")))
def test_a_cheap_runnable_block_runs(path, start, body, tmp_path):
    _run_block(path, start, body, tmp_path, 120)


@pytest.mark.slow
@pytest.mark.parametrize("path,start,body", list(_runnable("slow")))
def test_a_runnable_block_runs(path, start, body, tmp_path):
    _run_block(path, start, body, tmp_path, 1800)


def test_cheap_and_slow_runnable_blocks_exist():
    assert len(list(_runnable("cheap"))) >= 3 and len(list(_runnable("slow"))) >= 3


@pytest.mark.parametrize("path", [p for p in DOCS if p.name not in HISTORY], ids=lambda p: p.name)
def test_no_path_a_user_does_not_have(path):
    """The docs name no folder of the machine they were written on (/work/..., /tmp/..., the
    shared material beside the checkout): a clone has none of them."""
    for n, line in enumerate(path.read_text().splitlines(), 1):
        assert "/work/" not in line and "../shared" not in line and "/tmp/" not in line, \
            f"{path.name}:{n}: {line}"
