"""README's first screen: how to reach `pimrt` after setup, and three cheap first commands
that parse as written (each runs in under a minute on 2 cores: tried by hand, 30 s together)."""
import pathlib
import shlex

from pimrt.cli import build_parser

README = (pathlib.Path(__file__).resolve().parents[1] / "README.md").read_text()


def _blocks() -> list[list[str]]:
    parts = README.split("```")
    return [[line for line in parts[i].split("\n", 1)[1].splitlines() if line.strip()]
            for i in range(1, len(parts), 2)]      # (the fence's info string dropped)


def test_the_first_two_commands_stay():
    assert _blocks()[0] == [
        "bash scripts/demo.sh     # set everything up, run the main job (results in results/)",
        "bash scripts/test.sh     # set everything up, run the tests"]


def test_readme_says_how_to_reach_pimrt_and_gives_three_first_commands():
    assert ". .venv/bin/activate" in README and ".venv/bin/pimrt" in README
    first = _blocks()[1]
    assert len(first) == 3
    for line in first:
        for command in line.split("#")[0].split(";"):
            argv = shlex.split(command)
            if argv[0] == "printf":
                continue
            assert argv[0] == "pimrt", line
            build_parser(argv[1]).parse_args(argv[1:])     # SystemExit if it does not parse
