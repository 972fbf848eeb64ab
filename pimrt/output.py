"""Safe output for the commands that write results (`pimrt run`, `pimrt compare`, `memsim`).

- check_out_dir(path): the --out folder is creatable and writable and not a file, checked
  before any work (one clear line otherwise);
- lock_out_dir(path): a lock file in it, so two runs never write into one folder at once (a
  second run is refused naming the first one's pid; a lock left by a run that died is taken
  over); released when the process exits;
- atomic_write_text / atomic_open / atomic_savefig: each result file is written to a
  temporary name beside it and renamed over the old one, so a failure (a full disk, Ctrl-C)
  leaves the previous file or none, never half of one; a write error is one line naming the
  file (OutputError);
- writing(folder) / incomplete_folders(root): a marker in a run folder while its files are
  written, so an interrupted comparison can name the folders it left half written.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import pathlib
import tempfile

from pimrt.errors import PimrtError

LOCK_NAME = ".pimrt.lock"
MARKER_NAME = ".incomplete"


class OutputError(PimrtError):
    """A result cannot be written where it was asked to go (names the path and why)."""


def _why(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def check_out_dir(path, what: str = "--out", create: bool = True) -> pathlib.Path:
    """Create the folder if needed and make sure files can be written in it. create=False:
    only check (no side effect) that it is a writable folder or could be created."""
    path = pathlib.Path(path)
    if path.exists() and not path.is_dir():
        kind = "a file" if path.is_file() else "not a folder"
        raise OutputError(f"{what} {path}: is {kind}; give a folder for the results")
    if not create:
        probe = path.absolute()
        while not probe.exists():
            probe = probe.parent
        if not probe.is_dir():
            raise OutputError(f"{what} {path}: cannot create the folder: {probe} is a file")
        if not os.access(probe, os.W_OK | os.X_OK):
            raise OutputError(f"{what} {path}: cannot write in {probe} (permission denied)")
        if probe == path.absolute():
            check_out_dir(path, what)  # exists: write a probe file
        return path
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"{what} {path}: cannot create the folder: {_why(exc)}") from None
    try:
        fd, probe = tempfile.mkstemp(prefix=".pimrt-probe-", dir=path)
        try:
            os.write(fd, b"x")
        finally:
            os.close(fd)
            os.unlink(probe)
    except OSError as exc:
        raise OutputError(f"{what} {path}: cannot write there: {_why(exc)}") from None
    return path


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class OutputLock:
    """The lock file of an --out folder, held by this process until release()."""

    def __init__(self, path: pathlib.Path):
        self.path = path
        self.held = False

    def release(self) -> None:
        if not self.held:
            return
        self.held = False
        with contextlib.suppress(OSError):
            if self.path.read_text().strip() == str(os.getpid()):
                self.path.unlink()


def lock_out_dir(path, what: str = "--out") -> OutputLock:
    """Take the folder's lock (check_out_dir first). Refused while another live process holds
    it; released at exit (or by release())."""
    path = pathlib.Path(path)
    lock = OutputLock(path / LOCK_NAME)
    for _ in range(2):
        try:
            fd = os.open(lock.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                owner = int(lock.path.read_text().strip() or 0)
            except (OSError, ValueError):
                owner = 0
            if owner and owner != os.getpid() and _alive(owner):
                raise OutputError(f"{what} {path}: in use by a running pimrt (pid {owner}; "
                                  f"lock file {lock.path}); give another folder or wait for "
                                  f"it") from None
            with contextlib.suppress(FileNotFoundError):  # left by a run that died
                lock.path.unlink()
            continue
        except OSError as exc:
            raise OutputError(f"{what} {path}: cannot create the lock file: {_why(exc)}") \
                from None
        with os.fdopen(fd, "w") as f:
            f.write(f"{os.getpid()}\n")
        lock.held = True
        atexit.register(lock.release)
        return lock
    raise OutputError(f"{what} {path}: cannot take the lock file {lock.path}")


@contextlib.contextmanager
def atomic_open(path, mode: str = "w", **kwargs):
    """open() for writing a whole file: written to a temporary name beside it, renamed over
    `path` when the block ends without an error; removed otherwise."""
    path = pathlib.Path(path)
    if "w" not in mode:
        raise ValueError("atomic_open writes whole files (mode 'w' or 'wb')")
    if path.is_symlink():                  # replace what it points to, not the link
        path = path.resolve()
    if path.exists() and not path.is_file():
        # a device or a pipe (/dev/null, /dev/full, a fifo): written in place, never replaced
        try:
            with open(path, mode, **kwargs) as f:
                yield f
        except OSError as exc:
            raise OutputError(f"{path}: cannot write: {_why(exc)}") from None
        return
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise OutputError(f"{path}: cannot write: {_why(exc)}") from None
    ok = False
    try:
        try:
            with os.fdopen(fd, mode, **kwargs) as f:
                yield f
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
            ok = True
        except OSError as exc:
            raise OutputError(f"{path}: cannot write: {_why(exc)}") from None
    finally:
        if not ok:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def atomic_write_text(path, text: str) -> None:
    with atomic_open(path, "w") as f:
        f.write(text)


def atomic_savefig(fig, path, **kwargs) -> None:
    """matplotlib's savefig through atomic_open (the format from path's suffix)."""
    path = pathlib.Path(path)
    fmt = kwargs.pop("format", path.suffix.lstrip(".") or None)
    with atomic_open(path, "wb") as f:
        fig.savefig(f, format=fmt, **kwargs)


@contextlib.contextmanager
def writing(folder):
    """A marker file in `folder` while its results are written; left in place if the block
    does not finish (incomplete_folders finds it)."""
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    marker = folder / MARKER_NAME
    try:
        marker.write_text(f"{os.getpid()}\n")
    except OSError as exc:
        raise OutputError(f"{folder}: cannot write: {_why(exc)}") from None
    yield folder
    with contextlib.suppress(OSError):
        marker.unlink()


def incomplete_folders(root) -> list[pathlib.Path]:
    """Folders under root whose results were being written when their run stopped."""
    root = pathlib.Path(root)
    if not root.is_dir():
        return []
    return sorted(p.parent for p in root.rglob(MARKER_NAME))


def check_out_file(path, what: str) -> pathlib.Path:
    """A result file's path: not a folder, in a folder that exists and can be written."""
    path = pathlib.Path(path)
    if path.is_dir():
        raise OutputError(f"{what} {path}: is a folder; give a file name")
    parent = path.parent if str(path.parent) else pathlib.Path(".")
    if not parent.is_dir():
        raise OutputError(f"{what} {path}: no folder {parent}")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise OutputError(f"{what} {path}: cannot write there (permission denied)")
    return path
