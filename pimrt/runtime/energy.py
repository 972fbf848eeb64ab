"""Energy of a timed training step: host, DRAM, PIM and I/O (docs/energy.md).

    e = step_energy(run, part, host_part)        # a StepTiming -> dict, energy in mJ

- DRAM: memctl's energy of the step's run (DRAMsim3's model from the part's [power] currents,
  memctl/energy.c), every component but the PIM's column accesses: activations (the host's
  and the PIM's all-bank ones), reads, writes, refreshes, active and precharged standby.
- PIM: the bank's share of its all-bank column accesses (memctl: pim_read, pim_write), the
  lane operations of every PIM task (each kernel's program walked for its banks' work, the
  arithmetic counted by kind: add, multiply, multiply-add, compare; x lanes x banks) at the
  part's [pim_energy] pJ, and the units' register files and sequencer per unit clock cycle
  they run.
- host: each CONV/linear task's FLOPs (the host model's implicit GEMM) x the host part's
  energy per FLOP (fp32 or Tensor Core); an op the PIM could run but the GPU runs (GPU-only)
  costs the same arithmetic as the PIM kernel at the fp32 figure; plus the static power over
  the step.
- I/O: the host's bytes over the memory interface x the host part's pJ per byte (the PIM's
  all-bank commands move none).

A part without [power] (memory) or [energy] (host) makes the whole unavailable with a note,
never zeros. Each task gets its compute energy exactly; the DRAM, I/O and static energy are
spread over the tasks by their share of the step's cycles (pimrt.runtime.attribution).
"""
from __future__ import annotations

import functools
import json
import textwrap

import numpy as np

PJ_TO_MJ = 1e-9
#: lane instructions by the energy they cost (MOV, SEL: register file only)
OP_KIND = {"ADD": "add", "SUB": "add", "MUL": "mul", "MAD": "fma", "FMA": "fma", "MAX": "compare",
           "MIN": "compare", "CMPGT": "compare", "CMPGE": "compare", "CMPEQ": "compare"}
FLOPS_PER_OP = {"add": 1, "mul": 1, "fma": 2, "compare": 1,
                "add16": 1, "mul16": 1, "fma16": 2, "compare16": 1}   # 16: fp16/bf16 ops
PARTS = ("host", "dram", "pim", "io")


@functools.lru_cache(maxsize=4096)
def kernel_ops(kernel: str, lanes: int, work: tuple) -> tuple[dict, int]:
    """One bank's run of `kernel` on `work` ((name, value) pairs, as pimrt.pim.access takes
    them): lane operations by kind (instructions x lanes) and the unit's clock cycles, from
    the same walk of the program as the timing's (pimrt.pim.access.instruction_runs)."""
    from pimrt.pim import access
    prog, runs, cycles = access.instruction_runs(kernel, lanes, work)
    ops = dict.fromkeys(FLOPS_PER_OP, 0)
    for ins, n in zip(prog, runs):
        kind = OP_KIND.get(ins.name)
        if kind and ins.dtype:          # a 16-bit instruction: two elements a lane
            ops[kind + "16"] += 2 * int(n)
        elif kind:
            ops[kind] += int(n)
    return {k: v * lanes for k, v in ops.items()}, cycles


def task_lane_ops(task, ctx) -> tuple[dict, int]:
    """A PIM-kind task's lane operations by kind over every bank it works in, and its units'
    clock cycles summed over the units (each unit runs once per bank of the scope beside it)."""
    from pimrt.runtime.work import bank_work, pim_kernels
    lanes = ctx.part.pim["lanes"]
    banks = ctx.part.channel_count * ctx.pim_scope
    total, cycles = dict.fromkeys(FLOPS_PER_OP, 0), 0
    for kernel, _ in pim_kernels(task, ctx) or ():
        ops, c = kernel_ops(kernel, lanes, tuple(sorted(bank_work(kernel, task, ctx).items())))
        for k in total:
            total[k] += ops[k] * banks
        cycles += c * banks
    return total, cycles


