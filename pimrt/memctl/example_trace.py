"""Write an example host + PIM trace in pimrt's text format, shaped like co-executed CNN
layers: in each layer the host streams a CONV's feature maps (reads, and a write for every
third request) while the PIM works on the previous output-channel group with all-bank
requests; the two arrive in alternating bursts. Each layer sets its authority parameters.

    python -m pimrt.memctl.example_trace out.trace --requests 200000
"""
from __future__ import annotations

import argparse
import pathlib

import numpy as np

from pimrt.memctl.config import encode_address, load_part
from pimrt.trace import write_trace
from pimrt.trace.records import HOST, LAYER, PARAM, PARAM_IDS, PIM, READ, RECORD_DTYPE, WRITE


def example_chunks(requests: int, layers: int = 8, part: str = "hbm2_pim", burst: int = 512,
                   pim_fraction: float = 0.4):
    p = load_part(part)
    cols, chans, rows = p.columns_per_row, p.org["channels"], p.org["rows"]
    per_layer = requests // layers
    host_next = 0
    pim_next = 0
    for k in range(layers):
        head = np.zeros(3, RECORD_DTYPE)
        head["op"] = [LAYER, PARAM, PARAM]
        head["value"] = [k, 16 + 4 * (k % 3), 2000 + 1000 * (k % 4)]
        head["param"] = [0, PARAM_IDS["high_watermark"], PARAM_IDS["epoch_cap"]]
        yield head
        n = per_layer if k < layers - 1 else requests - per_layer * (layers - 1)
        i = np.arange(n, dtype=np.int64)
        block = i // burst
        # alternate bursts: a host burst, then a PIM burst when this block is a PIM block
        is_pim = (np.floor((block + 1) * pim_fraction) > np.floor(block * pim_fraction))
        out = np.zeros(n, RECORD_DTYPE)
        nh = int((~is_pim).sum())
        npim = int(is_pim.sum())
        h = host_next + np.arange(nh, dtype=np.uint64)
        out["addr"][~is_pim] = h * np.uint64(64)
        out["op"][~is_pim] = np.where(h % 3 == 2, WRITE, READ)
        out["requestor"][~is_pim] = HOST
        j = pim_next + np.arange(npim, dtype=np.int64)
        out["addr"][is_pim] = encode_address(
            p, channel=(j // cols) % chans, row=(rows // 2 + j // (cols * chans)) % rows,
            column=j % cols)
        out["op"][is_pim] = np.where(j % 3 == 2, WRITE, READ)
        out["requestor"][is_pim] = PIM
        host_next += nh
        pim_next += npim
        yield out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out", type=pathlib.Path)
    p.add_argument("--requests", type=int, default=200_000)
    p.add_argument("--layers", type=int, default=8)
    args = p.parse_args(argv)
    names = [f"layer{k}" for k in range(args.layers)]
    n = write_trace(args.out, example_chunks(args.requests, args.layers), "pimrt", names)
    print(f"{args.out}: {n} records")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
