"""Reading a TOML file (a part, a host part, a sweep spec) with one clear error for each way
it can fail: not TOML, not readable, not text, nested deeper than the parser follows, a number
longer than Python converts. `too_deep` and `too_long` also serve pimrt/jsonfile.py."""
from __future__ import annotations

import copy
import pathlib
import re
import sys
import tomllib

from pimrt.errors import ConfigError


_PARSED: dict[bytes, dict] = {}    # a file's bytes -> its tables (parts are read often)


def read_toml(path) -> dict:
    path = pathlib.Path(path)
    try:
        with open(path, "rb") as f:
            data = f.read()
        if data not in _PARSED:
            if len(_PARSED) >= 64:
                _PARSED.clear()
            _PARSED[data] = tomllib.loads(data.decode("utf-8"))
        return copy.deepcopy(_PARSED[data])
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a text file (TOML is UTF-8 text)") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, not a TOML file") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    except RecursionError:
        raise ConfigError(too_deep(path, "TOML", "arrays or inline tables")) from None
    except ValueError as exc:   # (after its subclasses above) Python's limit on int digits
        raise ConfigError(too_long(path, exc)) from None


def _text(path: pathlib.Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def too_deep(path: pathlib.Path, kind: str, what: str) -> str:
    """The message for a file whose nesting ran its parser out of recursion: the line where
    its brackets (outside strings) nest deepest, and how deep."""
    depth = deepest = 0
    line = where = 1
    quote = None
    text = _text(path)
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\n":
            line += 1
        elif quote:
            if ch == "\\" and quote == '"':
                i += 1
            elif ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch in "[{":
            depth += 1
            if depth > deepest:
                deepest, where = depth, line
        elif ch in "]}":
            depth -= 1
        i += 1
    if not deepest:
        return f"{path}: {kind} nested too deep"
    return (f"{path}:{where}: {kind} nested too deep ({deepest} levels of {what}; the reader "
            f"follows a few hundred)")


def too_long(path: pathlib.Path, exc: ValueError) -> str:
    """The message for a number Python refused to convert (more digits than
    sys.get_int_max_str_digits()): its line and length; other ValueErrors as they are."""
    limit = sys.get_int_max_str_digits() if hasattr(sys, "get_int_max_str_digits") else 4300
    text = _text(path)
    m = re.search(r"\d[\d_]{%d,}" % max(limit - 1, 1), text)
    if m is None:
        return f"{path}: cannot read: {exc}"
    line = text.count("\n", 0, m.start()) + 1
    digits = sum(c.isdigit() for c in m.group())
    before = text[text.rfind("\n", 0, m.start()) + 1:m.start()]
    key = re.search(r"([\w.-]+)[\"']?\s*[=:]\s*$", before)
    what = f"{key.group(1)}: " if key else ""
    return (f"{path}:{line}: {what}a number of {digits} digits; an integer may have at most "
            f"{limit}")
