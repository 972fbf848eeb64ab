"""memsim's per-layer table (`--per-layer`, `--layers-csv`): each LAYER marker's requests
(their span in cycles, bytes, bandwidth over the span, mean latency, row hits) and the DRAM
energy of their own commands: ACT for each row miss or conflict, the read and write bursts,
at the run's energy per command (background standby and refresh are not split by layer).
docs/traces.md."""
from __future__ import annotations

COLUMNS = ("layer", "requests", "bytes", "start", "end", "bandwidth_gbs", "mean_latency",
           "row_hit_rate", "energy_uj")


def _per_command(stats: dict) -> dict:
    """pJ per command kind from the run's energy: {(side, kind): pJ}."""
    e = stats.get("energy_pj") or {}
    if not e.get("available"):
        return {}
    comp, counts = e["components"], e["counts"]

    def each(c, n):
        return comp[c] / counts[n] if counts[n] else 0.0
    return {("host", "act"): each("act", "acts"), ("host", "read"): each("read", "reads"),
            ("host", "write"): each("write", "writes"),
            ("pim", "act"): each("pim_act", "pim_acts"),
            ("pim", "read"): each("pim_read", "pim_reads"),
            ("pim", "write"): each("pim_write", "pim_writes")}


def layer_rows(stats: dict, part) -> list[dict]:
    """One row per layer of the stats (Controller.stats()["layers"])."""
    per = _per_command(stats)
    tck = stats["tCK_ns"]
    req_bytes = {who: (r["bytes"] / r["requests"] if r["requests"] else part.request_bytes)
                 for who, r in stats["requestors"].items()}
    # a PIM request is one all-bank command: a burst (and a row opened) in each bank it spans
    pim_scale = req_bytes["pim"] / part.request_bytes
    rows = []
    for L in stats["layers"]:
        by = L.get("by") or {}
        n = lat = hits = 0
        nbytes = energy = 0.0
        for who, b in by.items():
            k = b["reads"] + b["writes"]
            n += k
            lat += b["latency_sum"]
            hits += b["row_hits"]
            nbytes += k * req_bytes[who]
            scale = pim_scale if who == "pim" else 1.0
            energy += scale * ((b["row_misses"] + b["row_conflicts"]) * per.get((who, "act"), 0.0)
                               + b["reads"] * per.get((who, "read"), 0.0)
                               + b["writes"] * per.get((who, "write"), 0.0))
        span_ns = (L["end"] - L["start"]) * tck
        rows.append({"layer": L["name"], "requests": n, "bytes": int(nbytes),
                     "start": L["start"], "end": L["end"],
                     "bandwidth_gbs": nbytes / span_ns if span_ns > 0 else 0.0,
                     "mean_latency": lat / n if n else 0.0,
                     "row_hit_rate": hits / n if n else 0.0,
                     "energy_uj": energy / 1e6 if per else None})
    return rows


def layer_table(rows: list[dict]) -> str:
    width = max([len(r["layer"]) for r in rows] + [5])
    lines = [f"{'layer':<{width}}{'requests':>11}{'MiB':>9}{'cycles':>11}{'GB/s':>8}"
             f"{'mean lat':>10}{'hit rate':>10}{'energy uJ':>11}"]
    for r in rows:
        e = f"{r['energy_uj']:>11.3f}" if r["energy_uj"] is not None else f"{'-':>11}"
        lines.append(f"{r['layer']:<{width}}{r['requests']:>11,}{r['bytes'] / 2**20:>9.2f}"
                     f"{r['end'] - r['start']:>11,}{r['bandwidth_gbs']:>8.1f}"
                     f"{r['mean_latency']:>10.1f}{r['row_hit_rate']:>10.3f}{e}")
    if not rows:
        lines.append("(no LAYER markers in the trace)")
    return "\n".join(lines)


def write_layers_csv(rows: list[dict], path) -> None:
    import csv
    from pimrt.output import atomic_open
    with atomic_open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(COLUMNS))
        w.writeheader()
        w.writerows(rows)
