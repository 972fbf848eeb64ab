"""`--help` of every pimrt command and subcommand (and `python -m pimrt.train --help`): usage
text, exit 0, never a traceback (argparse %-formats each help string: a bare % broke
`pimrt bench --help`)."""
import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pimrt.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]


def _commands(parser, path=()):
    """Every command path of the parser: (), ("bench",), ("bench", "memctl"), ..."""
    yield path
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, (*path, name))


COMMANDS = list(_commands(build_parser()))


def test_every_command_is_walked():
    names = {" ".join(p) for p in COMMANDS}
    assert {"run", "compare", "sweep", "train", "memsim", "bench", "bench fidelity",
            "bench memctl", "bench laysa"} <= names


@pytest.mark.parametrize("path", COMMANDS, ids=[" ".join(p) or "pimrt" for p in COMMANDS])
def test_help_of_every_command(path, capsys):
    with pytest.raises(SystemExit) as stop:
        main([*path, "--help"])
    out, err = capsys.readouterr()
    assert stop.value.code in (0, None), err
    assert "Traceback" not in out + err
    assert out.startswith(f"usage: {' '.join(('pimrt', *path))}"), out[:200]


def test_help_of_python_m_pimrt_train():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-m", "pimrt.train", "--help"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stdout + r.stderr
    assert r.stdout.startswith("usage: python -m pimrt.train"), r.stdout[:200]
