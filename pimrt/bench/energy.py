"""memctl's DRAM energy against DRAMsim3's: the reference traces (quoted figures) and, with a
DRAMsim3 build, live runs on traffic that stresses activations and refresh."""
from __future__ import annotations

import json
import pathlib
import subprocess
import tempfile

import numpy as np

HELP = ("DRAM energy of memctl against DRAMsim3, per component (ACT, RD, WR, REF, per-bank "
        "REF, active and precharged standby) and in total: the six cases of dram-reference.md's "
        "energy table (quoted), and with --dramsim3 live runs of your DRAMsim3 build on "
        "generated traffic (activation-heavy, refresh-heavy with idle gaps; on HBM2 both also "
        "with per-bank refresh)")

COMPONENTS = ("act", "read", "write", "refresh", "refresh_bank", "active_standby",
              "precharged_standby")
#: DRAMsim3's stats keys of each component (summed over channels; the standby ones per rank)
DRAMSIM3_KEYS = {"act": "act_energy", "read": "read_energy", "write": "write_energy",
                 "refresh": "ref_energy", "refresh_bank": "refb_energy", "active_standby": "act_stb_energy",
                 "precharged_standby": "pre_stb_energy"}
#: pimrt part -> DRAMsim3 ini of the same device
INIS = {"hbm2": "HBM2_8Gb_x128.ini", "ddr4": "DDR4_8Gb_x8_3200.ini"}
TOLERANCE = 0.05


def add_arguments(p) -> None:
    p.add_argument("--only", default=None,
                   help="comma-separated cases (hbm2-stream, ..., ddr4-mix, hbm2-act, "
                        "hbm2-refresh, hbm2-bankref, hbm2-bankidle, ddr4-act, ddr4-refresh)")
    p.add_argument("--dramsim3", type=pathlib.Path, default=None, metavar="DRIVE",
                   help="the front-end driver built from scripts/dramsim3_drive.cc against "
                        "your DRAMsim3 build: runs the generated cases live")
    p.add_argument("--dramsim3-configs", type=pathlib.Path, default=None, metavar="DIR",
                   help="DRAMsim3's configs/ directory (default: DRIVE's ../configs, "
                        "../../configs)")
    p.add_argument("--requests", type=int, default=200_000,
                   help="requests of the activation-heavy generated traces (the refresh-heavy "
                        "ones take 1/100 of it, in bursts of 32)")
    p.add_argument("--json", type=pathlib.Path, default=None, help="write the rows as JSON")


def _reference_rows(only):
    from pimrt.memctl import Options, load_part, run_trace
    from pimrt.memctl.reference import CYCLES, ENERGY_UJ, SOURCE
    from pimrt.trace import synthetic

    rows = []
    for (part_name, pattern, width), ref in ENERGY_UJ.items():
        name = f"{part_name}-{pattern}"
        if only and name not in only:
            continue
        s = run_trace(getattr(synthetic, pattern)(1_000_000), load_part(part_name),
                      Options(policy="serial", issue_width=width))
        rows.append(_row(name, SOURCE, s, {k: v * 1e6 for k, v in ref.items()},
                         CYCLES[(part_name, pattern, width)]["DRAMsim3"]))
    return rows