def lane_pj(ops: dict, pe: dict, part) -> float:
    """pJ of lane operations by kind at the part's [pim_energy] figures (16-bit kinds: the
    `add16_pj`, ... keys, needed only when a step runs 16-bit lanes)."""
    from pimrt.errors import ConfigError
    total = 0.0
    for k, n in ops.items():
        if not n:
            continue
        if f"{k}_pj" not in pe:
            raise ConfigError(f"memory part {part.name}: [pim_energy] has no {k}_pj, the "
                              f"energy of a 16-bit lane {k[:-2]} (the step runs 16-bit lanes)")
        total += n * pe[f"{k}_pj"]
    return total


def _unavailable(part, host_part) -> str | None:
    missing = []
    if part.power is None:
        missing.append(f"memory part {part.name} gives no [power] currents")
    if part.pim is not None and part.pim_energy is None:
        missing.append(f"memory part {part.name} gives no [pim_energy]")
    if host_part.energy is None:
        missing.append(f"host part {host_part.name} gives no [energy]")
    return "; ".join(missing) + ": energy not computed" if missing else None


def step_energy(run, part, host_part) -> dict:
    """The step's energy in mJ: total, the four parts, their components, and per task (the
    task's compute exactly, the shared DRAM, I/O and static energy by its cycles)."""
    from pimrt.host.part import load_host_part
    from pimrt.host.work import HostWork
    from pimrt.pim.errors import PimError
    from pimrt.runtime.attribution import task_shares
    from pimrt.runtime.placement import place_step
    from pimrt.runtime.work import context, host_kernel, pim_kernels
    host_part = load_host_part(host_part)
    note = _unavailable(part, host_part)
    if note:
        return {"available": False, "note": note}
    graph = run.schedule.graph
    mode = run.exchange.mode if run.exchange is not None else "sgd"
    policy = "serial" if run.policy == "gpu_only" else run.policy
    ctx = context(graph, part, place_step(graph, part, mode), host_part, policy,
                  exchange=run.exchange)
    pe, he = part.pim_energy, host_part.energy
    n = len(run.schedule.tasks)
    compute = np.zeros(n)                        # pJ per task: FLOPs, lane ops, unit cycles
    host_flops = lane_ops = unit_cycles = gpu_ops = 0
    ops_by_kind = dict.fromkeys(FLOPS_PER_OP, 0)
    for t in run.schedule.tasks:
        if t.side == "host" and t.kind in ("conv", "linear"):
            layer, phase, lo, hi, samples = host_kernel(t, graph)
            flops = HostWork(graph[layer], samples, phase, channel_range=(lo, hi),
                             part=host_part).executed_flops
            host_flops += flops
            compute[t.id] = flops * host_part.pj_per_flop
        elif pim_kernels(t, ctx) is not None:
            try:
                ops, cycles = task_lane_ops(t, ctx)
            except PimError:                     # a shape the PIM kernels do not take
                if t.side == "pim":               # (then the GPU runs it: no PIM estimate)
                    raise
                continue
            if t.side == "pim":
                pj = lane_pj(ops, pe, part)
                pj += cycles * (pe["register_file_pj_per_cycle"] + pe["sequencer_pj_per_cycle"])
                for k in ops:
                    ops_by_kind[k] += ops[k]
                lane_ops += sum(ops.values())
                unit_cycles += cycles
            else:                                # the GPU runs the same arithmetic
                flops = sum(ops[k] * FLOPS_PER_OP[k] for k in ops)
                gpu_ops += flops
                pj = flops * he["fp32_pj_per_flop"]
            compute[t.id] = pj
    dram = run.stats["energy_pj"]
    c = dram["components"]
    pim_columns = c["pim_read"] + c["pim_write"]
    dram_pj = dram["total"] - pim_columns
    host_bytes = run.stats["requestors"]["host"]["bytes"]
    io_pj = host_bytes * he["io_pj_per_byte"]
    static_pj = he["static_w"] * run.seconds * 1e12
    host_side = np.array([t.side == "host" for t in run.schedule.tasks], bool)
    host_compute = float(compute[host_side].sum())
    pim_compute = float(compute[~host_side].sum())
    pim_ops_pj = lane_pj(ops_by_kind, pe, part)
    parts_pj = {"host": host_compute + static_pj, "dram": dram_pj,
                "pim": pim_columns + pim_compute, "io": io_pj}
    total = sum(parts_pj.values())
    # per task: compute exactly; DRAM (with the PIM's columns), I/O and static by cycles
    shares = task_shares(run.start, run.end, run.makespan) if n else np.zeros(0)
    spread = (dram["total"] + io_pj + static_pj) * (shares / shares.sum() if n and
                                                    shares.sum() else shares)
    return {
        "available": True,
        "total": total * PJ_TO_MJ,
        **{k: v * PJ_TO_MJ for k, v in parts_pj.items()},
        "shares": {k: v / total if total else 0.0 for k, v in parts_pj.items()},
        "components": {
            "host_compute": host_compute * PJ_TO_MJ, "host_static": static_pj * PJ_TO_MJ,
            **{f"dram_{k}": v * PJ_TO_MJ for k, v in c.items()
               if not k.startswith("pim_read") and not k.startswith("pim_write")},
            "pim_columns": pim_columns * PJ_TO_MJ, "pim_lane_ops": pim_ops_pj * PJ_TO_MJ,
            "pim_register_files": unit_cycles * pe["register_file_pj_per_cycle"] * PJ_TO_MJ,
            "pim_sequencer": unit_cycles * pe["sequencer_pj_per_cycle"] * PJ_TO_MJ,
            "io": io_pj * PJ_TO_MJ,
        },
        "counts": {"host_conv_flops": int(host_flops), "gpu_elementwise_flops": int(gpu_ops),
                   "pim_lane_ops": {k: int(v) for k, v in ops_by_kind.items()
                                    if v or not k.endswith("16")},
                   "pim_unit_cycles": int(unit_cycles), "host_io_bytes": int(host_bytes)},
        "average_power_w": total * 1e-12 / run.seconds if run.seconds else 0.0,
        "per_task_mj": ((compute + spread) * PJ_TO_MJ).tolist(),
    }


