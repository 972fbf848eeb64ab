"""The `pimrt` command. Each sub-command is one module in pimrt/commands/ with a
`register(subparsers)` function; adding a command means adding a file there."""
from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from pimrt import __version__, commands
from pimrt.errors import PimrtError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pimrt", description="pimrt: CNN training with CONV on the host and non-CONV "
        "layers on processing-in-memory, timed through a cycle-level model of the shared DRAM")
    parser.add_argument("--version", action="version", version=f"pimrt {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"pimrt.commands.{info.name}")
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
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
