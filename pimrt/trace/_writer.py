"""What every trace format's writer shares: its file, the layer names, the count of records
written, and closing (also as a context manager). A format's writer sets `mode` / `encoding`,
writes its header in `start()` and its records in `write()`."""
from __future__ import annotations

import pathlib
from typing import Iterable

import numpy as np


class TraceWriter:
    mode = "w"            # "wb" for a binary format
    encoding = "ascii"

    def __init__(self, path, layer_names: Iterable[str] | None = None):
        self.path = pathlib.Path(path)
        self.layer_names = list(layer_names or [])
        self._f = open(self.path, self.mode, encoding=None if "b" in self.mode else self.encoding)
        self.count = 0
        self.start()

    def start(self) -> None:
        """Write the format's header (none by default)."""

    def add_layer(self, name: str) -> int:
        """The id of layer `name` (added at the end if new)."""
        if name not in self.layer_names:
            self.layer_names.append(name)
        return self.layer_names.index(name)

    def write(self, records: np.ndarray) -> None:
        raise NotImplementedError

    def close(self) -> None:
        if not self._f.closed:
            self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
