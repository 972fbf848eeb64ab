"""DRAM energy of a memctl run as a JSON-ready dict (the C model computes it, memctl/energy.c;
the model and its sources: docs/energy.md).

    energy_pj(ctl) -> {"available": True, "total": ..., "components": {...}, "counts": {...},
                       "average_power_mw": ..., "cycles": ..., "ranks": [...]}

A part without [power] currents gives {"available": False, "note": "..."}: never zeros.
"""
from __future__ import annotations

from pimrt.memctl._native import ffi, lib

#: energy components (pJ), in the order the stats list them; the pim_* ones are the DRAM side
#: of the PIM's all-bank commands (banks opened, columns read / written into the units);
#: refresh is the all-bank refreshes' (refresh = "rank"), refresh_bank the per-bank ones'
#: (refresh = "bank")
COMPONENTS = ("act", "read", "write", "refresh", "refresh_bank", "pim_act", "pim_read",
              "pim_write", "active_standby", "precharged_standby")
COUNTS = ("acts", "reads", "writes", "refreshes", "bank_refreshes", "pim_acts", "pim_reads",
          "pim_writes", "active_cycles", "precharged_cycles")


def _one(sim, channel: int, rank: int) -> dict:
    e = ffi.new("mc_energy *")
    rc = lib.mc_get_energy(sim, channel, rank, e)
    if rc != lib.MC_OK:  # only a bad index, which this module never passes
        raise ValueError(ffi.string(lib.mc_error(sim)).decode())
    return {
        "cycles": int(e.cycles),
        "components": {name: float(getattr(e, f"{name}_pj")) for name in COMPONENTS},
        "total": float(e.total_pj),
        "counts": {name: int(getattr(e, name)) for name in COUNTS},
        "available": bool(e.available),
    }


def energy_pj(sim, part) -> dict:
    """The run's DRAM energy in pJ: components, total, average power (mW over the run, which
    ends when every command has issued), counts, and each channel's and rank's share."""
    if part.power is None:
        return {"available": False,
                "note": f"part {part.name} gives no [power] currents (VDD, IDD0, IDD2N, IDD3N, "
                        f"IDD4R, IDD4W, IDD5AB): DRAM energy not computed"}
    whole = _one(sim, -1, -1)
    out = {"available": True, "total": whole["total"], "components": whole["components"],
           "cycles": whole["cycles"],
           "average_power_mw": (whole["total"] / (whole["cycles"] * part.timing["tCK"])
                                if whole["cycles"] else 0.0),
           "counts": whole["counts"]}
    if part.pim_energy is None and (whole["counts"]["pim_reads"] or whole["counts"]["pim_writes"]):
        out["note"] = (f"part {part.name} gives no [pim_energy]: the PIM's column accesses "
                       f"(pim_read, pim_write) are not counted in the total")
    ranks = []
    for ch in range(part.channel_count):
        for r in range(part.org["ranks"]):
            one = _one(sim, ch, r)
            ranks.append({"channel": ch // part.org["pseudo_channels"],
                          "pseudo_channel": ch % part.org["pseudo_channels"], "rank": r,
                          "total": one["total"], "components": one["components"]})
    out["ranks"] = ranks
    return out
