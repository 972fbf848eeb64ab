"""A sweep's results folder:

    DIR/sweep.json          the spec it holds (its hash, text, axes and points) and the
                            simulator code it was made with (pimrt/sweep/code.py)
    DIR/points/ID/          each finished point's folder, as `pimrt run --out` writes it
                            (summary.json last: a folder with it is finished)
    DIR/points/ID/error.json  a point that failed: its error, the traceback, the worker
    DIR/results.csv         a row per point of the spec: its axes, status and every scalar of
                            its summary.json (nested keys joined by dots); results.parquet too
                            when pyarrow is installed
    DIR/tasks.csv           a row per task run (baselines and points): kind, key, status,
                            worker, wall time; appended as they come back
    DIR/.pimrt-share        a token the workers look for: one that finds it shares this
                            folder and writes a point's step trace straight into it
    DIR/points/ID/.NAME.XXXX.partial  a step trace being written (renamed to NAME when the
                            point is recorded; left by a point that was killed, removed by
                            the next run)

Each point is written the moment it finishes, so a sweep that stops keeps every finished
point and a re-run skips them. A folder that holds another spec's results is refused unless
told (--force), and one made with other simulator code unless told (--allow-code-change)."""
from __future__ import annotations

import csv
import datetime
import io
import json
import os
import pathlib
import secrets
import tempfile

from pimrt.errors import ConfigError
from pimrt.output import (OutputError, atomic_open, atomic_write_text, check_out_dir,
                          lock_out_dir, writing)

# summary fields keyed by layer: a column per layer would not be a table of points
PER_LAYER = {"deferred_weight_gradients", "sliced_layers", "plots"}
LEAD = ("index", "id", "status")
TASK_COLUMNS = ("finished", "kind", "key", "status", "worker", "wall_s", "error")
SHARE_TOKEN = ".pimrt-share"
PARTIAL = ".partial"          # pimrt.sweep.worker.PARTIAL: a step trace being written


