"""How `pimrt memsim` replays a step trace (pimrt.trace.step): the part, policy, issue width
and window the run used, unless the command line asks for others, and a one-line note for
each way the replay differs from the run (another part, policy or code). A trace with PIM
requests is refused on a part without PIM units. docs/traces.md."""
from __future__ import annotations

from pimrt.errors import ConfigError

DEFAULTS = {"config": "hbm2", "policy": "authority", "issue_width": 4}


def settings(meta: dict | None, config: str | None, policy: str | None,
             issue_width: int | None, overrides: dict | None, window: int | None):
    """-> (part, policy, issue width, window, notes) for a replay; meta: the trace's
    (None: not a step trace, the command line or memsim's defaults)."""
    from pimrt.memctl import load_part
    notes = []
    if meta is None:
        part = load_part(config or DEFAULTS["config"], overrides or None)
        return (part, policy or DEFAULTS["policy"], issue_width or DEFAULTS["issue_width"],
                window, notes)
    ref = meta.get("part") or {}
    if config is None:
        part = load_part(ref["source"], {**ref.get("overrides", {}), **(overrides or {})})
    else:
        part = load_part(config, overrides or None)
        if meta.get("host_part"):             # the host's queue as the run's host sees it
            from pimrt.runtime.timing import with_host_buffering
            part = with_host_buffering(part, meta["host_part"])
        if part.name != ref.get("name"):
            notes.append(f"replayed on part {part.name}, not the run's {ref.get('name')}")
    if overrides:
        notes.append(f"replayed with part keys set: {', '.join(sorted(overrides))}")
    if meta.get("requests", {}).get("pim") and part.pim is None:
        raise ConfigError(f"the trace holds {meta['requests']['pim']:,} PIM requests (a "
                          f"co-execution step's); part {part.name} has no [pim] units to "
                          f"run them: replay it on a PIM part ({ref.get('source')})")
    run_policy = meta.get("policy", DEFAULTS["policy"])
    if policy is not None and policy != run_policy:
        notes.append(f"replayed under policy {policy}, not the run's {run_policy} (the schedule, its "
                     f"order and authority parameters stay the run's)")
    width = meta.get("issue_width", DEFAULTS["issue_width"])
    if issue_width is not None and issue_width != width:
        notes.append(f"replayed with issue width {issue_width}, not the run's {width}")
    if window is None:
        from pimrt.trace.step import UNLIMITED_WINDOW
        window = meta.get("window") or UNLIMITED_WINDOW
    from pimrt.sweep.code import changes, fingerprint
    here = fingerprint()
    if meta.get("code") and meta["code"] != here["fingerprint"]:
        notes.append(f"{CODE_NOTE} ({meta['code']}, here {here['fingerprint']}: "
                     f"{changes({'files': meta.get('code_files')}, here, 3)})")
    return part, policy or run_policy, issue_width or width, window, notes


CODE_NOTE = "the trace was written by other code"


def same_as_run(meta: dict | None, notes: list[str]) -> bool:
    """Whether the replay is of the run as it was (a step trace on its part, policy and
    width; other code may still give other figures, which check_line then says)."""
    return bool(meta and meta.get("run")
                and all(n.startswith(CODE_NOTE) for n in notes))


def check_line(meta: dict, stats: dict) -> str:
    """One line: the replay against the run that wrote the trace."""
    run = meta["run"]
    same = all(stats[k] == run[k] for k in ("cycles", "mode_switches", "requests"))
    what = "the same as" if same else "differs from"
    return (f"replay {what} the run ({meta.get('model', '?')} batch {meta.get('batch', '?')}, "
            f"{meta.get('step', meta.get('policy'))}): {run['cycles']:,} cycles, "
            f"{run['mode_switches']} mode switches, {run['requests']:,} requests")
