"""The per-layer rule for the authority policy's parameters, from the host layer's traits.

A CONV on the host asks for r requests per cycle per channel (its DRAM requests over its
compute time). While the PIM holds a channel the host's requests wait in its queue; the queue
(host_queue_depth entries) fills in host_queue_depth / r cycles, after which the host stalls.
So:

- the PIM's epoch cap is that time (clamped to [4 x switch cost, 4000] cycles): the PIM gets
  long epochs when the host is compute-bound and short ones when it streams;
- the host takes the channel back once it has r x switch_cost requests waiting (at least 1, at
  most half the queue): what arrives during one switch, so the switch pays for itself;
- an epoch lasts at least two switch costs, so neither side ping-pongs;
- the PIM's watermarks stay at their defaults (its requests are bulk streams);
- a memory-bound host layer (its requests need at least its compute time on the data bus:
  r x burst cycles >= 1) competes with the PIM for the same bytes, so slicing the channel
  finely gains nothing: it gets the longest epochs (cap 4000, the host takes the channel back
  at half its queue, epochs of at least 8 switch costs) and pays for few switches.

switch_cost = tRP (precharge all) + 2 x mode_switch_cycles (in and out of PIM mode).

The slack rule (`--authority-rule slack`) asks instead whether the step waits for the host
task: it list-schedules the step on the tasks' durations alone (the planned schedule's,
pimrt.runtime.plan.slack) and gives each host CONV/linear task
- with little slack (under CRITICAL_SLACK of its duration: the step waits for it) the
  channel: the PIM's epochs capped at CRITICAL_CAP_SWITCHES switch costs, the host taking
  the channel back once one request waits, epochs of at least two switch costs; the PIM
  taking the channel only once the host's queue is empty (host low watermark 0), and the
  host's own epochs capped at CRITICAL_HOST_EPOCH_CAP cycles, not at the PIM's cap;
- with slack (the step waits for the PIM meanwhile) long PIM epochs, as a memory-bound host
  layer gets from the per-layer rule, but capped at SLACK_YIELD_EPOCH_CAP cycles: half the
  per-layer rule's cap, so the host's requests wait less behind each PIM epoch; the host's
  low watermark and epoch cap back at memctl's defaults (a quarter of its queue; the
  PIM's cap).
Where the PIM's work is close to the host's (BUSY_PIM_LOAD of it or more, in the same
durations), holding the PIM to short epochs beside a critical host task only moves the wait:
the PIM becomes the side the step waits for. Its epochs beside a critical host task are then
capped at BUSY_PIM_CAP_SWITCHES switch costs instead (docs/runtime.md, "The slack rule").
"""
from __future__ import annotations

from pimrt.memctl.config import Part


def switch_cost(part: Part) -> int:
    ms = part.pim["mode_switch_cycles"] if part.pim else 0
    return part.timing["tRP"] + 2 * ms


CRITICAL_SLACK = 0.05          # a host task with less slack than this share of its duration
CRITICAL_CAP_SWITCHES = 6      # the PIM's epoch cap beside a critical host task, switch costs
BUSY_PIM_LOAD = 0.6            # the PIM's work over the host's from which ...
BUSY_PIM_CAP_SWITCHES = 12     # ... the PIM's epoch cap beside a critical host task is this
SLACK_YIELD_EPOCH_CAP = 2000   # the PIM's epoch cap beside a host task with slack, cycles
CRITICAL_HOST_EPOCH_CAP = 4000 # the host's own epoch cap beside a critical host task, cycles


def host_queue_depth(part: Part) -> int:
    """The host's memctl queue (the part's own queue_depth where it sets no host one)."""
    return part.controller.get("host_queue_depth") or part.controller["queue_depth"]


def yielding_parameters(part: Part) -> dict[str, int]:
    """The host yields: long PIM epochs, the host taking the channel back at half its queue,
    epochs of at least 8 switch costs (few switches)."""
    return {"epoch_cap": 4000, "host_high_watermark": host_queue_depth(part) // 2,
            "min_epoch": 8 * switch_cost(part)}


def critical_parameters(part: Part, pim_load: float = 0.0) -> dict[str, int]:
    """The host holds the channel: short PIM epochs (less short where the PIM's work,
    pim_load times the host's, is close to the host's), the host taking it back once one
    request waits, epochs of at least two switch costs."""
    cost = switch_cost(part)
    cap = BUSY_PIM_CAP_SWITCHES if pim_load >= BUSY_PIM_LOAD else CRITICAL_CAP_SWITCHES
    return {"epoch_cap": cap * cost, "host_high_watermark": 1, "min_epoch": 2 * cost,
            "host_low_watermark": 0, "host_epoch_cap": CRITICAL_HOST_EPOCH_CAP}


def slack_parameters(part: Part, slack: int, duration: int,
                     pim_load: float = 0.0) -> dict[str, int]:
    """The slack rule's parameters for a host task with this slack and duration, in a step
    whose PIM tasks take pim_load times its host tasks' time (the same durations)."""
    if slack < CRITICAL_SLACK * duration:
        return critical_parameters(part, pim_load)
    yielding = yielding_parameters(part)
    return {**yielding, "epoch_cap": max(SLACK_YIELD_EPOCH_CAP, yielding["min_epoch"]),
            "host_low_watermark": host_queue_depth(part) // 4,     # memctl's defaults
            "host_epoch_cap": 0}


def layer_parameters(part: Part, host_requests: int, host_compute_cycles: int) -> dict[str, int]:
    q = host_queue_depth(part)
    cost = switch_cost(part)
    chans = part.channel_count
    r = host_requests / max(host_compute_cycles, 1) / chans       # requests / cycle / channel
    fill = q / r if r > 0 else 1e9
    if r * part.burst_cycles >= 1:                                   # memory-bound
        return yielding_parameters(part)
    cap = int(min(4000, max(4 * cost, fill)))
    hwm = int(min(q // 2, max(1, round(r * cost))))
    return {"epoch_cap": cap, "host_high_watermark": hwm, "min_epoch": 2 * cost}