class Store:
    def __init__(self, root: pathlib.Path, spec, code: dict | None = None,
                 earlier: list | None = None):
        self.root, self.spec = root, spec
        self.code = code or {}                  # this run's code fingerprint (code.py)
        self.earlier = earlier or []            # fingerprints of the folder's earlier code
        self.rows: dict[str, dict] = {}         # point id -> its row in results.csv
        self.token = secrets.token_hex(16)      # DIR/.pimrt-share: who shares this folder

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(cls, root, spec, force: bool = False, code: dict | None = None,
             allow_code_change: bool = False) -> "Store":
        """Check (before any work) that `root` can hold this spec's results: a new or empty
        folder, or one written by the same spec (another spec's only with force) with the
        same simulator code `code` (other code's only with allow_code_change)."""
        root = pathlib.Path(root)
        check_out_dir(root, create=False)
        held = root / "sweep.json"
        earlier: list = []
        if held.exists():
            try:
                old = json.loads(held.read_text())
                old_hash, old_name = old["spec_hash"], old.get("name", "?")
            except (OSError, ValueError, KeyError, TypeError, RecursionError):
                old, old_hash, old_name = {}, None, "unreadable"
            if old_hash != spec.hash and not force:
                raise ConfigError(
                    f"--out {root}: holds the results of another sweep ({old_name}, spec "
                    f"{old_hash}; this one is {spec.hash}); give another folder, or --force "
                    f"to run this spec there (finished points it shares are kept)")
            old_code = old.get("code") if isinstance(old.get("code"), dict) else {}
            earlier = [c for c in old.get("earlier_code", []) if isinstance(c, str)]
            if code is not None and old_code.get("fingerprint") != code["fingerprint"]:
                if not allow_code_change:
                    from pimrt.sweep.code import changes
                    what = (f"simulator code {old_code['fingerprint']}; this pimrt is "
                            f"{code['fingerprint']}: {changes(old_code, code)}"
                            if old_code.get("fingerprint") else
                            "a pimrt that did not record its simulator code")
                    raise ConfigError(
                        f"--out {root}: its points were made with {what}; sweep into a new "
                        f"folder, or --allow-code-change to add points made with this code "
                        f"to it (the finished ones are kept; results.csv's code column says "
                        f"which code made each)")
                earlier.append(old_code.get("fingerprint") or "unrecorded")
        elif root.is_dir() and any(p.name != ".pimrt.lock" for p in root.iterdir()) \
                and not force:
            raise ConfigError(f"--out {root}: not empty and not a sweep's results folder "
                              f"(no sweep.json); give another folder, or --force")
        return cls(root, spec, code, earlier)

    def start(self) -> None:
        """Create and lock the folder, record the spec, load the finished points."""
        check_out_dir(self.root)
        lock_out_dir(self.root)
        s = self.spec
        from pimrt import __version__
        atomic_write_text(self.root / "sweep.json", json.dumps({
            "name": s.name, "spec_hash": s.hash, "spec_file": str(s.path),
            "pimrt": __version__, "code": self.code, "earlier_code": self.earlier,
            "spec": s.path.read_text(), "axes": s.axes, "fixed": s.fixed,
            "points": [{"index": p.index + 1, "id": p.id, "values": p.values,
                        "group": p.group, "gpu_group": p.gpu_group}
                       for p in s.points]}, indent=2, default=str))
        atomic_write_text(self.root / SHARE_TOKEN, self.token)
        for partial in sorted((self.root / "points").glob(f"*/.*{PARTIAL}*")):
            partial.unlink(missing_ok=True)           # a trace of a point that was killed
        for p in s.points:
            folder = self.folder(p)
            summary, error = folder / "summary.json", folder / "error.json"
            if summary.exists():
                try:
                    self.rows[p.id] = self._row(p, "done", json.loads(summary.read_text()))
                    continue
                except (ValueError, RecursionError):
                    pass                              # half written: run it again
            if error.exists():
                try:
                    e = json.loads(error.read_text())
                    self.rows[p.id] = self._row(p, "failed", {"error": e["error"]})
                except (ValueError, KeyError, TypeError, RecursionError):
                    pass
        self.write_tables()                           # this spec's points only

    def folder(self, p) -> pathlib.Path:
        return self.root / "points" / p.id

    def trace_dest(self, p) -> dict:
        """Where a point's step trace goes (pimrt.sweep.worker: written there by a worker
        that sees this folder, else sent back)."""
        return {"folder": str(self.folder(p).resolve()),
                "token_file": str((self.root / SHARE_TOKEN).resolve()), "token": self.token}

    def receive_traces(self, p, value: dict, fetch=None) -> str | None:
        """Bring a point's spooled step traces (written where this folder is not seen) into
        its folder under temporary names, read back in bounded chunks (`fetch(trace)` yields
        them; without it the spool is a file here); None, or why one could not be."""
        folder = self.folder(p)
        for t in value.get("traces", ()):
            if t["in_place"]:
                continue
            folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{t['name']}.", suffix=PARTIAL, dir=folder)
            os.fchmod(fd, 0o644)
            try:
                with os.fdopen(fd, "wb") as f:
                    got = 0
                    for chunk in (fetch or _local_chunks)(t):
                        f.write(chunk)
                        got += len(chunk)
                    if got != t["size"]:
                        raise OSError(f"{got} of its {t['size']} bytes came back")
            except Exception as exc:                  # noqa: BLE001 - the point fails
                os.unlink(tmp)
                return (f"its step trace {t['name']} could not be read back from worker "
                        f"{t.get('worker')} ({type(exc).__name__}: {exc}); --retry-failed "
                        f"runs it again")
            t.update(path=tmp, in_place=True, sent=True)
        return None

    def done(self, p) -> bool:
        return self.rows.get(p.id, {}).get("status") == "done"

    def failed(self, p) -> bool:
        return self.rows.get(p.id, {}).get("status") == "failed"

    # ------------------------------------------------------------------ recording
    def record(self, p, result: dict) -> None:
        """A point's result from a worker: its folder (or error.json), then the tables."""
        folder = self.folder(p)
        if result["ok"]:
            s = result["summary"]
            s["sweep"] = {"name": self.spec.name, "point": p.index + 1, "id": p.id,
                          "values": p.values, "worker": result.get("worker"),
                          "code": result.get("code")}
            s["plots"] = [str(folder / name) for name in s["plots"]]
            with writing(folder):
                for name, data in result["files"].items():
                    with atomic_open(folder / name, "wb") as f:
                        f.write(data)
                for t in result.get("traces", ()):   # written in place: renamed, not read
                    tmp = pathlib.Path(t["path"])
                    if tmp.parent.resolve() != folder.resolve() or "/" in t["name"]:
                        raise OutputError(f"{tmp}: a step trace outside its point's folder "
                                          f"{folder}")
                    with open(tmp, "rb") as f:
                        os.fsync(f.fileno())
                    os.replace(tmp, folder / t["name"])
                for partial in folder.glob(f".*{PARTIAL}*"):
                    partial.unlink(missing_ok=True)   # of an attempt lost before this one
                (folder / "error.json").unlink(missing_ok=True)
                atomic_write_text(folder / "summary.json",
                                  json.dumps(s, indent=2, default=str))
            self.rows[p.id] = self._row(p, "done", s)
        else:
            folder.mkdir(parents=True, exist_ok=True)
            for partial in folder.glob(f".*{PARTIAL}*"):
                partial.unlink(missing_ok=True)       # a trace of this point's, not used
            atomic_write_text(folder / "error.json", json.dumps(
                {k: result.get(k) for k in ("error", "detail", "worker")}, indent=2))
            self.rows[p.id] = self._row(p, "failed", {"error": result["error"]})
        self.write_tables()

    def log_task(self, task, result: dict) -> None:
        """A row of DIR/tasks.csv for a task that came back (or failed without running)."""
        path = self.root / "tasks.csv"
        new = not path.exists()
        with open(path, "a", newline="") as f:
            w = csv.DictWriter(f, TASK_COLUMNS)
            if new:
                w.writeheader()
            wall = result.get("wall_s")
            w.writerow({"finished": datetime.datetime.now(datetime.timezone.utc)
                        .isoformat(timespec="seconds"), "kind": task.kind, "key": task.key,
                        "status": "done" if result["ok"] else "failed",
                        "worker": result.get("worker") or "",
                        "wall_s": "" if wall is None else f"{wall:.3f}",
                        "error": "" if result["ok"] else result.get("error", "")})

    def _row(self, p, status: str, summary: dict) -> dict:
        row = {"index": p.index + 1, "id": p.id, "status": status}
        # an axis a point does not set: pimrt run's option as the point ran it; a part key
        # the point leaves to its part: blank
        row.update({k: p.values.get(k, p.options.get(k, "")) for k in self.spec.axes})
        if "sweep" in summary:
            row["worker"] = summary["sweep"].get("worker")
            row["code"] = summary["sweep"].get("code")
        for k, v in flatten({k: v for k, v in summary.items() if k != "sweep"}).items():
            row.setdefault(k, v)
        return row

    def write_tables(self) -> list[pathlib.Path]:
        rows = sorted(self.rows.values(), key=lambda r: r["index"])
        columns = list(dict.fromkeys(c for r in rows for c in r))
        buf = io.StringIO()
        w = csv.DictWriter(buf, columns, restval="")
        w.writeheader()
        w.writerows(rows)
        atomic_write_text(self.root / "results.csv", buf.getvalue())
        written = [self.root / "results.csv"]
        try:
            import pyarrow
            import pyarrow.parquet as pq
        except ImportError:
            return written
        cells = [{c: _plain(r.get(c)) for c in columns} for r in rows]
        for c in columns:                 # a column of ints and floats: floats
            if any(isinstance(r[c], float) for r in cells):
                for r in cells:
                    if isinstance(r[c], int):
                        r[c] = float(r[c])
        table = pyarrow.Table.from_pylist(cells)
        with atomic_open(self.root / "results.parquet", "wb") as f:
            pq.write_table(table, f)
        return written + [self.root / "results.parquet"]


