"""When and where a benchmark ran, for its results file: the date, the machine, its load."""
from __future__ import annotations

import datetime
import os
import platform


def loadavg() -> list[float] | None:
    """The 1-, 5- and 15-minute load averages, or None where the system gives none."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def when_where() -> dict:
    """The date (UTC), the machine (CPUs, CPU model, OS and architecture) and the load
    average now (the caller adds `load_average_after` when its run ends)."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": f"{os.cpu_count()} CPUs, {cpu} ({platform.system()} {platform.machine()})",
            "load_average_before": loadavg()}
