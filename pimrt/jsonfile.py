"""Reading a JSON file a user gives (a host-times file, a trace's layer names) with one clear
line for each way it can fail: not JSON (line and column), not text, not readable, nested
deeper than the parser follows, a number longer than Python converts."""
from __future__ import annotations

import json
import pathlib
from typing import Any, Callable

from pimrt.errors import ConfigError
from pimrt.tomlfile import too_deep, too_long


def read_json(path, error: Callable[[str], Exception] = ConfigError) -> Any:
    """The file's JSON value; error(message) is raised (from None) when it cannot be had, the
    message starting with the file (and line)."""
    path = pathlib.Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        msg = f"{path}:{exc.lineno}:{exc.colno}: not valid JSON ({exc.msg})"
    except UnicodeDecodeError:
        msg = f"{path}: not a text file (JSON is UTF-8 text)"
    except IsADirectoryError:
        msg = f"{path}: is a directory, not a JSON file"
    except OSError as exc:
        msg = f"{path}: cannot read: {exc.strerror or exc}"
    except RecursionError:
        msg = too_deep(path, "JSON", "arrays or objects")
    except ValueError as exc:   # (after its subclasses above) Python's limit on int digits
        msg = too_long(path, exc)
    raise error(msg) from None
