"""Every error a sweep's points would hit, found before any work (as `pimrt run` checks before
it times): the policy, the model and its capture, the memory and host parts with the point's
part keys, groups and slices that do not divide, tensors that do not fit, a host-times file
that does not cover the run. Each error names the point by its axes."""
from __future__ import annotations

import sys

from pimrt.errors import ConfigError, PimrtError


def check_points(spec, quiet: bool = False) -> list[str]:
    """Raise the first error a point would hit, naming the point; return the notes of the
    layers the PIM has no program for, one line per captured model (as pimrt run and compare
    print them)."""
    from tqdm import tqdm
    from pimrt.memctl import POLICIES
    from pimrt.runtime import session
    from pimrt.runtime.exchange import ExchangeConfig
    from pimrt.sweep.worker import system_of
    from pimrt.runtime.schedule import host_fallback_note
    graphs, systems, checked, notes = {}, {}, set(), []
    for p in tqdm(spec.points, desc="checking points", unit="point", leave=False,
                  file=sys.stderr, disable=quiet or None):
        o = p.options
        try:
            if o["policy"] not in POLICIES:
                raise ConfigError(f"unknown policy {o['policy']!r}; choose one of "
                                 f"{', '.join(POLICIES)}")
            ExchangeConfig(o["update"], o["world"], o["density"], o["link_gbps"])
            from pimrt.runtime.functional_amp import check_options
            check_options(o["functional"], o["update"], o["precision"])
            gk = (o["model"], o["batch"], o["input"], o["allow_unsupported"], o["precision"])
            if gk not in graphs:
                graphs[gk] = session.captured(*gk)
                note = host_fallback_note(graphs[gk])
                if note and f"{o['model']}: {note}" not in notes:
                    notes.append(f"{o['model']}: {note}")
            graph = graphs[gk]
            from pimrt.sweep.spec import part_keys
            sk = repr((o["part"], o["host_part"], part_keys(o)))
            if sk not in systems:
                systems[sk] = system_of(o)
            part, host = systems[sk]
            slices = session.slices_for(o["batch"], o["slices"])
            pk = (gk, sk, o["groups"], slices, o["update"])
            if pk not in checked:          # the same checks for every policy of a system
                session.preflight(graph, part, o["groups"], o["update"], host, slices)
                checked.add(pk)
            if o["host_times"] != "model":
                session.host_times(graph, o["host_times"], o["groups"], part, host,
                                   o["update"], True, slices=slices)
        except PimrtError as exc:
            raise ConfigError(f"{spec.path}: point {p.index + 1} ({_show(p.values)}): {exc}") \
                from None
    return notes


def _show(values: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items()) or "no axes"