def cached_energy(run, part, host_part) -> dict:
    """step_energy, kept on the StepTiming (a comparison reports each baseline per policy)."""
    # every value of both parts: a sweep gives one GPU-only run to points whose memory parts
    # differ in a PIM key (the part's repr names only its file)
    from pimrt.host.part import load_host_part
    host_part = load_host_part(host_part)
    key = json.dumps([part.to_dict(), host_part.to_dict()], sort_keys=True, default=str)
    memo = getattr(run, "_energy", None)
    if memo is None or memo[0] != key:
        memo = (key, step_energy(run, part, host_part))
        run._energy = memo
    return memo[1]


def _system(meta: dict):
    """(memory part as the step ran on it, host part) of a run's meta: the parts by name or
    file with the run's own part keys (`part_keys`, as `pimrt sweep` gives them) applied."""
    from pimrt.host.part import load_host_part
    from pimrt.memctl import load_part
    from pimrt.runtime.timing import step_part
    keys = meta.get("part_keys") or {}
    host = load_host_part(meta["host_part"], keys.get("host") or None)
    part = meta["part"]
    if isinstance(part, str) or keys.get("memory"):
        part = load_part(part, keys.get("memory") or None)
    return step_part(part, host), host


def summary(run, serial, gpu_only, meta: dict) -> dict:
    """summary.json's energy_mj: this run's step energy (total, host / DRAM / PIM / I/O, their
    components), the baselines' totals and parts, and the ratios of this run's energy to
    theirs (below 1: it saves energy)."""
    part, host = _system(meta)
    e = cached_energy(run, part, host)
    if not e["available"]:
        return dict(e)
    out = {k: v for k, v in e.items() if k != "per_task_mj"}
    for name, base in (("serial", serial), ("gpu_only", gpu_only)):
        if base is None:
            continue
        b = cached_energy(base, part, host)
        out[f"{name}_total"] = b["total"]
        out[f"{name}_parts"] = {k: b[k] for k in PARTS}
        out[f"vs_{name}"] = e["total"] / b["total"] if b["total"] else 0.0
    return out


