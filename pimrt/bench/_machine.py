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


def run_timed(cmd: list, cwd, stdout, stderr, env: dict | None = None,
              timeout: float | None = None):
    """Run cmd as a child process and wait for it: (wall seconds, its resource usage from
    os.wait4 (user and system CPU, peak RSS), exit code, whether the timeout killed it).
    OSError when it cannot start."""
    import subprocess
    import threading
    import time
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=stdout, stderr=stderr)
    killed = threading.Event()
    timer = None
    if timeout is not None:
        def kill():
            killed.set()
            proc.kill()
        timer = threading.Timer(timeout, kill)
        timer.start()
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    finally:
        if timer is not None:
            timer.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)     # reaped here, not by Popen
    return time.perf_counter() - t, usage, proc.returncode, killed.is_set()
