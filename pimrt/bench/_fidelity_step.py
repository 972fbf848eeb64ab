"""`pimrt bench fidelity`'s case of a real CNN step: the GPU-only training step of a small
CNN (every op on the host) timed on one HBM2 stack with PIM units (hbm2_pim), its host
requests written as a DRAMsim3 trace at the cycles the host offered them
(pimrt.trace.host_export), and that trace run through memctl (hbm2) and DRAMsim3 alike."""
from __future__ import annotations

import pathlib

CASE = "cnn-step"
DESCRIPTION = ("the GPU-only training step of resnet_cifar_20 (batch 4, 32x32) on one HBM2 "
               "stack: its host requests at the cycles they arrived in pimrt's run")
MODEL, BATCH, INPUT, STEP_PART = "resnet_cifar_20", 4, 32, "hbm2_pim"


def write_step_trace(path: pathlib.Path, model: str = MODEL, batch: int = BATCH,
                     input_size: int = INPUT) -> int:
    """The GPU-only step's host requests as a DRAMsim3 trace at `path`; how many."""
    from pimrt.runtime import session
    from pimrt.runtime.timing import time_step
    from pimrt.trace.host_export import HostTrace
    graph = session.captured(model, batch, input_size)
    sink = HostTrace(path, "dramsim3")
    time_step(graph, "gpu_only", part=STEP_PART, sink=sink)
    return sink.count


def row(drive, configs, tmp: pathlib.Path, part, width: int) -> dict:
    """memctl's and DRAMsim3's cycles on the step's trace (part: memctl's hbm2)."""
    from pimrt.bench.energy import INIS, dramsim3_run
    from pimrt.memctl import Options, run_trace
    from pimrt.trace import open_trace
    trace = tmp / f"{CASE}.trace"
    n = write_step_trace(trace)
    s = run_trace(open_trace(trace, "dramsim3"), part, Options(policy="serial",
                                                               issue_width=width))
    _, ref = dramsim3_run(drive, configs / INIS["hbm2"], trace, width, tmp / CASE,
                          part.timing["tCK"])
    return {"case": f"hbm2-{CASE}", "width": width, "requests": n, "cycles": s["cycles"],
            "dramsim3_cycles": ref}
