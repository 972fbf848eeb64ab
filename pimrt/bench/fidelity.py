"""memctl's cycles against DRAMsim3's, run live side by side, on generated traffic that
stresses activations: strides across banks and ranks, one bank group, random reads and writes
mixed, timed bursts."""
from __future__ import annotations

import json
import pathlib
import tempfile

import numpy as np

HELP = ("memctl's cycles against a live DRAMsim3 (the driver built from "
        "scripts/dramsim3_drive.cc) on generated activation-bound traffic, HBM2 and DDR4, "
        "side by side, each case within 5%?")

#: case -> what it is (docs/memctl.md "Fidelity")
CASES = {
    "banks": "reads striding across the banks: bank, then bank group, then rank, then "
             "(pseudo-)channel fastest first, a random row and column each",
    "ranks": "reads alternating ranks (DDR4; on HBM2 pseudo-channels), random bank and row",
    "bankgroup": "reads to random rows of the four banks of one bank group (tRRD_L, tCCD_L)",
    "rw-random": "random addresses over the whole part, a third writes",
    "bursts": "bursts of 64 random reads, one burst every 320 cycles (DDR4 serves them in "
              "about that time; HBM2 idles between them)",
}
#: the real CNN step's case (HBM2 only: pimrt.bench._fidelity_step), run after the others
STEP_CASE = "cnn-step"
PARTS = (("hbm2", 4), ("ddr4", 1))
TOLERANCE = 0.05


def add_arguments(p) -> None:
    p.add_argument("--dramsim3", type=pathlib.Path, required=True, metavar="DRIVE",
                   help="the front-end driver built from scripts/dramsim3_drive.cc against "
                        "your DRAMsim3 build")
    p.add_argument("--dramsim3-configs", type=pathlib.Path, default=None, metavar="DIR",
                   help="DRAMsim3's configs/ directory (default: DRIVE's ../configs, "
                        "../../configs)")
    p.add_argument("--requests", type=int, default=100_000, help="requests per case")
    p.add_argument("--only", default=None,
                   help=f"comma-separated cases ({', '.join(CASES)}), each on both parts, or "
                        f"PART-CASE (e.g. ddr4-banks)")
    p.add_argument("--seed", type=int, default=11, help="seed of the generated traffic")
    p.add_argument("--set", action="append", default=[], metavar="TABLE.KEY=VALUE",
                   help="override a key of both parts for memctl, e.g. --set "
                        "controller.arbitration=column_first (repeatable)")
    p.add_argument("--json", type=pathlib.Path, default=None, help="write the rows as JSON")


def generate(part, case: str, n: int, seed: int = 11):
    """(address, is_write, cycle) arrays of n requests of a case on a part."""
    rng = np.random.default_rng(seed)
    o = part.org
    counts = {"ch": o["channels"], "pc": o["pseudo_channels"], "ra": o["ranks"],
              "bg": o["bankgroups"], "ba": o["banks_per_group"], "ro": o["rows"],
              "co": part.columns_per_row}
    coord = {k: rng.integers(0, v, n, dtype=np.uint64) for k, v in counts.items()}
    i = np.arange(n, dtype=np.uint64)
    write = np.zeros(n, dtype=bool)
    cycle = np.zeros(n, dtype=np.uint64)
    if case == "banks":
        k = i
        for f in ("ba", "bg", "ra", "pc", "ch"):
            coord[f] = k % np.uint64(counts[f])
            k = k // np.uint64(counts[f])
    elif case == "ranks":
        f = "ra" if counts["ra"] > 1 else "pc"
        coord[f] = i % np.uint64(counts[f])
    elif case == "bankgroup":
        for f in ("ch", "pc", "ra", "bg"):
            coord[f] = np.zeros(n, dtype=np.uint64)
    elif case == "rw-random":
        write = rng.random(n) < 1 / 3
    elif case == "bursts":
        cycle = (i // np.uint64(64)) * np.uint64(320)
    else:
        raise ValueError(f"unknown case {case!r}")
    shifts = part.field_shifts()
    addr = np.zeros(n, dtype=np.uint64)
    for f, v in coord.items():
        if f in shifts and shifts[f][1]:
            addr |= v << np.uint64(shifts[f][0])
    return addr, write, cycle


def run(args) -> int:
    from pimrt.bench.energy import INIS, dramsim3_run, find_dramsim3, run_generated
    from pimrt.commands.memsim import _overrides
    from pimrt.errors import ConfigError
    from pimrt.memctl import load_part

    if args.requests < 1:
        raise ConfigError(f"--requests must be >= 1, got {args.requests}")
    only = set(args.only.split(",")) if args.only else None
    if only:
        known = set(CASES) | {f"{p}-{c}" for p, _ in PARTS for c in CASES} | \
            {STEP_CASE, f"hbm2-{STEP_CASE}"}
        bad = sorted(only - known)
        if bad:
            raise ConfigError(f"--only: unknown case {bad[0]!r} (one of: {', '.join(CASES)}, "
                              f"or PART-CASE)")
    drive, configs = find_dramsim3(args.dramsim3, args.dramsim3_configs)
    rows = []
    print(f"memctl against DRAMsim3 ({drive}), {args.requests:,} requests a case, cycles")
    print(f"{'case':<16}{'W':>3}{'memctl':>14}{'DRAMsim3':>14}{'memctl vs DRAMsim3':>20}")
    with tempfile.TemporaryDirectory(prefix="pimrt-fidelity-") as tmp:
        tmp = pathlib.Path(tmp)
        for part_name, width in PARTS:
            part = load_part(part_name, _overrides(args.set) or None)
            for case in CASES:
                name = f"{part_name}-{case}"
                if only and case not in only and name not in only:
                    continue
                addr, write, cycle = generate(part, case, args.requests, args.seed)
                trace = tmp / f"{name}.trace"
                s = run_generated(part, addr, write, cycle, trace, width)
                _, ref = dramsim3_run(drive, configs / INIS[part_name], trace, width,
                                      tmp / name, part.timing["tCK"])
                dev = s["cycles"] / ref - 1
                rows.append({"case": name, "width": width, "requests": args.requests,
                             "cycles": s["cycles"], "dramsim3_cycles": ref, "deviation": dev,
                             "within_5pct": abs(dev) <= TOLERANCE})
                print(f"{name:<16}{width:>3}{s['cycles']:>14,}{ref:>14,}{100 * dev:>+19.1f}%",
                      flush=True)
        if not only or only & {STEP_CASE, f"hbm2-{STEP_CASE}"}:
            from pimrt.bench import _fidelity_step as fidelity_step
            r = fidelity_step.row(drive, configs, tmp, load_part("hbm2", _overrides(args.set)
                                                                 or None), PARTS[0][1])
            r["deviation"] = dev = r["cycles"] / r["dramsim3_cycles"] - 1
            r["within_5pct"] = abs(dev) <= TOLERANCE
            rows.append(r)
            print(f"{r['case']:<16}{r['width']:>3}{r['cycles']:>14,}{r['dramsim3_cycles']:>14,}"
                  f"{100 * dev:>+19.1f}%  ({r['requests']:,} requests of "
                  f"{fidelity_step.MODEL}'s GPU-only step)", flush=True)
    bad = [r["case"] for r in rows if not r["within_5pct"]]
    print(f"{len(rows) - len(bad)} of {len(rows)} cases within 5% of DRAMsim3"
          + (f"; not: {', '.join(bad)}" if bad else ""))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0