def layer_energy(rows: list[dict], run, meta: dict) -> None:
    """Each layers.csv row gets its energy (mJ: its tasks' compute, and its share of the
    step's cycles of the DRAM, I/O and static energy) and its share of the step's energy."""
    e = cached_energy(run, *_system(meta))
    if not e["available"]:
        return
    per = {}
    for t, mj in zip(run.schedule.tasks, e["per_task_mj"]):
        per[t.layer] = per.get(t.layer, 0.0) + mj
    for r in rows:
        mj = per.get(r["layer"], 0.0)
        r["energy_mj"] = round(mj, 6)
        r["energy_share"] = round(mj / e["total"], 6) if e["total"] else 0.0


LABELS = {"host": "host", "dram": "DRAM", "pim": "PIM", "io": "I/O"}
COLORS = {"host": "tab:blue", "dram": "tab:gray", "pim": "tab:orange", "io": "tab:green"}


def plot(bars: list[tuple[str, dict]], path, title: str) -> None:
    """Stacked bars per (label, energy dict with the PARTS in mJ): the whole step, and beside
    it the memory side alone (DRAM, PIM, I/O), which the host's compute would dwarf."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from pimrt.output import atomic_savefig
    many = len(bars) > 6                         # a comparison: the panels one above the other
    if many:
        fig, axes = plt.subplots(2, 1, figsize=(max(8, 0.45 * len(bars) + 2), 7.5),
                                 layout="constrained")
    else:
        fig, axes = plt.subplots(1, 2, figsize=(max(8, 1.1 * len(bars) + 3), 4.2),
                                 layout="constrained")
    x = np.arange(len(bars))
    for ax, parts, sub in ((axes[0], PARTS, "the step"),
                           (axes[1], PARTS[1:], "memory side: DRAM, PIM, I/O")):
        bottom = np.zeros(len(bars))
        for part in parts:
            v = np.array([b[part] for _, b in bars])
            ax.bar(x, v, 0.7, bottom=bottom, color=COLORS[part], label=LABELS[part])
            bottom += v
        rotate = len(bars) > 3
        # long labels (a user's model named by its folder) wrapped, so they fit the figure
        ax.set_xticks(x, [textwrap.fill(label, 24) for label, _ in bars], rotation=45 if rotate else 0,
                      ha="right" if rotate else "center", fontsize=8)
        ax.set_ylabel("mJ per training step")
        ax.set_title(sub, fontsize=9)
        ax.legend(fontsize=8, loc="lower center", ncol=len(parts), framealpha=0.9)
    fig.suptitle(title, fontsize=10)
    atomic_savefig(fig, path, dpi=110)
    plt.close(fig)


def run_bars(s: dict) -> list[tuple[str, dict]]:
    """A summary's bars: GPU-only, serial (when it is not the run itself), the run."""
    e = s["energy_mj"]
    bars = []
    if "gpu_only_parts" in e:
        bars.append(("GPU-only", e["gpu_only_parts"]))
    if "serial_parts" in e and s["policy"] != "serial":
        bars.append(("serial", e["serial_parts"]))
    bars.append((s["policy"], {k: e[k] for k in PARTS}))
    return bars


def line(s: dict) -> str:
    """`pimrt run`'s energy line."""
    e = s.get("energy_mj")
    if not e or not e.get("available"):
        return "energy: unavailable" + (f" ({e['note']})" if e and e.get("note") else "")
    parts = ", ".join(f"{LABELS[k]} "
                      f"{e[k]:,.1f}" for k in PARTS)
    text = (f"energy per step {e['total']:,.1f} mJ ({parts}; {e['average_power_w']:.0f} W "
            f"average)")
    ratios = [f"{e['vs_' + b]:.3f} of {name}'s {e[b + '_total']:,.1f} mJ"
              for b, name in (("gpu_only", "GPU-only"), ("serial", "serial"))
              if "vs_" + b in e and not (b == "serial" and s["policy"] == "serial")]
    return text + ("; " + ", ".join(ratios) if ratios else "")
