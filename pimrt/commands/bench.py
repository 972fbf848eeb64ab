"""`pimrt bench NAME`: benchmarks. Each is one module in pimrt/bench/ with HELP,
add_arguments(parser) and run(args) -> int; adding a benchmark means adding a file there."""
from __future__ import annotations

import importlib
import pkgutil

from pimrt import bench


def register(subparsers) -> None:
    parser = subparsers.add_parser("bench", help="run a benchmark and print its figures")
    sub = parser.add_subparsers(dest="bench", metavar="BENCH")
    sub.required = True
    for info in sorted(pkgutil.iter_modules(bench.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):      # a benchmark's helper module
            continue
        module = importlib.import_module(f"pimrt.bench.{info.name}")
        # HELP is plain text: argparse %-formats a help string ("within 5%" would not render)
        p = sub.add_parser(info.name, help=module.HELP.replace("%", "%%"),
                           description=module.HELP)
        module.add_arguments(p)
        p.set_defaults(func=module.run)