def _local_chunks(t: dict):
    """A trace spooled on this machine, in bounded chunks (then removed)."""
    from pimrt.sweep.worker import TRACE_CHUNK, read_chunk, remove_spool
    offset = 0
    while offset < t["size"]:
        chunk = read_chunk(t["path"], offset, TRACE_CHUNK)
        if not chunk:
            break
        offset += len(chunk)
        yield chunk
    remove_spool(t["path"])


def _plain(v):
    """A cell for parquet: axes mix numbers and names (a part's name or a file), so every
    value that is not a float or an int is its text."""
    if v is None or v == "" or isinstance(v, (float, int)) and not isinstance(v, bool):
        return None if v == "" else v
    return str(v)


def flatten(d: dict, prefix: str = "") -> dict:
    """The scalars of a summary, nested keys joined by dots; lists and per-layer maps left
    out (they are in the point's folder)."""
    out = {}
    for k, v in d.items():
        if k in PER_LAYER:
            continue
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, f"{key}."))
        elif isinstance(v, (str, int, float, bool)) or v is None:
            out[key] = v
    return out


def read_rows(root) -> list[dict]:
    """results.csv of a results folder, values as numbers where they are numbers."""
    path = pathlib.Path(root) / "results.csv"
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{root}: no results to plot ({path}: {exc.strerror})") from None
    rows = []
    for r in csv.DictReader(io.StringIO(text)):
        rows.append({k: _number(v) for k, v in r.items()})
    return rows


def _number(v: str):
    if v in ("True", "False"):
        return v == "True"
    for kind in (int, float):
        try:
            return kind(v)
        except (TypeError, ValueError):
            pass
    return v
