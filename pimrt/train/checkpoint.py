"""Per-rank checkpoints: model, optimizer, compressor state (GradSA residual and momentum per
parameter name), counters and position. Each rank writes its own file because residuals are
local to a rank; a resume checks every piece against the run and names any mismatch."""
from __future__ import annotations

import os
from pathlib import Path

import torch

from pimrt.gradsa.errors import GradSAError

FORMAT = 1


def path_for(out: Path, rank: int) -> Path:
    return Path(out) / f"checkpoint-rank{rank}.pt"


def save(path: Path, *, model, optimizer, compressor: str, comp_state, epoch: int, step: int,
         world: int, extra: dict | None = None) -> None:
    blob = {"format": FORMAT, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
            "compressor": compressor, "compressor_state": comp_state.state_dict(), "epoch": epoch,
            "step": step, "world_size": world, "rng": torch.get_rng_state(), "extra": extra or {}}
    tmp = Path(str(path) + ".tmp")
    torch.save(blob, tmp)
    os.replace(tmp, path)


def check_model(saved: dict, model) -> None:
    """Raise GradSAError naming the first parameter/buffer whose name or shape differs."""
    mine = model.state_dict()
    for name, t in saved.items():
        if name in mine and tuple(t.shape) != tuple(mine[name].shape):
            raise GradSAError(f"checkpoint does not match the model: {name!r} has shape {tuple(t.shape)} "
                              f"in the checkpoint and {tuple(mine[name].shape)} in the model")
    for name, t in saved.items():
        if name not in mine:
            raise GradSAError(f"checkpoint does not match the model: {name!r} (shape {tuple(t.shape)}) "
                              f"is in the checkpoint but not in the model")
    for name, t in mine.items():
        if name not in saved:
            raise GradSAError(f"checkpoint does not match the model: {name!r} (shape {tuple(t.shape)}) "
                              f"is in the model but not in the checkpoint")


def load(path: Path, *, model, optimizer, compressor: str, comp_state, world: int, device) -> dict:
    """Restore everything in place; returns {'epoch', 'step', 'extra'}."""
    path = Path(path)
    if not path.is_file():
        raise GradSAError(f"cannot resume: no checkpoint {path}")
    try:
        blob = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:
        raise GradSAError(f"cannot resume: {path} is not a readable checkpoint: {exc}") from exc
    if blob.get("format") != FORMAT:
        raise GradSAError(f"cannot resume: {path} has checkpoint format {blob.get('format')}, expected {FORMAT}")
    if blob["compressor"] != compressor:
        raise GradSAError(f"cannot resume: checkpoint was written with compressor {blob['compressor']!r}, "
                          f"this run uses {compressor!r}")
    if blob["world_size"] != world:
        raise GradSAError(f"cannot resume: checkpoint was written by {blob['world_size']} ranks, this run has "
                          f"{world} (residuals are per rank)")
    check_model(blob["model"], model)
    model.load_state_dict(blob["model"])
    optimizer.load_state_dict(blob["optimizer"])
    comp_state.load_state_dict(blob["compressor_state"], device=device)
    torch.set_rng_state(blob["rng"])
    return {"epoch": blob["epoch"], "step": blob["step"], "extra": blob.get("extra", {})}
