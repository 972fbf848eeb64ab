"""The options of every command (pimrt, its sub-commands and benchmarks, python -m pimrt.train):
one spelling per concept, every default shown in help, the old spellings still parsed."""
from __future__ import annotations

import argparse
import re

import pytest

from pimrt import cli, cliflags
from pimrt.train import cli as train_cli


def _parsers() -> list[tuple[str, argparse.ArgumentParser]]:
    out = []

    def walk(p, name):
        out.append((name, p))
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for n, sub in a.choices.items():
                    walk(sub, f"{name} {n}")
    walk(cli.build_parser(), "pimrt")
    out.append(("python -m pimrt.train", train_cli.build_parser()))
    return out


PARSERS = _parsers()
NAMES = [n for n, _ in PARSERS]
# spellings of the concepts of cliflags.CONCEPTS a command might list
SPELLINGS = re.compile(r"^--(inputs?|input-size|image-size|img-size|size|resolution|batch|"
                       r"batch-size|batchsize|bs|models?|model-name|arch|net|network|world|"
                       r"world-size|nproc|nprocs|ranks)$")


def _listed(p) -> set[str]:
    return {s for a in p._actions if a.help is not argparse.SUPPRESS for s in a.option_strings}


def test_every_parser_is_walked():
    assert {"pimrt run", "pimrt compare", "pimrt bench sensitivity", "pimrt bench gradsa",
            "pimrt sweep", "python -m pimrt.train"} <= set(NAMES)


@pytest.mark.parametrize("name,parser", PARSERS, ids=NAMES)
def test_one_spelling_per_concept(name, parser):
    canonical = {s for listed, _ in cliflags.CONCEPTS.values() for s in listed}
    for s in _listed(parser):
        if SPELLINGS.match(s):
            assert s in canonical, f"{name}: help lists {s}; the concept's name is one of " \
                                   f"{sorted(canonical)}"
    old = {s for _, hidden in cliflags.CONCEPTS.values() for s in hidden}
    assert not _listed(parser) & old, f"{name}: help lists an old spelling"
    # a hidden spelling stands for a listed option of the same destination
    listed_dests = {a.dest for a in parser._actions if a.help is not argparse.SUPPRESS}
    for a in parser._actions:
        if a.help is argparse.SUPPRESS and a.option_strings and a.dest != "help":
            assert a.dest in listed_dests, f"{name}: hidden {a.option_strings} aliases nothing"


@pytest.mark.parametrize("name,parser", PARSERS, ids=NAMES)
def test_help_shows_every_default(name, parser):
    text = parser.format_help()                     # renders (no stray % in a help string)
    assert text
    fmt = parser._get_formatter()
    for a in parser._actions:
        if cliflags.shown_default(a) and not isinstance(a, argparse._SubParsersAction):
            shown = fmt._expand_help(a)
            assert cliflags.says_default(shown, a.default), \
                f"{name} {a.option_strings[0]}: help does not show its default " \
                f"{a.default!r}: {shown!r}"


def test_batch_and_out_have_defaults():
    for name, parser in PARSERS:
        for a in parser._actions:
            if "--batch" in a.option_strings:
                assert isinstance(a.default, int), f"{name} --batch has no default"
            if "--out" in a.option_strings and name != "pimrt sweep":
                assert a.default is not None, f"{name} --out has no default"


@pytest.mark.parametrize("argv,dest,value", [
    (["bench", "sensitivity", "--inputs", "32,224"], "inputs", "32,224"),
    (["bench", "layrub", "--input-size", "64"], "input_size", 64),
    (["bench", "gradsa", "--image-size", "8"], "image_size", 8),
    (["bench", "gradsa", "--batch-size", "4"], "batch_size", 4),
    (["bench", "laysa", "--image-size", "8"], "image_size", 8),
    (["bench", "gradsa", "--nproc", "3"], "nproc", 3),
    (["bench", "laysa", "--nproc", "3"], "nproc", 3),
])
def test_old_spellings_parse(argv, dest, value):
    args = cli.build_parser(argv[0]).parse_args(argv)
    assert getattr(args, dest) == value
    new = {"--inputs": "--input", "--input-size": "--input", "--image-size": "--input",
           "--batch-size": "--batch", "--nproc": "--world"}
    assert getattr(cli.build_parser(argv[0]).parse_args(
        [new.get(s, s) for s in argv]), dest) == value


def test_old_spellings_parse_in_train():
    p = train_cli.build_parser()
    old = p.parse_args(["--image-size", "8", "--batch-size", "4"])
    new = p.parse_args(["--input", "8", "--batch", "4"])
    assert (old.image_size, old.batch_size) == (new.image_size, new.batch_size) == (8, 4)
    assert p.parse_args([]).batch_size == 32           # the alias sets no default of its own
    help_text = p.format_help()
    assert "--batch-size" not in help_text and "--image-size" not in help_text
    assert "(default: 32)" in help_text


def test_train_usage_names_the_command_typed(capsys):
    assert train_cli.build_parser().format_usage().startswith("usage: python -m pimrt.train ")
    with pytest.raises(SystemExit):
        cli.main(["train", "--help"])
    assert capsys.readouterr().out.startswith("usage: pimrt train ")
