"""What the analysis scripts (bound_gap.py, gpu_only_split.py) share: their figures printed as
JSON and, given a path, also written there whole (pimrt.output.atomic_write_text: an
interrupted write leaves the old file); and a bad argument (a model, precision or part pimrt
does not know, an output folder it cannot write) told in one line, as `pimrt` tells it."""
from __future__ import annotations

import json
import pathlib
import sys


def emit(figures: dict, path: str | None, indent: int = 1) -> None:
    text = json.dumps(figures, indent=indent)
    print(text)
    if path:
        from pimrt.output import atomic_write_text
        atomic_write_text(pathlib.Path(path), text + "\n")


def run(main, argv=None) -> int:
    """main(argv) -> exit status, a pimrt error or an unwritable output one line (exit 2)."""
    from pimrt.errors import PimrtError
    name = pathlib.Path(sys.argv[0]).name
    try:
        return main(argv)
    except (PimrtError, OSError) as exc:
        print(f"{name}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{name}: interrupted", file=sys.stderr)
        return 130
