"""What the analysis scripts (bound_gap.py, gpu_only_split.py) do with their figures: print
them as JSON and, given a path, also write them there whole (pimrt.output.atomic_write_text:
an interrupted write leaves the old file)."""
from __future__ import annotations

import json
import pathlib


def emit(figures: dict, path: str | None, indent: int = 1) -> None:
    text = json.dumps(figures, indent=indent)
    print(text)
    if path:
        from pimrt.output import atomic_write_text
        atomic_write_text(pathlib.Path(path), text + "\n")
