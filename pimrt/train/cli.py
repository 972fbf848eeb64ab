"""Command line of `python -m pimrt.train` (single process) or
`torchrun --nproc-per-node N -m pimrt.train ...`; every option is checked before training."""
from __future__ import annotations

import argparse
from pathlib import Path

from pimrt.cliflags import alias, show_defaults
from pimrt.gradsa import registry
from pimrt.gradsa.errors import GradSAError
from pimrt.train import data, managers


def build_parser(prog: str = "python -m pimrt.train") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="data-parallel training with a chosen "
                                "gradient compressor (DDP comm hook); metrics CSV, checkpoints, resume")
    a = p.add_argument
    a("--model", default="tinycnn", help="mlp, tinycnn, a pimrt.zoo name (e.g. resnet18) or your own "
      "nn.Module as FILE.py:NAME or module:NAME (as pimrt run --model)")
    a("--dataset", default="digits", help=f"one of {', '.join(data.DATASETS)}")
    a("--input", dest="image_size", type=int, default=32, metavar="INPUT",
      help="image height and width (digits are bilinearly scaled from 8x8 to this size)")
    alias(p, "--image-size", "--input")
    a("--channels", type=int, default=3)
    a("--synthetic-size", type=int, default=512, help="images in the synthetic dataset")
    a("--compressor", default="gradsa", help=f"one of {', '.join(registry.COMPRESSORS)}")
    a("--density", type=float, default=None, help="final fraction of each layer sent (default 0.001)")
    a("--ratio", type=float, default=None, help="alternatively, the target sparsification ratio (1/density)")
    a("--warmup-steps", type=int, default=20, help="sparsity warm-up length in steps")
    a("--warmup-start-density", type=float, default=0.05)
    a("--value-codec", default="int8", help="fp16, bf16, int8, int4, sign, fp32")
    a("--index-codec", default="auto", help="auto, varint, bitpack, rice, bitmap")
    a("--stale-age", type=int, default=0, help="age-aware damping of residuals held longer (0: off)")
    a("--stale-decay", type=float, default=1.0)
    a("--clip-norm", type=float, default=None, help="per-layer local gradient clipping norm, scaled by "
      "world_size^-1/2 (0: off; default 1.0 for dgc, off otherwise)")
    a("--no-clip-scaling", action="store_true", help="clip at --clip-norm itself, not scaled by world_size^-1/2")
    a("--no-momentum-correction", action="store_true", help="gradsa/dgc: momentum and weight decay in the "
      "optimizer after the exchange, not accumulated in the hook")
    a("--no-momentum-masking", action="store_true", help="gradsa/dgc: keep the momentum of sent elements")
    a("--lr-warmup-steps", type=int, default=None, help="linear learning-rate warm-up (0: off; default: "
      "--warmup-steps for dgc, 0 otherwise)")
    a("--powersgd-rank", type=int, default=4)
    a("--epochs", type=int, default=3)
    a("--max-steps", type=int, default=0, help="stop after this many steps (0: no limit)")
    a("--batch", dest="batch_size", type=int, default=32, metavar="BATCH", help="per rank")
    alias(p, "--batch-size", "--batch")
    a("--lr", type=float, default=0.05)
    a("--momentum", type=float, default=0.9)
    a("--weight-decay", type=float, default=5e-4)
    a("--lr-schedule", choices=("cosine", "const"), default="cosine")
    a("--seed", type=int, default=0)
    a("--out", default="results/train", help="directory for metrics.csv, summary.json, checkpoints")
    a("--resume", action="store_true", help="continue from the checkpoints in --out")
    a("--force", action="store_true", help="start a new run in an --out that holds one (its metrics, "
      "summary and checkpoints are overwritten)")
    a("--checkpoint-every", type=int, default=0, metavar="K",
      help="also checkpoint every K steps (0: at each epoch's end only)")
    a("--timeout", type=float, default=120.0, help="collective timeout in seconds (dead-rank bound)")
    a("--device", default="auto", choices=("auto", "cpu", "cuda"))
    a("--threads", type=int, default=1, help="torch threads per rank")
    a("--bucket-cap-mb", type=float, default=25.0)
    a("--precision", default="fp32", choices=("fp32", "amp-fp16", "amp-bf16"),
      help="fp32, or mixed precision with torch.autocast (amp-fp16 with torch.amp.GradScaler's "
      "loss scaling; amp-bf16 without)")
    a("--manager", default="none", help=f"memory manager wrapping the step: {', '.join(managers.MANAGERS)}")
    a("--no-progress", action="store_true", help="no tqdm bar")
    return show_defaults(p)


