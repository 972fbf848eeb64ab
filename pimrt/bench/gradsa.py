"""`pimrt bench gradsa`: every gradient compressor trained side by side on the same task.

For each compressor it launches a data-parallel run (torchrun, gloo, `--world` ranks on this
machine) of pimrt.train, then prints one table: bytes each rank hands to the collectives per
step (headers, padding and size exchanges included), the ratio against dense fp32 over the
whole run (warm-up included), the codec throughput of the hook, the test accuracy after the
same budget, and the step time estimated at 1, 10 and 100 Gbit/s:
    t = t_compute (fwd+bwd+update, measured here, one thread) + t_codec (measured in the run)
        + ring wire bytes per rank per step * 8 / bandwidth.
Defaults (ResNet-18, 11.2M parameters, digits at 16x16, 2 ranks, 5 epochs, 7 compressors) take
about 15-25 minutes on a 2-core CPU machine; `--quick` (tinycnn, 1 epoch) about 1-2 minutes;
the thesis figure uses `--input 32 --epochs 10` (about 2 hours on 2 cores).
"""
from __future__ import annotations

import csv
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

from pimrt.cliflags import alias
from pimrt.errors import PimrtError

HELP = "GradSA vs dense, fp16, int8, TernGrad, DGC, PowerSGD: bytes on the wire, ratio, accuracy, step time"
DEFAULT = "dense,fp16,int8,terngrad,powersgd,dgc,gradsa"
BANDWIDTHS = (1e9, 10e9, 100e9)
ROOT = Path(__file__).resolve().parents[2]


def add_arguments(p) -> None:
    a = p.add_argument
    a("--compressors", default=DEFAULT, help=f"comma-separated (default {DEFAULT}; also dgc-int64)")
    a("--model", default="resnet18", help="tinycnn, mlp or a pimrt.zoo model (default resnet18)")
    a("--dataset", default="digits", help="digits or synthetic")
    a("--input", dest="image_size", type=int, default=16, metavar="INPUT",
      help="image height and width")
    alias(p, "--image-size", "--input")
    a("--epochs", type=int, default=5)
    a("--max-steps", type=int, default=0)
    a("--batch", dest="batch_size", type=int, default=32, metavar="BATCH", help="per rank")
    alias(p, "--batch-size", "--batch")
    a("--world", dest="nproc", type=int, default=2, metavar="RANKS",
      help="ranks (processes) per run, as pimrt run's --world")
    alias(p, "--nproc", "--world")
    a("--estimate-ranks", type=int, default=0, help="ranks assumed by the step-time model (0: --world)")
    a("--lr", type=float, default=0.05)
    a("--density", type=float, default=0.001)
    a("--warmup-steps", type=int, default=20)
    a("--warmup-start-density", type=float, default=0.05)
    a("--value-codec", default="int8")
    a("--index-codec", default="auto")
    a("--powersgd-rank", type=int, default=4)
    a("--seed", type=int, default=0)
    a("--timeout", type=float, default=300.0, help="collective timeout of each run (seconds)")
    a("--out", default="results/bench_gradsa", help="run directories, logs and the table")
    a("--reuse", action="store_true", help="reuse finished runs in --out made with the same options")
    a("--quick", action="store_true", help="smoke size: tinycnn, 8x8, 1 epoch")
    a("--scale", default="", help="comma-separated rank counts (e.g. 2,4,8): every compressor at each, "
      "bytes on the wire per rank and in total (replaces --world)")
    a("--json", dest="json_file", default=None, help="write the rows and settings as JSON")
    a("--csv", dest="csv_file", default=None, help="write the rows as CSV")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _train_args(args, compressor: str, out: Path) -> list[str]:
    return ["--model", args.model, "--dataset", args.dataset, "--input", str(args.image_size),
            "--epochs", str(args.epochs), "--max-steps", str(args.max_steps), "--batch", str(args.batch_size),
            "--lr", str(args.lr), "--compressor", compressor, "--density", str(args.density),
            "--warmup-steps", str(args.warmup_steps), "--warmup-start-density", str(args.warmup_start_density),
            "--value-codec", args.value_codec, "--index-codec", args.index_codec,
            "--powersgd-rank", str(args.powersgd_rank), "--seed", str(args.seed), "--timeout", str(args.timeout),
            "--out", str(out), "--no-progress", "--force"]     # a run again: over the last one