def _generated(part, kind: str, n: int, seed: int = 7) -> np.ndarray:
    """(address, is_write, cycle) of a generated case. act: random 64-B requests over the
    whole part, one every 6 cycles, a quarter writes (nearly every one opens a row, the rows
    stay open between requests); refresh: bursts of 32 sequential reads at a random row, 20
    tREFI apart (long idle gaps: refresh and precharged standby dominate, and memctl crosses
    them in one step)."""
    rng = np.random.default_rng(seed)
    cap = part.capacity_bytes // 64
    if kind == "act":
        addr = rng.integers(0, cap, n, dtype=np.uint64) * np.uint64(64)
        write = rng.random(n) < 0.25
        cycle = np.arange(n, dtype=np.uint64) * np.uint64(6)
        return addr, write, cycle
    bursts = max(1, n // 32)
    start = rng.integers(0, cap - 32, bursts, dtype=np.uint64)
    addr = ((start[:, None] + np.arange(32, dtype=np.uint64)[None, :]) * np.uint64(64)).ravel()
    gap = 20 * part.timing["tREFI"]
    cycle = np.repeat(np.arange(bursts, dtype=np.uint64) * np.uint64(gap), 32)
    return addr, np.zeros(len(addr), dtype=bool), cycle


def _bank_refresh_ini(ini: pathlib.Path, part, out: pathlib.Path) -> pathlib.Path:
    """DRAMsim3's ini with per-bank refresh as the part has it: BANK_LEVEL_STAGGERED, one bank
    every tREFI / banks (tREFIb), tRFCb and the per-bank current (IDD5PB = the part's IDD5B).
    DRAMsim3 holds the other banks' REFb back tREFI after a REFb and their ACTs tRFC (its
    timing.cc; JESD235's rule for both is tRREFD): its tREFI and tRFC, which nothing else uses
    under BANK_LEVEL_STAGGERED, are set to tRREFD so that it follows the standard's rule."""
    t, org = part.timing, part.org
    every = t["tREFI"] // (org["bankgroups"] * org["banks_per_group"])
    rrefd = max(1, t.get("tRREFD", 0))
    lines = []
    for line in ini.read_text().splitlines():
        key = line.split("=")[0].strip()
        if key in ("tREFIb", "tRFCb", "IDD5PB", "refresh_policy", "tREFI", "tRFC"):
            continue
        lines.append(line)
        if line.strip() == "[timing]":
            lines += [f"tREFIb = {every}", f"tRFCb = {t['tRFCb']}", f"tREFI = {rrefd}",
                      f"tRFC = {rrefd}"]
        elif line.strip() == "[power]":
            lines.append(f"IDD5PB = {part.power['IDD5B']}")
        elif line.strip() == "[system]":
            lines.append("refresh_policy = BANK_LEVEL_STAGGERED")
    out.write_text("\n".join(lines) + "\n")
    return out


def _dramsim3(drive: pathlib.Path, ini: pathlib.Path, trace: pathlib.Path, width: int,
              out: pathlib.Path, tck: float) -> tuple[dict, int]:
    """DRAMsim3's energy per component (pJ, true energy: its figures x tCK) and its cycles."""
    from pimrt.errors import PimrtError
    out.mkdir(parents=True, exist_ok=True)
    run = subprocess.run([str(drive), str(ini), str(trace), str(width), str(out)],
                         capture_output=True, text=True)
    if run.returncode != 0:
        raise PimrtError(f"{drive}: failed on {trace.name}: {run.stderr.strip()[-300:]}")
    stats = json.loads((out / "dramsim3.json").read_text())
    comp = dict.fromkeys(COMPONENTS, 0.0)
    cycles = 0
    comp["refb_cmds"] = 0
    for ch in stats.values():
        cycles = max(cycles, int(ch["num_cycles"]))
        comp["refb_cmds"] += int(ch.get("num_refb_cmds", 0))
        for name, key in DRAMSIM3_KEYS.items():
            v = ch[key]
            comp[name] += (sum(v.values()) if isinstance(v, dict) else v) * tck
    comp["total"] = sum(comp[k] for k in COMPONENTS)
    return comp, cycles


def find_dramsim3(drive: pathlib.Path, configs: pathlib.Path | None):
    """(driver, DRAMsim3's configs/ directory), checked: --dramsim3 and --dramsim3-configs."""
    from pimrt.errors import ConfigError
    if not drive.is_file():
        raise ConfigError(f"--dramsim3 {drive}: no such file (build scripts/dramsim3_drive.cc)")
    if configs is None:
        for c in (drive.parent / "configs", drive.parent.parent / "configs",
                  drive.parent.parent.parent / "configs"):
            if (c / INIS["hbm2"]).is_file():
                configs = c
                break
    if configs is None or not (configs / INIS["hbm2"]).is_file():
        raise ConfigError(f"--dramsim3-configs: no {INIS['hbm2']} found; give DRAMsim3's "
                          f"configs/ directory")
    return drive, configs


def dramsim3_run(drive, ini, trace, width, out, tck):
    """DRAMsim3's energy per component (pJ) and its cycles, from the driver on one trace."""
    return _dramsim3(drive, ini, trace, width, out, tck)


def run_generated(part, addr, write, cycle, trace: pathlib.Path, width: int) -> dict:
    """Host requests (addresses, write flags, arrival cycles) written as a DRAMsim3-format
    trace at `trace` (for DRAMsim3 to run too) and run through memctl (serial, issue width
    `width`): memctl's stats."""
    from pimrt.memctl import Options, run_trace
    from pimrt.trace import open_trace, write_trace
    from pimrt.trace.records import HOST, READ, RECORD_DTYPE, WRITE
    rec = np.zeros(len(addr), dtype=RECORD_DTYPE)
    rec["addr"], rec["cycle"], rec["requestor"] = addr, cycle, HOST
    rec["op"] = np.where(write, WRITE, READ)
    write_trace(trace, [rec], "dramsim3")
    return run_trace(open_trace(trace, "dramsim3"), part,
                     Options(policy="serial", issue_width=width))


def _live_rows(args, only, tmp: pathlib.Path):
    from pimrt.memctl import load_part

    drive, configs = find_dramsim3(args.dramsim3, args.dramsim3_configs)
    rows = []
    for part_name, width, kinds in (("hbm2", 4, ("act", "refresh", "bankref", "bankidle")),
                                    ("ddr4", 1, ("act", "refresh"))):
        for kind in kinds:
            per_bank = kind in ("bankref", "bankidle")  # refresh = "bank"
            part = load_part(part_name, {"controller.refresh": "bank"} if per_bank else None)
            name = f"{part_name}-{kind}"
            if only and name not in only:
                continue
            pattern = {"bankref": "act", "bankidle": "refresh"}.get(kind, kind)
            n = args.requests if pattern == "act" else max(32, args.requests // 100)
            addr, write, cycle = _generated(part, pattern, n)
            trace = tmp / f"{name}.trace"
            s = run_generated(part, addr, write, cycle, trace, width)
            ini = configs / INIS[part_name]
            if per_bank:
                ini = _bank_refresh_ini(ini, part, tmp / f"{name}.ini")
            ref, ref_cycles = _dramsim3(drive, ini, trace, width, tmp / name,
                                        part.timing["tCK"])
            refb_cmds = ref.pop("refb_cmds")
            row = _row(name, f"live: {drive}", s, ref, ref_cycles)
            if per_bank:  # the REFb counts, and the energy per REFB
                mine_n = s["energy_pj"]["counts"]["bank_refreshes"]
                row["refb_commands"] = {"memctl": mine_n, "dramsim3": refb_cmds}
                row["per_refb_deviation"] = (
                    (row["memctl_uj"]["refresh_bank"] / mine_n) /
                    (row["dramsim3_uj"]["refresh_bank"] / refb_cmds) - 1
                    if mine_n and refb_cmds else None)
            rows.append(row)
    return rows


def _row(name: str, source: str, stats: dict, ref_pj: dict, ref_cycles) -> dict:
    e = stats["energy_pj"]
    mine = {k: e["components"][k] for k in COMPONENTS}
    mine["total"] = e["total"]
    ref_pj = {k: ref_pj.get(k, 0.0) for k in mine}  # (quoted rows predate refresh_bank)
    dev = {k: (mine[k] / ref_pj[k] - 1) if ref_pj[k] else (0.0 if not mine[k] else None)
           for k in mine}
    # the components that grow with the run's length, per cycle of each run (their power):
    # where the two simulators' cycles differ (a timing matter), this is the energy model's
    per_cycle = {}
    if ref_cycles:
        scale = ref_cycles / stats["cycles"]
        per_cycle = {k: (mine[k] * scale / ref_pj[k] - 1) if ref_pj[k] else None
                     for k in ("refresh", "active_standby", "precharged_standby")}
    return {"case": name, "source": source, "cycles": stats["cycles"],
            "reference_cycles": ref_cycles, "memctl_uj": {k: v / 1e6 for k, v in mine.items()},
            "dramsim3_uj": {k: v / 1e6 for k, v in ref_pj.items()}, "deviation": dev,
            "per_cycle_deviation": per_cycle,
            "within_5pct": all(d is not None and abs(d) <= TOLERANCE for d in dev.values()),
            "counts": e["counts"]}


def _print(rows) -> None:
    cols = COMPONENTS + ("total",)
    print(f"{'case':<14}" + "".join(f"{c:>22}" for c in cols) + "  cycles (DRAMsim3)")
    for r in rows:
        cells = []
        for c in cols:
            d = r["deviation"][c]
            dev = "n/a" if d is None else f"{100 * d:+.1f}%"
            cells.append(f"{r['memctl_uj'][c]:>11,.2f} {dev:>8}  ")
        ref = f" ({r['reference_cycles']:,})" if r["reference_cycles"] else ""
        print(f"{r['case']:<14}" + "".join(f"{c:>22}" for c in cells) + f"  {r['cycles']:,}{ref}")
        print(f"{'  DRAMsim3':<14}" + "".join(f"{r['dramsim3_uj'][c]:>20,.2f}  " for c in cols)
              + f"  {r['source']}")
        if "refb_commands" in r:
            n = r["refb_commands"]
            d = r["per_refb_deviation"]
            print(f"{'  per REFB':<14}memctl {n['memctl']:,} REFB, DRAMsim3 {n['dramsim3']:,}; "
                  f"energy per REFB {'n/a' if d is None else f'{100 * d:+.2f}%'}")
        pc = r["per_cycle_deviation"]
        if pc and r["cycles"] != r["reference_cycles"]:
            print(f"{'  per cycle':<14}" + "".join(
                f"{100 * pc[c]:>+19.1f}%  " if pc.get(c) is not None else f"{'':>22}"
                for c in cols) + "  (each run's component over its own cycles)")


def run(args) -> int:
    only = set(args.only.split(",")) if args.only else None
    print("memctl's DRAM energy (uJ) and its deviation from DRAMsim3's, per component")
    rows = _reference_rows(only)
    if args.dramsim3 is not None:
        with tempfile.TemporaryDirectory(prefix="pimrt-energy-") as tmp:
            rows += _live_rows(args, only, pathlib.Path(tmp))
    _print(rows)
    bad = [r["case"] for r in rows if not r["within_5pct"] and "refb_commands" not in r]
    refb = [r for r in rows if not r["within_5pct"] and "refb_commands" in r]
    print(f"{len(rows) - len(bad) - len(refb)} of {len(rows)} cases within 5% on every "
          f"component"
          + (f"; not: {', '.join(bad)} (their cycles differ: refresh and standby grow with the "
             f"run's length; per cycle they agree, the 'per cycle' line)" if bad else "")
          + "".join(f"; not: {r['case']} (DRAMsim3 issues {r['refb_commands']['dramsim3']:,} "
                    f"per-bank refreshes where memctl issues {r['refb_commands']['memctl']:,}, "
                    f"one per bank every tREFI: its BANK_LEVEL_STAGGERED holds each bank's REFb "
                    f"back tREFI after any other bank's; per REFB the energy agrees, the "
                    f"'per REFB' line)" for r in refb))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0