def parse(argv=None, prog: str = "python -m pimrt.train") -> argparse.Namespace:
    args = build_parser(prog).parse_args(argv)
    validate(args)
    if args.lr_warmup_steps is None:    # DGC's recipe warms the learning rate up with the density
        args.lr_warmup_steps = args.warmup_steps if registry.get(args.compressor).lr_warmup else 0
    return args


def momentum_in_hook(args) -> bool:
    """Whether the hook applies momentum and weight decay (momentum correction): gradsa and dgc
    unless --no-momentum-correction; the optimizer then has neither."""
    return registry.get(args.compressor).momentum_in_hook and not args.no_momentum_correction


def compressor_options(args) -> registry.CompressorOptions:
    plain = args.no_momentum_correction
    return registry.CompressorOptions(
        density=args.density, ratio=args.ratio, warmup_steps=args.warmup_steps,
        warmup_start_density=args.warmup_start_density, momentum=0.0 if plain else args.momentum,
        weight_decay=0.0 if plain else args.weight_decay, clip_norm=args.clip_norm,
        clip_scale=not args.no_clip_scaling, masking=not args.no_momentum_masking, value_codec=args.value_codec,
        index_codec=args.index_codec, stale_age=args.stale_age, stale_decay=args.stale_decay,
        powersgd_rank=args.powersgd_rank, seed=args.seed)


def validate(args) -> None:
    registry.get(args.compressor)
    compressor_options(args).validate()
    managers.get(args.manager)
    if args.precision == "amp-fp16" and args.manager == "laysa":
        raise GradSAError("--manager laysa with --precision amp-fp16: LaySA applies each layer's "
                          "update during backward, before the loss scaler has checked every "
                          "gradient for inf/NaN; use amp-bf16 (no loss scaling) or --manager "
                          "layrub / none")
    if args.dataset not in data.DATASETS:
        raise GradSAError(f"unknown dataset {args.dataset!r}; valid: {', '.join(data.DATASETS)}")
    for name in ("epochs", "batch_size", "image_size", "channels", "threads"):
        if getattr(args, name) < 1:
            raise GradSAError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.lr_warmup_steps is not None and args.lr_warmup_steps < 0:
        raise GradSAError(f"--lr-warmup-steps must be >= 0, got {args.lr_warmup_steps}")
    if args.checkpoint_every < 0:
        raise GradSAError(f"--checkpoint-every must be >= 0 steps, got {args.checkpoint_every}")
    if args.lr <= 0:
        raise GradSAError(f"--lr must be > 0, got {args.lr}")
    if args.timeout <= 0:
        raise GradSAError(f"--timeout must be > 0, got {args.timeout}")
    check_out(args)


#: options that say how a run is started, not what it computes: left out of summary.json's args
RUN_ONLY = ("resume", "force", "no_progress")


def recorded(args) -> dict:
    """The options summary.json records (and `pimrt bench gradsa --reuse` compares)."""
    return {k: v for k, v in vars(args).items() if k not in RUN_ONLY}


#: the files of a run in --out (pimrt/train/loop.py writes them)
RUN_FILES = ("metrics.csv", "summary.json", "checkpoint-rank*.pt")


def check_out(args) -> None:
    """--out must be a folder (or not exist yet); one that holds a run is refused unless the run
    goes on (--resume) or starts over (--force): nothing of an earlier run is overwritten by
    mistake. Every rank checks before the process group forms, so before rank 0 writes."""
    out = Path(args.out)
    if args.resume and args.force:
        raise GradSAError("--resume and --force: give one (--resume continues the run in --out, "
                          "--force starts a new one over it)")
    if out.exists() and not out.is_dir():
        raise GradSAError(f"--out {out}: is not a folder")
    if args.resume or args.force or not out.is_dir():
        return
    held = sorted({f.name for pattern in RUN_FILES for f in out.glob(pattern)})
    if held:
        raise GradSAError(f"--out {out} holds a run ({', '.join(held)}): give --resume to continue "
                          f"it, --force to start over in it, or another --out")
