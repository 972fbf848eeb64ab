"""`pimrt sweep DIR --plot X --y Y --by Z`: a column of results.csv (a speedup, the step time,
energy once summary.json has it: any number of a point's summary) against an axis, a line per
value of another axis. Points that differ in other axes too are averaged, and the title says
over which; --where AXIS=VALUE keeps only some points (one axis repeated: any of its values;
different axes: all of them)."""
from __future__ import annotations

import difflib
import pathlib
import re

from pimrt.errors import ConfigError


def plot(root, x: str, y: str, by: str | None, where: list[str], png=None):
    """-> (the PNG, the axes averaged over)."""
    from pimrt.sweep.store import read_rows
    root = pathlib.Path(root)
    rows = [r for r in read_rows(root) if r.get("status") == "done"]
    if not rows:
        raise ConfigError(f"{root}: no finished points to plot (results.csv)")
    columns = list(rows[0])
    axes = _axes(root, columns)
    for name, what in ((x, "--plot"), (y, "--y"), (by, "--by")):
        if name is not None and name not in columns:
            hint = difflib.get_close_matches(name, columns, n=1)
            raise ConfigError(f"{what} {name!r}: not a column of {root / 'results.csv'}"
                              + (f"; did you mean {hint[0]!r}?" if hint else "")
                              + f" (axes: {', '.join(axes) or 'none'})")
    rows = select(rows, where, root, axes)
    if not all(isinstance(r[y], (int, float)) and not isinstance(r[y], bool) for r in rows):
        bad = next(r[y] for r in rows if not isinstance(r[y], (int, float)))
        raise ConfigError(f"--y {y}: not a number in every point (e.g. {bad!r})")
    series: dict = {}
    for r in rows:
        series.setdefault(r[by] if by else y, {}).setdefault(r[x], []).append(r[y])
    xs = list(dict.fromkeys(r[x] for r in rows))
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in xs)
    if numeric:
        xs.sort()
    cells: dict = {}                     # (x, by) -> the rows averaged into one mark
    for r in rows:
        cells.setdefault((str(r[x]), str(r[by]) if by else ""), []).append(r)
    others = [a for a in axes if a not in (x, by)
              and any(len({str(r[a]) for r in c}) > 1 for c in cells.values())]
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from pimrt.output import atomic_savefig
    fig, ax = plt.subplots(figsize=(8.5 if by else 7, 4.2))
    width = 0.8 / len(series)
    for k, (label, values) in enumerate(series.items()):
        pts = [(v, sum(values[v]) / len(values[v])) for v in xs if v in values]
        name = f"{by} = {label}" if by else y
        if numeric:                      # a line over a numeric axis
            ax.plot([v for v, _ in pts], [m for _, m in pts], marker="o", label=name)
        else:                            # bars side by side over named values
            ax.bar([xs.index(v) - 0.4 + width * (k + 0.5) for v, _ in pts],
                   [m for _, m in pts], width, label=name)
    if not numeric:
        ax.set_xticks(range(len(xs)), [str(v) for v in xs], rotation=20, ha="right")
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.grid(alpha=0.3)
    if by:
        # beside the axes, not over the bars or lines
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    title = f"{y} against {x}" + (f" by {by}" if by else "")
    if others:
        title += f"\n(mean over {', '.join(others)})"
    if where:
        title += "\n" + " and ".join(f"{k} = {' or '.join(v)}" for k, v in _wanted(where).items())
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    if png is None:
        png = root / "plots" / (_slug(f"{y}_vs_{x}" + (f"_by_{by}" if by else "")
                                      + "".join(f"_{w}" for w in where)) + ".png")
    png = pathlib.Path(png)
    png.parent.mkdir(parents=True, exist_ok=True)
    atomic_savefig(fig, png, dpi=110)
    plt.close(fig)
    return png, others


def select(rows: list[dict], where: list[str], root, axes: list[str]) -> list[dict]:
    """The rows --where AXIS=VALUE keeps: an axis named more than once keeps any of its values
    (OR), different axes must all hold (AND)."""
    for cond in where:
        key, eq, _ = cond.partition("=")
        if not eq or not rows or key not in rows[0]:
            raise ConfigError(f"--where {cond!r}: expected AXIS=VALUE with an axis of "
                              f"{pathlib.Path(root) / 'results.csv'} ({', '.join(axes)})")
    done: list = []
    for key, values in _wanted(where).items():
        rows = [r for r in rows if str(r[key]) in values]
        if not rows:
            said = " ".join(f"--where {key}={v}" for v in values)
            raise ConfigError(f"{said}: no finished point has {key} = {' or '.join(values)}"
                              + (f" among those with {' and '.join(done)}" if done else ""))
        done.append(f"{key} = {' or '.join(values)}")
    return rows


def _wanted(where: list[str]) -> dict:
    """{axis: [values]} of --where AXIS=VALUE, in the order given."""
    wanted: dict = {}
    for cond in where:
        key, _, value = cond.partition("=")
        wanted.setdefault(key, []).append(value)
    return wanted


def _axes(root: pathlib.Path, columns: list[str]) -> list[str]:
    import json
    try:
        return [a for a in json.loads((root / "sweep.json").read_text())["axes"]
                if a in columns]
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return []


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", text)
