"""pimrt.memctl: the shared DRAM model (C, through cffi), its parts and its timing checker.

    from pimrt import memctl, trace
    part = memctl.load_part("hbm2")
    stats = memctl.run_trace(trace.open_trace("x.trace"), part, memctl.Options(policy="serial"))

The controller (and with it the compiled extension) is imported on first use, so the part
configuration and the checker work without it.
"""
from pimrt.memctl.config import Part, list_parts, load_part

_LAZY = ("POLICIES", "CommandLog", "Controller", "Options", "default_pim_banks", "run_trace",
         "write_stats_csv")


def __getattr__(name):
    if name in _LAZY:
        from pimrt.memctl import controller
        return getattr(controller, name)
    raise AttributeError(f"module 'pimrt.memctl' has no attribute {name!r}")


__all__ = ["Part", "list_parts", "load_part", *_LAZY]
