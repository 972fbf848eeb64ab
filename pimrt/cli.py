"""The `pimrt` command. Each sub-command is one module in pimrt/commands/ with a
`register(subparsers)` function; adding a command means adding a file there."""
from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from pimrt import __version__, cliflags, commands
from pimrt.errors import PimrtError


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command; with `command` (the first argument), only of that one when
    a module of that name registers it (a run then imports only what it needs: `pimrt memsim`
    starts in a fraction of the time)."""
    names = sorted(m.name for m in pkgutil.iter_modules(commands.__path__))
    if command in names:
        parser, sub = _parser([command])
        if command in sub.choices:
            return parser
    return _parser(names)[0]


def _parser(names: list[str]):
    parser = argparse.ArgumentParser(
        prog="pimrt", description="pimrt: CNN training with CONV on the host and non-CONV "
        "layers on processing-in-memory, timed through a cycle-level model of the shared DRAM")
    parser.add_argument("--version", action="version", version=f"pimrt {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in names:
        module = importlib.import_module(f"pimrt.commands.{name}")
        module.register(sub)
    cliflags.show_defaults(parser)
    return parser, sub


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv[0] if argv else None)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except PimrtError as exc:
        print(f"pimrt {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"pimrt {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader of stdout went away (| head): no traceback
        import os  # noqa: PLC0415
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
