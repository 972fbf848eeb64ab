"""Per-rank checkpoints: model, optimizer, compressor state (GradSA residual and momentum per
parameter name), counters, RNG and position (epoch, batches done in it). Each rank writes its
own file because residuals are local to a rank.

Safe to load: a checkpoint holds only tensors and plain types (dicts, lists, str, int, float,
bool, None) and is read with `torch.load(weights_only=True)`, so a file from elsewhere cannot
run code. Safe to write: the blob goes to `NAME.tmp`, is flushed and fsynced, then renamed
over NAME (and the directory fsynced), so a crash mid-write leaves the last good checkpoint.
A resume checks every piece against the run and names the file and any mismatch."""
from __future__ import annotations

import os
import re
import zipfile
from pathlib import Path

import torch

from pimrt.gradsa.errors import GradSAError

FORMAT = 2


def path_for(out: Path, rank: int) -> Path:
    return Path(out) / f"checkpoint-rank{rank}.pt"


def write_atomic(blob: dict, path: Path) -> None:
    """torch.save to PATH.tmp, flush, fsync, rename over PATH, fsync the directory."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        torch.save(blob, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    try:
        fd = os.open(path.parent, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save(path: Path, *, model, optimizer, compressor: str, comp_state, epoch: int, step: int,
         world: int, batch: int = 0, epoch_done: bool = True, model_name: str = "",
         extra: dict | None = None) -> None:
    """`batch`: batches of `epoch` already trained (0 with epoch_done: the epoch is finished)."""
    blob = {"format": FORMAT, "model_name": model_name, "model": model.state_dict(),
            "optimizer": optimizer.state_dict(), "compressor": compressor,
            "compressor_state": comp_state.state_dict(), "epoch": epoch, "step": step, "batch": batch,
            "epoch_done": epoch_done, "world_size": world, "rng": torch.get_rng_state(), "extra": extra or {}}
    write_atomic(blob, path)


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


#: torch's words for a pickled object weights_only refuses: "Unsupported global: GLOBAL
#: argparse.Namespace was not an allowed global" and (a blocked module, torch 2.13) "Trying to
#: load unsupported GLOBAL posix.system whose module posix is blocked"
REFUSED_GLOBAL = re.compile(r"[Uu]nsupported (?:global: )?(GLOBAL [\w.]+)")


def read(path: Path) -> dict:
    """The blob of a checkpoint file, read with weights_only=True; GradSAError naming the file:
    the pickled object it refuses, or that the file is truncated or corrupt."""
    path = Path(path)
    if not path.is_file():
        raise GradSAError(f"cannot resume: no checkpoint {path}")
    if zipfile.is_zipfile(path):         # torch.load checks no checksum: a flipped bit loads
        broken = _broken_archive(path)
        if broken:
            raise GradSAError(f"cannot resume: {path} is truncated or corrupt: {broken}")
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        text = str(exc)
        found = REFUSED_GLOBAL.search(text)
        if found:
            raise GradSAError(f"cannot resume: {path} is not loadable with torch.load(weights_only=True): it "
                              f"holds {found.group(1)} (only tensors and plain types are trusted)") from None
        broken = _broken_archive(path)
        if broken:
            raise GradSAError(f"cannot resume: {path} is truncated or corrupt: {broken}") from None
        detail = re.search(r"WeightsUnpickler error: \s*([^\n]+)", text)
        first = detail.group(1) if detail else (text.strip().splitlines() or [type(exc).__name__])[0]
        raise GradSAError(f"cannot resume: {path} is not a readable checkpoint: {first}") from None
    if not isinstance(blob, dict) or blob.get("format") != FORMAT:
        got = blob.get("format") if isinstance(blob, dict) else type(blob).__name__
        raise GradSAError(f"cannot resume: {path} has checkpoint format {got}, expected {FORMAT}")
    return blob


def _broken_archive(path: Path) -> str | None:
    """What is wrong with a file torch.save wrote (a zip archive) that torch.load could not read,
    in words; None when the archive is whole (its fault is elsewhere)."""
    size = path.stat().st_size
    if size == 0:
        return "it is empty"
    if not zipfile.is_zipfile(path):
        return f"{size} bytes, without the end of a torch.save archive (its zip directory)"
    try:
        with zipfile.ZipFile(path) as z:
            bad = z.testzip()
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
        return f"its archive cannot be read ({exc})"
    return f"{bad} in its archive fails its checksum" if bad else None


def load(path: Path, *, model, optimizer, compressor: str, comp_state, world: int, device,
         model_name: str = "") -> dict:
    """Restore model, optimizer and compressor in place; returns {'epoch', 'step', 'batch',
    'epoch_done', 'rng', 'extra'} (the caller restores the RNG where the saved run stood)."""
    blob = read(path)
    if model_name and blob.get("model_name") and blob["model_name"] != model_name:
        raise GradSAError(f"cannot resume from {path}: it was written for model {blob['model_name']!r}, "
                          f"this run trains {model_name!r}")
    if blob["compressor"] != compressor:
        raise GradSAError(f"cannot resume from {path}: checkpoint was written with compressor "
                          f"{blob['compressor']!r}, this run uses {compressor!r}")
    if blob["world_size"] != world:
        raise GradSAError(f"cannot resume from {path}: checkpoint was written by {blob['world_size']} ranks, "
                          f"this run has {world} (residuals are per rank)")
    try:
        check_model(blob["model"], model)
    except GradSAError as exc:
        raise GradSAError(f"cannot resume from {path}: {exc}") from None
    model.load_state_dict(blob["model"])
    optimizer.load_state_dict(blob["optimizer"])
    comp_state.load_state_dict(blob["compressor_state"], device=device)
    return {k: blob[k] for k in ("epoch", "step", "batch", "epoch_done", "rng", "extra")}
