"""The host model against measured V100 kernels (DeepBench), or against the kernels of a file
`pimrt host-times` wrote on a GPU (--measured): each kernel's modelled time, as the
runtime times it alone (compute, fixed cost and its DRAM traffic through memctl), against the
measured one; error factors per phase and per class, on the fitted and the held-out rows; the
worst rows; a log-log plot. --fit refits the part's calibration parameters on the fitted rows."""
from __future__ import annotations

import json
import pathlib

HELP = ("host model vs measured V100 kernels (DeepBench), or vs a GPU's kernels pimrt "
        "host-times measured (--measured FILE): error factor per phase and class, fitted and "
        "held-out rows, worst rows, a log-log plot; --fit refits the calibration")


def add_arguments(p) -> None:
    p.add_argument("--host-part", default="v100",
                   help="host part (name or TOML file) (default: v100; v100_tc is measured "
                        "against the FP16-mixed rows)")
    p.add_argument("--part", default=None,
                   help="memory part the kernels' traffic runs on (default: the host part's "
                        "own memory, v100_hbm2_pim for the V100's: its four HBM2 stacks)")
    p.add_argument("--fast", action="store_true",
                   help="time the memory as bytes at the streaming bandwidth instead of "
                        "through memctl (what the fit uses; seconds instead of minutes)")
    p.add_argument("--fit", action="store_true",
                   help="refit the part's calibration parameters on the fitted rows first "
                        "and print them (the part file is not changed)")
    p.add_argument("--measured", type=pathlib.Path, default=None, metavar="FILE",
                   help="compare (and with --fit fit) the host part against the kernels of a "
                        "file pimrt host-times wrote on a GPU, instead of DeepBench's V100 "
                        "rows: a host part of that GPU calibrated on its own kernels")
    p.add_argument("--worst", type=int, default=5, help="worst rows shown each way (default 5)")
    p.add_argument("--out", type=pathlib.Path, default=pathlib.Path("results/bench-host"),
                   help="folder for PART.json and PART.png (default: results/bench-host)")
    p.add_argument("--json", type=pathlib.Path, default=None,
                   help="also write the JSON here")


def run(args) -> int:
    from pimrt.host import calibration as cal
    from pimrt.host.part import load_host_part
    from pimrt.output import atomic_write_text, check_out_dir
    from pimrt.runtime.session import part_for

    part = load_host_part(args.host_part)
    args.part = part_for(args.host_part, args.part)
    if args.measured is None:               # (each source's bad input before the folder)
        dataset = cal.data_for(part)        # one line when the part has no data
        rows, source = cal.load_rows(dataset), f"{dataset}, DeepBench V100"
    else:
        rows, info = cal.load_host_times(args.measured)
        dataset = info["file"]
        source = (f"{info['model']} batch {info['batch']} {info['input']}x{info['input']}, "
                  f"{info['precision']}, on {info['device']}")
        gpu = part.name.split("-")[0].lower()
        if gpu not in str(info["device"]).lower():
            print(f"note: {args.measured} was measured on {info['device']}, and host part "
                  f"{part.name} models another GPU ({gpu.upper()}): the figures below compare "
                  f"two GPUs, they do not calibrate one")
    check_out_dir(args.out)
    fit, held = cal.split(rows)
    print(f"{len(rows)} measured kernels ({source}): {len(fit)} fitted, "
          f"{len(held)} held out (by layer shape); host part {part.name}, memory {args.part}",
          flush=True)
    fitted = None
    if args.fit:
        nbytes = cal.dram_bytes(fit, part, cal.request_bytes(args.part))
        fitted = cal.fit_part(part, fit, nbytes=nbytes)
        print("fitted on the fitted rows:")
        for k, v in fitted.items():
            print(f"  {k} = {v:.4g}")
        over: dict = {}
        for k, v in fitted.items():
            t, key = k.split(".")
            over.setdefault(t, {})[key] = v
        part = load_host_part(part, over)
    model = cal.modelled_ms(rows, part, args.part, fast=args.fast)
    result = cal.report(rows, fit, held, model, args.worst, cal.request_bytes(args.part))
    result.update({"host_part": part.name, "memory_part": args.part, "dataset": dataset,
                   "memory": "bytes at the streaming bandwidth" if args.fast else "memctl",
                   "fitted_parameters": fitted})
    print(cal.format_report(result))
    stem = args.host_part.replace('/', '_')
    if args.measured is not None:
        stem += "-" + args.measured.stem
    path = args.out / f"{stem}.json"
    for p in (path, args.json):
        if p is not None:
            atomic_write_text(p, json.dumps(result, indent=1) + "\n")
    png = path.with_suffix(".png")
    cal.plot(rows, fit, model, png, f"{part.name} vs DeepBench V100 ({dataset})"
             if args.measured is None else f"{part.name} vs {source}")
    print(f"wrote {path} and {png}")
    return 0