def _launch(args, compressor: str, out: Path) -> tuple[int, float]:
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")])))
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    if args.nproc == 1:
        cmd = [sys.executable, "-m", "pimrt.train"]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(args.nproc),
               "--master-addr", "127.0.0.1", "--master-port", str(_free_port()), "-m", "pimrt.train"]
    t0 = time.perf_counter()
    with open(out.parent / f"{compressor}.log", "w") as log:
        rc = subprocess.call(cmd + _train_args(args, compressor, out), stdout=log, stderr=subprocess.STDOUT,
                             env=env, cwd=os.getcwd())
    return rc, time.perf_counter() - t0


def measure_compute(args, steps: int = 4) -> float:
    """Median seconds of forward + backward + SGD update of one rank's batch, one thread."""
    import torch
    import torch.nn.functional as F
    from pimrt.train.models import build_model

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = build_model(args.model, 10, args.image_size, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
    y = torch.randint(0, 10, (args.batch_size,))
    times = []
    for i in range(steps + 1):
        t0 = time.perf_counter()
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
        if i:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _steady_ratio(metrics: Path, tail: float = 0.2) -> float | None:
    rows = [r for r in csv.DictReader(open(metrics)) if r.get("bytes_sent")]
    rows = rows[int(len(rows) * (1 - tail)):]
    sent = sum(int(r["bytes_sent"]) for r in rows)
    return sum(int(r["dense_bytes"]) for r in rows) / sent if sent else None


def _row(name: str, s: dict, out: Path, t_compute: float, ranks: int, wall: float) -> dict:
    c = s["counter"]
    steps = max(1, c["steps"])
    per_step = c["bytes_sent"] / steps
    # ring model re-derived at `ranks` from the per-rank bytes of each collective kind
    n_run = s["world_size"]
    gather_like = name in ("gradsa", "dgc", "dgc-int64", "int8", "terngrad")
    factor = (ranks - 1) if gather_like else 2.0 * (ranks - 1) / ranks
    wire = per_step * factor
    codec = (c["encode_s"] + c["decode_s"]) / steps
    row = {
        "compressor": name, "steps": c["steps"], "bytes_per_step": per_step, "ratio": c["dense_bytes"] / c["bytes_sent"],
        "steady_ratio": _steady_ratio(out / "metrics.csv"),
        "encode_Melem_s": c["elements"] / c["encode_s"] / 1e6 if c["encode_s"] > 0 else None,
        "decode_Melem_s": c["elements"] / c["decode_s"] / 1e6 if c["decode_s"] > 0 else None,
        "codec_s_per_step": codec, "final_acc": s["final_test_acc"], "params_identical": s["params_identical"],
        "measured_step_s": s["mean_step_time_s"], "run_wall_s": wall, "world_size": n_run,
        # measured at the run's own world size: the ring model of every collective it made
        "wire_per_rank_step": c["wire_bytes"] / steps,
        "wire_total_step": sum(r["wire_bytes"] for r in s["counters_all_ranks"]) / steps,
    }
    for bw in BANDWIDTHS:
        row[f"est_step_s_{int(bw / 1e9)}G"] = t_compute + codec + wire * 8 / bw
    return row


def _fmt(v, spec):
    if v is None:
        width = "".join(ch for ch in spec.split(".")[0].split(",")[0] if ch.isdigit())
        return "-".rjust(int(width or 1))
    return format(v, spec)


def print_table(rows: list[dict], dense_acc: float | None, t_compute: float, ranks: int) -> None:
    head = (f"{'compressor':<10} {'bytes/step':>11} {'ratio':>8} {'steady':>8} {'enc Me/s':>9} {'dec Me/s':>9} "
            f"{'acc %':>6} {'d-acc':>6} {'t@1G s':>8} {'t@10G s':>8} {'t@100G s':>8} {'same':>5}")
    print(head)
    print("-" * len(head))
    for r in rows:
        if "error" in r:
            print(f"{r['compressor']:<10} FAILED: {r['error']}")
            continue
        dacc = None if dense_acc is None or r["final_acc"] is None else 100 * (r["final_acc"] - dense_acc)
        print(f"{r['compressor']:<10} {_fmt(r['bytes_per_step'], '11,.0f')} {_fmt(r['ratio'], '8.1f')} "
              f"{_fmt(r['steady_ratio'], '8.1f')} {_fmt(r['encode_Melem_s'], '9.1f')} {_fmt(r['decode_Melem_s'], '9.1f')} "
              f"{_fmt(100 * r['final_acc'] if r['final_acc'] is not None else None, '6.2f')} {_fmt(dacc, '+6.2f')} "
              f"{r['est_step_s_1G']:8.3f} {r['est_step_s_10G']:8.3f} {r['est_step_s_100G']:8.3f} "
              f"{'yes' if r['params_identical'] else 'NO':>5}")
    print(f"bytes/step: per rank, everything handed to the collectives; ratio: dense fp32 bytes / bytes sent "
          f"over the whole run (warm-up included); steady: last 20% of steps; Me/s: gradient elements per "
          f"second of hook codec time; t@B: {t_compute:.3f} s compute + codec + ring wire time at {ranks} ranks; "
          f"same: parameters bit-identical on all ranks")


def run(args) -> int:
    from pimrt.gradsa import registry
    from pimrt.train import cli

    if args.quick:
        args.model, args.image_size, args.epochs = "tinycnn", 8, 1
    names = [n.strip() for n in args.compressors.split(",") if n.strip()]
    if not names:
        raise PimrtError("no compressors given")
    probe = cli.build_parser().parse_args(_train_args(args, names[0], Path(args.out)))
    for n in names:  # every option checked before anything is launched
        probe.compressor = n
        cli.validate(probe)
    if args.nproc < 1:
        raise PimrtError(f"--nproc must be >= 1, got {args.nproc}")
    if args.scale:
        return _run_scale(args, names)
    ranks = args.estimate_ranks or args.nproc
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t_compute = measure_compute(args)
    print(f"model {args.model} @ {args.image_size}px, {args.nproc} ranks x batch {args.batch_size}, "
          f"{args.epochs} epochs; compute {t_compute:.3f} s/step (one thread)", flush=True)
    rows, failed = _run_all(args, names, out, t_compute, ranks)
    dense = next((r for r in rows if r["compressor"] == "dense" and "error" not in r), None)
    dense_acc = dense["final_acc"] if dense else None
    for r in rows:
        if "error" not in r:
            r["acc_delta_points"] = None if dense_acc is None else 100 * (r["final_acc"] - dense_acc)
    print()
    print_table(rows, dense_acc, t_compute, ranks)
    settings = {k: v for k, v in vars(args).items() if k not in ("func",)}
    if args.json_file:
        Path(args.json_file).write_text(json.dumps({"settings": settings, "compute_s_per_step": t_compute,
                                                    "rows": rows}, indent=2, default=str))
    if args.csv_file:
        keys = sorted({k for r in rows for k in r}, key=lambda k: (k != "compressor", k))
        with open(args.csv_file, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys)
            w.writeheader()
            w.writerows(rows)
    return 1 if failed else 0


def _run_all(args, names, out: Path, t_compute: float, ranks: int) -> tuple[list[dict], int]:
    """Train every compressor at args.nproc ranks (or reuse a finished run); (rows, failures)."""
    from pimrt.train import cli
    out.mkdir(parents=True, exist_ok=True)
    rows, failed = [], 0
    for i, name in enumerate(names, 1):
        run_dir = out / name
        summary = run_dir / "summary.json"
        want = cli.recorded(cli.parse(_train_args(args, name, run_dir)))
        wall = 0.0
        if args.reuse and summary.is_file() and json.loads(summary.read_text()).get("args") == want:
            print(f"[{i}/{len(names)}] {name}: reusing {summary}", flush=True)
        else:
            summary.unlink(missing_ok=True)
            print(f"[{i}/{len(names)}] {name}: training ...", flush=True)
            rc, wall = _launch(args, name, run_dir)
            if rc != 0 or not summary.is_file():
                failed += 1
                tail = (out / f"{name}.log").read_text().strip().splitlines()[-1:] or [""]
                rows.append({"compressor": name, "error": f"exit {rc}: {tail[0][:200]} (log: {out / (name + '.log')})"})
                print(f"[{i}/{len(names)}] {name}: FAILED (exit {rc}), see {out / (name + '.log')}", flush=True)
                continue
        s = json.loads(summary.read_text())
        row = _row(name, s, run_dir, t_compute, ranks, wall or s.get("wall_s", 0.0))
        rows.append(row)
        print(f"[{i}/{len(names)}] {name}: {row['steps']} steps, acc {100 * (row['final_acc'] or 0):.2f}%, "
              f"ratio {row['ratio']:.1f}x, {row['run_wall_s']:.0f} s", flush=True)
    return rows, failed


def _run_scale(args, names) -> int:
    """Every compressor at each rank count of --scale: bytes per rank and in total."""
    counts = []
    for v in args.scale.split(","):
        if not v.strip().isdigit() or int(v) < 1:
            raise PimrtError(f"--scale must list rank counts >= 1, got {v.strip()!r} in {args.scale!r}")
        counts.append(int(v))
    t_compute = measure_compute(args)
    rows, failed = [], 0
    for n in counts:
        args.nproc = n
        print(f"== {n} ranks: model {args.model} @ {args.image_size}px, batch {args.batch_size} per rank", flush=True)
        got, bad = _run_all(args, names, Path(args.out) / f"ranks{n}", t_compute, n)
        rows += got
        failed += bad
    print()
    print_scale(rows)
    if args.json_file:
        Path(args.json_file).write_text(json.dumps({"settings": {k: v for k, v in vars(args).items()
                                                                 if k != "func"}, "rows": rows}, indent=2, default=str))
    return 1 if failed else 0


def print_scale(rows: list[dict]) -> None:
    head = (f"{'compressor':<10} {'ranks':>5} {'sent/rank':>11} {'wire/rank':>12} {'wire total':>13} "
            f"{'vs dense':>9} {'acc %':>6}")
    print(head)
    print("-" * len(head))
    dense = {r["world_size"]: r for r in rows if r["compressor"] == "dense" and "error" not in r}
    for r in sorted((r for r in rows if "error" not in r), key=lambda r: (r["compressor"], r["world_size"])):
        d = dense.get(r["world_size"])
        gain = d["wire_per_rank_step"] / r["wire_per_rank_step"] if d and r["wire_per_rank_step"] else None
        print(f"{r['compressor']:<10} {r['world_size']:>5} {r['bytes_per_step']:>11,.0f} "
              f"{r['wire_per_rank_step']:>12,.0f} {r['wire_total_step']:>13,.0f} {_fmt(gain, '8.1f')}x "
              f"{_fmt(100 * r['final_acc'] if r['final_acc'] is not None else None, '6.2f')}")
    for r in rows:
        if "error" in r:
            print(f"{r['compressor']:<10} FAILED: {r['error']}")
    print("bytes per step over the whole run: sent/rank = handed to the collectives by a rank; wire/rank = what "
          "a ring moves per rank (all-reduce 2(N-1)/N x B, all-gather (N-1) x B); wire total = over all ranks; "
          "vs dense = dense's wire/rank over this one's")
