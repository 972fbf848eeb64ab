"""Reading a TOML file (a part, a host part, a sweep spec) with one clear error for each way
it can fail: not TOML, not readable, not text."""
from __future__ import annotations

import pathlib
import tomllib

from pimrt.errors import ConfigError


def read_toml(path) -> dict:
    path = pathlib.Path(path)
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a text file (TOML is UTF-8 text)") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, not a TOML file") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
