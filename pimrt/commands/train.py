"""`pimrt train ...`: the data-parallel trainer (pimrt.train), same options; e.g.
`torchrun --nproc-per-node 2 -m pimrt train --compressor gradsa --manager laysa`."""
from __future__ import annotations

import argparse


def register(subparsers) -> None:
    p = subparsers.add_parser("train", help="data-parallel training with a gradient compressor and "
                              "a memory manager (pimrt.train; --help for its options)",
                              add_help=False, prefix_chars="\0")
    p.add_argument("argv", nargs=argparse.REMAINDER)
    p.set_defaults(func=run)


def run(args) -> int:
    from pimrt.train.loop import main
    return main(list(args.argv), name="pimrt train", prog="pimrt train")
