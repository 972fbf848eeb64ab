"""Python face of the memctl C model: build a controller from a part, feed it trace chunks,
collect statistics and the command log."""
from __future__ import annotations

import contextlib
import csv
import dataclasses
import functools
import os
import pathlib
from typing import IO, Iterable

import numpy as np   # (imported lazily by pimrt memsim: no numpy at module level here)

from pimrt.errors import ConfigError, SimulationError, TraceError
from pimrt.memctl._native import ffi, lib
from pimrt.memctl.config import Part, load_part
from pimrt.memctl.energy import energy_pj
from pimrt.trace import records as _records

POLICIES = ("serial", "bank_partition", "authority")
COMMANDS = ("ACT", "PRE", "RD", "WR", "REF", "PIM_ENTER", "PIM_EXIT", "PIM_ACT", "PIM_RD",
            "PIM_WR", "PIM_PRE", "REFB")
BY = ("host", "pim", "ctrl")
#: the fields of CMD_DTYPE, the command log's records, as the C struct mc_cmd lays them out
CMD_FIELDS = [
    ("cycle", "<u8"), ("row", "<i4"), ("column", "<i4"), ("channel", "u1"),
    ("pseudo_channel", "u1"), ("rank", "u1"), ("bankgroup", "u1"), ("bank", "i1"),
    ("command", "u1"), ("requestor", "u1"), ("pad", "u1"),
]
CMDLOG_HEADER = "cycle,channel,pseudo_channel,rank,bankgroup,bank,row,column,command,requestor"
_FIELD = {"ro": lib.MC_F_ROW, "ra": lib.MC_F_RANK, "bg": lib.MC_F_BANKGROUP, "ba": lib.MC_F_BANK,
          "ch": lib.MC_F_CHANNEL, "pc": lib.MC_F_PCH, "co": lib.MC_F_COLUMN}
_ERRORS = {lib.MC_ERR_CONFIG: ConfigError, lib.MC_ERR_TRACE: TraceError}
assert ffi.sizeof("mc_record") == 24   # RECORD_DTYPE's itemsize (records.py checks it)
assert ffi.sizeof("mc_cmd") == 24      # CMD_DTYPE's (cmd_dtype checks it)


@functools.cache
def cmd_dtype() -> np.dtype:
    """CMD_DTYPE, made on first use (a run without a command log needs no numpy)."""
    dtype = np.dtype(CMD_FIELDS)
    assert dtype.itemsize == 24
    return dtype


def __getattr__(name: str):
    if name == "CMD_DTYPE":
        return cmd_dtype()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclasses.dataclass
class Options:
    """Run options that are not part of the memory part."""

    policy: str = "authority"
    issue_width: int = 4
    pim_banks: tuple[int, ...] | None = None   # bank_partition: bank indices in a channel
    host_high_watermark: int | None = None     # authority defaults (markers change them)
    pim_high_watermark: int | None = None
    host_low_watermark: int | None = None
    pim_low_watermark: int | None = None
    epoch_cap: int | None = None
    host_epoch_cap: int = 0                    # the host's own epochs' cap (0: epoch_cap)
    min_epoch: int = 0
    keep_completions: bool = False
    # records one cursor may read ahead of the other before it waits (back-pressure); None:
    # no limit (exact look-ahead: what is held grows with how far the streams drift apart)
    window: int | None = None


def default_pim_banks(part: Part) -> tuple[int, ...]:
    """bank_partition's default split: every other bank (the odd ones) goes to the PIM, the
    others to the host, so every unit keeps half of the banks it sits beside and every unit
    works (with one bank a unit, the units beside the host's banks idle) and both sides keep
    every bank group."""
    o = part.org
    return tuple(b for b in range(o["ranks"] * o["bankgroups"] * o["banks_per_group"])
                 if b % 2 == 1)


def make_config(part: Part, opts: Options):
    if opts.policy not in POLICIES:
        raise ConfigError(f"unknown policy {opts.policy!r}; choose one of {', '.join(POLICIES)}")
    if opts.issue_width < 1:
        raise ConfigError(f"issue width must be >= 1, got {opts.issue_width}")
    for name, lo, hi in (("issue_width", 1, 2**31 - 1), ("host_high_watermark", 0, 2**31 - 1),
                         ("pim_high_watermark", 0, 2**31 - 1), ("host_low_watermark", 0, 2**31 - 1),
                         ("pim_low_watermark", 0, 2**31 - 1), ("epoch_cap", 0, 2**60),
                         ("host_epoch_cap", 0, 2**60), ("min_epoch", 0, 2**60)):
        v = getattr(opts, name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi):
            raise ConfigError(f"{name.replace('_', ' ')} {v!r}: expected an integer in "
                              f"{lo}..{hi}")
    o, t, c = part.org, part.timing, part.controller
    cfg = ffi.new("mc_config *")
    for name in ("channels", "pseudo_channels", "ranks", "bankgroups", "banks_per_group", "rows",
                 "columns"):
        setattr(cfg, name, int(o[name]))
    cfg.request_bytes = part.request_bytes
    fields = part.address_radices(include_offset=False)
    cfg.map_count = len(fields)
    for i, (name, count) in enumerate(fields):
        cfg.map_fields[i] = _FIELD[name]
        pow2 = count & (count - 1) == 0
        cfg.map_bits[i] = count.bit_length() - 1 if pow2 else 0
        cfg.map_radix[i] = 0 if pow2 else count     # (a GPU's 40 or 48 channels)
    cfg.offset_bits = part.request_bytes.bit_length() - 1
    cfg.burst = part.burst_cycles
    for name in ("CL", "CWL", "tRCDRD", "tRCDWR", "tRP", "tRAS", "tRC", "tCCD_S", "tCCD_L",
                 "tRRD_S", "tRRD_L", "tFAW", "tWR", "tWTR_S", "tWTR_L", "tRTP", "tRTRS", "tREFI",
                 "tRFC"):
        setattr(cfg, name, int(t.get(name, 0)))
    cfg.queue_depth = int(c["queue_depth"])
    cfg.host_queue_depth = int(c.get("host_queue_depth", 0))
    cfg.bank_queue_depth = int(c.get("bank_queue_depth", 8))
    cfg.dual_command_bus = int(bool(c.get("dual_command_bus", part.standard.upper().startswith("HBM"))))
    cfg.row_hit_cap = int(c["row_hit_cap"])
    cfg.arbitration = (lib.MC_ARB_COLUMN_FIRST if c.get("arbitration") == "column_first"
                       else lib.MC_ARB_ROUND_ROBIN)
    cfg.write_high = int(c["write_high_watermark"])
    cfg.write_low = int(c["write_low_watermark"])
    cfg.closed_page = 1 if c["row_policy"] == "closed" else 0
    cfg.refresh = {"none": 0, "rank": 1, "bank": 2}[c["refresh"]]
    cfg.tRFCb = int(t.get("tRFCb", 0))
    cfg.tRREFD = int(t.get("tRREFD", 0))
    cfg.issue_width = int(opts.issue_width)
    if part.pim is not None:
        cfg.pim_enabled = 1
        cfg.pim_column_cycles = int(part.pim_scope_column_cycles(
            pim_banks(part, opts) if opts.policy == "bank_partition" else None))
        cfg.mode_switch_cycles = int(part.pim["mode_switch_cycles"])
    elif opts.policy == "bank_partition":
        raise ConfigError(f"policy bank_partition needs a part with [pim] units; {part.name} has none")
    cfg.policy = opts.policy.encode()
    if opts.policy == "bank_partition":
        cfg.pim_bank_mask = sum(1 << b for b in set(pim_banks(part, opts)))
    cfg.host_hwm = int(opts.host_high_watermark or 0)
    cfg.pim_hwm = int(opts.pim_high_watermark or 0)
    cfg.host_lwm = -1 if opts.host_low_watermark == 0 else int(opts.host_low_watermark or 0)
    cfg.pim_lwm = -1 if opts.pim_low_watermark == 0 else int(opts.pim_low_watermark or 0)
    cfg.epoch_cap = int(opts.epoch_cap or 0)
    cfg.min_epoch = int(opts.min_epoch)
    cfg.host_epoch_cap = int(opts.host_epoch_cap)
    cfg.keep_completions = 1 if opts.keep_completions else 0
    if part.power is not None:
        cfg.energy = 1
        cfg.tCK_ns = float(t["tCK"])
        for key in ("VDD", "IDD0", "IDD2N", "IDD3N", "IDD4R", "IDD4W", "IDD5AB"):
            setattr(cfg, key, float(part.power[key]))
        cfg.IDD5B = float(part.power.get("IDD5B", 0.0))
        cfg.devices_per_rank = float(part.devices_per_rank)
        if part.pim_energy is not None:
            cfg.pim_column_share = float(part.pim_energy["column_share"])
    return cfg


def pim_banks(part: Part, opts: Options) -> tuple[int, ...]:
    """bank_partition's PIM banks in a channel: opts.pim_banks, or default_pim_banks."""
    banks = opts.pim_banks if opts.pim_banks is not None else default_pim_banks(part)
    nbanks = part.org["ranks"] * part.banks_per_rank
    bad = [b for b in banks if not 0 <= b < nbanks]
    if bad:
        raise ConfigError(f"pim_banks {bad} outside the channel's {nbanks} banks")
    return tuple(banks)


class CommandLog:
    """Writes the command log as CSV (docs/memctl.md), chunk by chunk. A log given as a path
    goes through pimrt.output.atomic_open: written under a temporary name beside it and
    renamed when the run ends well (close(ok=True)), so a run that fails leaves the file that
    was there before, or none (a device or a pipe is written in place)."""

    class _Failed(Exception):
        pass

    def __init__(self, out: str | pathlib.Path | IO[str]):
        from pimrt.output import atomic_open
        self._own = not hasattr(out, "write")
        self.name = str(out) if self._own else getattr(out, "name", "command log")
        self._stack = contextlib.ExitStack()
        try:
            self.file = (self._stack.enter_context(atomic_open(out, "w", newline=""))
                         if self._own else out)
            self.file.write(CMDLOG_HEADER + "\n")
        except OSError as exc:
            self._stack.close()
            raise _write_error(self.name, exc) from None
        self.count = 0

    def write(self, cmds: np.ndarray) -> None:
        if not len(cmds):
            return
        allbank = (cmds["bank"] == -1) & (cmds["command"] != lib.MC_CMD_REF)
        rank = np.where(allbank, -1, cmds["rank"].astype(np.int64))
        bg = np.where(cmds["bankgroup"] == 0xFF, -1, cmds["bankgroup"].astype(np.int64))
        names = np.array(COMMANDS)[cmds["command"]]
        who = np.array(BY)[cmds["requestor"]]
        cols = [cmds["cycle"].astype(str), cmds["channel"].astype(str),
                cmds["pseudo_channel"].astype(str), rank.astype(str), bg.astype(str),
                cmds["bank"].astype(str), cmds["row"].astype(str), cmds["column"].astype(str),
                names, who]
        lines = cols[0]
        for col in cols[1:]:
            lines = np.char.add(np.char.add(lines, ","), col)
        try:
            self.file.write("\n".join(lines.tolist()) + "\n")
        except OSError as exc:
            raise _write_error(self.name, exc) from None
        self.count += len(cmds)

    def close(self, ok: bool = True) -> None:
        """ok: the run ended well (the log takes its name); else its temporary is removed."""
        if not self._own:
            return
        if ok:
            try:
                self._stack.close()
            except OSError as exc:
                raise _write_error(self.name, exc) from None
        else:
            try:
                self._stack.__exit__(CommandLog._Failed, CommandLog._Failed(), None)
            except Exception:   # the sentinel coming back out, or a failed unlink: the
                pass            # run's own error is the one to report


def _record_array(records, where: str) -> np.ndarray:
    """records as a contiguous RECORD_DTYPE array; a TraceError for anything else (a list of
    numbers would otherwise become records with every field set to each number)."""
    dtype = _records.RECORD_DTYPE
    if not isinstance(records, np.ndarray) or records.dtype.names != dtype.names \
            or records.ndim != 1:
        what = (f"a {records.ndim}-d array of dtype {records.dtype}"
                if isinstance(records, np.ndarray) else f"a {type(records).__name__}")
        raise TraceError(f"{where}: records must be a 1-d numpy array of RECORD_DTYPE "
                         f"(pimrt.trace.records; fields {', '.join(dtype.names)}), not {what}")
    return np.ascontiguousarray(records, dtype=dtype)


def _write_error(name: str, exc: OSError):
    from pimrt.output import OutputError
    return OutputError(f"{name}: cannot write: {exc.strerror or exc}")


class Controller:
    """One memctl controller. feed() record chunks in trace order, then finish() and stats()."""

    _fed_by_side = False      # feed_side() took the records

    def __init__(self, part: Part | str, options: Options | None = None, *,
                 cmdlog: CommandLog | None = None, cmdlog_chunk: int = 1 << 20):
        self.part = part if isinstance(part, Part) else load_part(part)
        self.options = options or Options()
        self._cfg = make_config(self.part, self.options)
        err = ffi.new("char[512]")
        sim = lib.mc_new(self._cfg, err, 512)
        if sim == ffi.NULL:
            raise ConfigError(f"{self.part.name}: {ffi.string(err).decode()}")
        self._sim = ffi.gc(sim, lib.mc_free)
        window = self.options.window
        if window is not None and not 1 <= window < 2**62:
            raise ConfigError(f"window must be a number of records >= 1, got {window}")
        lib.mc_set_window(self._sim, int(window) if window is not None else 2**62)
        self.cmdlog = cmdlog
        self._cmdbuf = None
        if cmdlog is not None:
            lib.mc_cmdlog_enable(self._sim, cmdlog_chunk)
            self._cmdbuf = np.empty(cmdlog_chunk + 64, dtype=cmd_dtype())
        self.completions: list[np.ndarray] = []
        self.mode_log: list[np.ndarray] = []
        self.finished = False

    def clone(self) -> "Controller":
        """A copy of this run as it stands (mc_clone: its state, the records it holds, its
        results so far), to feed on independently: fed the same records from here on, both
        give the same cycles. Not with a command log (one file), nor of a finished run."""
        if self.cmdlog is not None:
            raise SimulationError("clone(): a run writing a command log is not copied")
        if self.finished:
            raise SimulationError("clone() after finish(): the run is over")
        err = ffi.new("char[512]")
        sim = lib.mc_clone(self._sim, err, 512)
        if sim == ffi.NULL:
            raise SimulationError(f"clone(): {ffi.string(err).decode()}")
        copy = object.__new__(Controller)
        copy.__dict__.update(self.__dict__)
        copy._sim = ffi.gc(sim, lib.mc_free)
        copy.completions = list(self.completions)
        copy.mode_log = list(self.mode_log)
        return copy

    def _check(self, rc: int, where: str) -> None:
        if rc in (lib.MC_OK, lib.MC_PAUSED):
            return
        msg = ffi.string(lib.mc_error(self._sim)).decode()
        raise _ERRORS.get(rc, SimulationError)(f"{where}: {msg}")

    def _drain(self) -> None:
        if self._cmdbuf is not None:
            buf = self._cmdbuf
            ptr = ffi.cast("mc_cmd *", ffi.from_buffer(buf))
            while True:
                n = lib.mc_cmdlog_take(self._sim, ptr, len(buf))
                if not n:
                    break
                self.cmdlog.write(buf[:n])
        size = 1 << 14
        pc, ph, pe = ffi.new("uint64_t[]", size), ffi.new("uint32_t[]", size), \
            ffi.new("uint8_t[]", size)
        while True:
            n = lib.mc_modelog_take(self._sim, pc, ph, pe, size)
            if not n:
                break
            rec = np.zeros(n, dtype=[("cycle", "<u8"), ("channel", "<u4"), ("enter", "u1")])
            rec["cycle"] = np.frombuffer(ffi.buffer(pc, 8 * n), np.uint64)
            rec["channel"] = np.frombuffer(ffi.buffer(ph, 4 * n), np.uint32)
            rec["enter"] = np.frombuffer(ffi.buffer(pe, n), np.uint8)
            self.mode_log.append(rec)
        if self.options.keep_completions:
            idx, cyc, iss, arr = (np.empty(1 << 16, dtype=np.uint64) for _ in range(4))
            pi, pc, ps, pa = (ffi.cast("uint64_t *", ffi.from_buffer(a))
                              for a in (idx, cyc, iss, arr))
            while True:
                n = lib.mc_completions_take_arrival(self._sim, pi, pc, ps, pa, len(idx))
                if not n:
                    break
                self.completions.append(np.stack([idx[:n], cyc[:n], iss[:n], arr[:n]],
                                                 axis=1).copy())

    def _feed(self, records: np.ndarray | None, last: bool, where: str,
              side: int | None = None) -> None:
        """Feed records (None: none), to one side's stream if `side` is given, until the C
        model took them all."""
        if records is not None:
            records = _record_array(records, where)
        n = len(records) if records is not None else 0
        consumed = ffi.new("uint64_t *")
        done = 0
        while True:
            ptr = ffi.cast("mc_record *", ffi.from_buffer(records[done:])) if n > done \
                else ffi.NULL
            rc = lib.mc_feed(self._sim, ptr, n - done, int(last), consumed) if side is None \
                else lib.mc_feed_side(self._sim, side, ptr, n - done, int(last), consumed)
            done += consumed[0]
            self._drain()
            self._check(rc, where)
            if rc == lib.MC_OK and done == n:
                break

    def feed(self, records: np.ndarray, where: str = "trace", last: bool = False) -> None:
        """Offer a chunk of RECORD_DTYPE records (in trace order; last: the trace ends with
        them). The C model copies them and holds those a cursor has not passed yet: at most
        `Options.window` records beyond the lagging cursor (see held()), whatever the trace."""
        if self.finished:
            raise SimulationError("feed() after finish()")
        self._feed(records, last, where)

    def feed_side(self, side: int, records: np.ndarray | None, last: bool = False,
                  where: str = "trace") -> None:
        """Feed one side's stream instead (side HOST or PIM; not under the serial policy,
        whose one cursor reads both): its own records and copies of the markers both sides
        read (LAYER, PARAM; no BARRIER), in the order of the one stream feed() would take; last:
        the side's stream ends here. Each side holds only what its cursor has not read. Then
        feed the sides hungry() names, until both ended (mc_feed_side in memctl.h)."""
        if self.finished:
            raise SimulationError("feed_side() after finish()")
        self._feed(records, last, where, side)
        self._fed_by_side = True

    @property
    def by_side(self) -> bool:
        """Whether this run may be fed by side (a cursor per side: not the serial policy)."""
        return lib.mc_cursor_count(self._sim) == 2

    def hungry(self) -> list[int]:
        """The sides (HOST 0, PIM 1) whose cursor read every record fed to it, its stream not
        ended: the run goes on once they get more (feed_side)."""
        bits = lib.mc_hungry(self._sim)
        return [side for side in (0, 1) if bits >> side & 1]

    def feed_text(self, path, c_format: int, capacity_bytes: int | None, where: str = "trace"
                  ) -> tuple[int, int, int, int] | None:
        """Feed a whole text trace of a format of memctl's C reader (Trace.c_format) in C:
        None when every record went in, or where the reader stopped at something it does not
        take as plainly valid (offset, line, last cycle, last line; see Trace.resume, whose
        reader names what is wrong)."""
        if self.finished:
            raise SimulationError("feed_text() after finish()")
        if self.cmdlog is not None:   # (the log is drained between chunks: the Python path)
            return 0, 1, 0, 0
        pos = ffi.new("mc_text_pos *")
        rc = lib.mc_run_text(self._sim, c_format, os.fsencode(path), capacity_bytes or 0, 0,
                             pos)
        self._drain()
        self.text_reached = int(pos.offset), int(pos.line)   # where the C reader got to
        if rc == lib.MC_TEXT_STOPPED:
            return int(pos.offset), int(pos.line), int(pos.last_cycle), int(pos.last_line)
        self._check(rc, where)
        return None

    def held(self) -> dict:
        """Trace records the C model holds: now, the most so far, and its buffer's capacity."""
        held, peak, cap = (ffi.new("uint64_t *") for _ in range(3))
        lib.mc_held(self._sim, held, peak, cap)
        return {"records": int(held[0]), "peak": int(peak[0]), "capacity": int(cap[0]),
                "events": int(lib.mc_event_count(self._sim)),
                "layers": int(lib.mc_layer_count(self._sim))}

    def finish(self, where: str = "trace") -> None:
        """No more records: offer what is left, then run until every request completed."""
        if not self._fed_by_side:
            self._feed(None, True, where)
        while True:
            rc = lib.mc_finish(self._sim)
            self._drain()
            self._check(rc, "finish")
            if rc == lib.MC_OK:
                break
        self.finished = True

    def decode(self, addr: int) -> dict[str, int]:
        """The address's fields; a SimulationError for one beyond the part's capacity."""
        if isinstance(addr, bool) or not isinstance(addr, (int, np.integer)) \
                or not 0 <= addr < 2**64:
            raise SimulationError(f"decode: address {addr!r} is not an integer in 0..2^64-1")
        out = ffi.new("int64_t[]", lib.MC_F_COUNT)
        self._check(lib.mc_decode(self._sim, int(addr), out), "decode")
        return {name: int(out[code]) for name, code in _FIELD.items()}

    def stats(self, layer_names: list[str] | None = None) -> dict:
        """Statistics as a JSON-serialisable dict (docs/memctl.md, "Stats")."""
        part, tck = self.part, self.part.timing["tCK"]
        s = ffi.new("mc_summary *")
        lib.mc_get_summary(self._sim, s)
        cycles = int(s.cycles)
        seconds = cycles * tck * 1e-9
        nch = part.channel_count
        cs = ffi.new("mc_chan_stats *")
        ms = ffi.new("uint64_t *")
        per_channel = []
        totals = {who: _zero() for who in ("host", "pim")}
        for ch in range(nch):
            self._check(lib.mc_mode_switches(self._sim, ch, ms), "stats")
            entry = {"channel": ch // part.org["pseudo_channels"],
                     "pseudo_channel": ch % part.org["pseudo_channels"],
                     "mode_switches": int(ms[0])}
            for r, who in enumerate(("host", "pim")):
                self._check(lib.mc_get_chan_stats(self._sim, r, ch, cs), "stats")
                d = _chan_dict(cs, seconds)
                entry[who] = d
                for key in _SUMMED:
                    totals[who][key] += d[key]
            per_channel.append(entry)
        p = ffi.new("uint64_t *")
        requestors = {}
        for r, who in enumerate(("host", "pim")):
            t = totals[who]
            n = t["reads"] + t["writes"]
            lib.mc_latency_percentile(self._sim, r, -1, 0.99, p)
            requestors[who] = {
                **t,
                "requests": n,
                "bandwidth_gbs": t["bytes"] / seconds / 1e9 if seconds else 0.0,
                "mean_latency": t["latency_sum"] / n if n else 0.0,
                "p99_latency": int(p[0]),
                "row_hit_rate": t["row_hits"] / n if n else 0.0,
            }
        total_bytes = requestors["host"]["bytes"] + requestors["pim"]["bytes"]
        host_bytes = requestors["host"]["bytes"]
        layers = []
        start, end, nreq = ffi.new("uint64_t *"), ffi.new("uint64_t *"), ffi.new("uint64_t *")
        for i in self._ids(lib.mc_layer_count, lib.mc_layer_ids):
            lib.mc_layer_span(self._sim, i, start, end, nreq)
            # (a layer beyond the names given: an .npy trace's id without a sidecar name)
            name = (str(i) if layer_names is None else
                    layer_names[i] if i < len(layer_names) else f"layer{i}")
            layers.append({"layer": i, "name": name, "start": int(start[0]), "end": int(end[0]),
                           "requests": int(nreq[0]), **self._layer_by(i)})
        return {
            "part": part.name,
            "policy": self.options.policy,
            "issue_width": self.options.issue_width,
            "tCK_ns": tck,
            "cycles": cycles,
            "drain_cycles": int(s.drain_cycles),
            "time_ns": cycles * tck,
            "requests": int(s.requests),
            "records": int(s.records),
            "commands": int(s.commands),
            "refreshes": int(s.refreshes),
            "mode_switches": int(s.mode_switches),
            "bandwidth_gbs": total_bytes / seconds / 1e9 if seconds else 0.0,
            "host_bandwidth_gbs": host_bytes / seconds / 1e9 if seconds else 0.0,
            "peak_bandwidth_gbs": part.peak_bandwidth_gbs,
            "host_bandwidth_pct": 100.0 * host_bytes / seconds / 1e9 / part.peak_bandwidth_gbs
            if seconds else 0.0,
            "requestors": requestors,
            "channels": per_channel,
            "layers": layers,
            "energy_pj": energy_pj(self._sim, part),
        }

    def _layer_by(self, layer: int) -> dict:
        """{"host": {...}, "pim": {...}}: what the layer's requests of each side did."""
        ls = ffi.new("mc_layer_stats *")
        out = {}
        for r, who in enumerate(("host", "pim")):
            self._check(lib.mc_get_layer_stats(self._sim, layer, r, ls), "stats")
            out[who] = {k: int(getattr(ls, k)) for k in ("reads", "writes", "latency_sum",
                                                          "row_hits", "row_misses",
                                                          "row_conflicts")}
        return {"by": out}

    def mode_switches(self) -> np.ndarray:
        """Every PIM_ENTER / PIM_EXIT: structured array (cycle, channel, enter)."""
        if not self.mode_log:
            return np.zeros(0, dtype=[("cycle", "<u8"), ("channel", "<u4"), ("enter", "u1")])
        return np.concatenate(self.mode_log)

    def _ids(self, count, take) -> list[int]:
        n = int(count(self._sim))
        ids = ffi.new("uint32_t[]", n)
        n = int(take(self._sim, ids, n)) if n else 0
        return sorted(ids[0:n])

    def event_table(self) -> dict[int, tuple[int, int]]:
        """{event id: (cycle its SIGNAL was reached, cycle it fired)} for every id the trace
        used (SIGNAL or WAIT), -1 where that did not happen; sparse ids cost what they use."""
        out = {}
        reached, fired = ffi.new("uint64_t *"), ffi.new("uint64_t *")
        for i in self._ids(lib.mc_event_count, lib.mc_event_ids):
            lib.mc_event(self._sim, i, reached, fired)
            out[i] = (int(reached[0]) if reached[0] != 2**64 - 1 else -1,
                      int(fired[0]) if fired[0] != 2**64 - 1 else -1)
        return out

    def events(self) -> np.ndarray:
        """Per event id (SIGNAL records): the cycle its SIGNAL was reached and the cycle it
        fired, as an (n, 2) int64 array indexed by id (n: the largest id + 1); -1 where that
        did not happen. For traces with sparse ids, event_table()."""
        table = self.event_table()
        n = max(table) + 1 if table else 0
        out = np.full((n, 2), -1, dtype=np.int64)
        for i, pair in table.items():
            out[i] = pair
        return out

    def completion_array(self) -> np.ndarray:
        """(record index in the trace, finish cycle, column-command cycle) rows, when
        Options.keep_completions is set; the last is 2**64-1 for a read served from a queued
        write. take_completions() also gives each request's arrival cycle."""
        if not self.completions:
            return np.zeros((0, 3), dtype=np.uint64)
        return np.concatenate(self.completions)[:, :3]

    def take_completions(self) -> np.ndarray:
        """The completions drained so far, as completion_array's rows with a fourth column,
        the arrival cycle (when the front end offered the request), and forgets them."""
        out = np.concatenate(self.completions) if self.completions else \
            np.zeros((0, 4), dtype=np.uint64)
        self.completions = []
        return out


_SUMMED = ("reads", "writes", "bytes", "latency_sum", "row_hits", "row_misses", "row_conflicts",
           "cycles_idle", "cycles_blocked", "cycles_active")


def _zero() -> dict:
    return {k: 0 for k in _SUMMED}


def _chan_dict(cs, seconds: float) -> dict:
    n = cs.reads + cs.writes
    return {
        "reads": int(cs.reads), "writes": int(cs.writes), "bytes": int(cs.bytes),
        "bandwidth_gbs": cs.bytes / seconds / 1e9 if seconds else 0.0,
        "latency_sum": int(cs.latency_sum),
        "mean_latency": cs.latency_sum / n if n else 0.0,
        "p99_latency": int(cs.p99_latency), "max_latency": int(cs.latency_max),
        "row_hits": int(cs.row_hits), "row_misses": int(cs.row_misses),
        "row_conflicts": int(cs.row_conflicts),
        "cycles_idle": int(cs.cycles_idle), "cycles_blocked": int(cs.cycles_blocked),
        "cycles_active": int(cs.cycles_active),
    }


TRACE_WINDOW = 1 << 20   # run_trace's default Options.window: at most 24 MiB of records held


def run_trace(chunks: Iterable[np.ndarray], part: Part | str, options: Options | None = None, *,
              cmdlog: str | pathlib.Path | None = None, layer_names: list[str] | None = None,
              progress=None, where: str = "trace") -> dict:
    """Run a whole trace (an iterable of record chunks) and return its statistics.
    progress: an optional callable(records_in_chunk) called after each chunk. Without a
    window in the options, the cursors may drift TRACE_WINDOW records apart, so a trace of
    any length holds a bounded number of records."""
    options = options or Options()
    if options.window is None:
        options = dataclasses.replace(options, window=TRACE_WINDOW)
    log = CommandLog(cmdlog) if cmdlog is not None else None
    ok = False
    try:
        ctl = Controller(part, options, cmdlog=log)
        rest = chunks
        if getattr(chunks, "c_format", None) and log is None and progress is None:
            # a text trace memctl's C reader takes: read and fed in C, without a round trip
            # to Python a chunk; from where it stops (if it does) the Python reader goes on
            stop = ctl.feed_text(chunks.path, chunks.c_format, chunks.capacity_bytes, where)
            rest = chunks.resume(*stop) if stop is not None else ()
            if stop is None:   # (a resumed pass checks the file at its end itself)
                chunks.check_unchanged(ctl.text_reached)
        if isinstance(rest, tuple) and not rest:
            pass   # all fed (and numpy, lazy in pimrt memsim, may stay unloaded)
        else:
            getattr(np, "ndarray")   # numpy loaded here if lazy, not by two threads at once
        with _Prefetch(rest) as ahead:
            for chunk in ahead:
                ctl.feed(chunk, where)
                if progress is not None:
                    progress(len(chunk))
        ctl.finish(where)
        ok = True
    finally:
        if log is not None:
            log.close(ok)
    names = layer_names if layer_names is not None else getattr(chunks, "layer_names", None)
    return ctl.stats(names)


class _Prefetch:
    """Iterates `chunks` in a thread a few chunks ahead of the consumer: reading and parsing
    a trace (C and numpy, without the GIL) overlap the simulation (C, without the GIL). The
    chunks come in order, and an error of the reader is raised where the chunk would have
    come."""

    DEPTH = 4

    def __init__(self, chunks):
        import queue
        import threading
        self._chunks = chunks
        self._q = queue.Queue(self.DEPTH)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._produce, name="trace-reader", daemon=True)

    def _put(self, item) -> bool:
        import queue
        while not self._stop.is_set():
            try:
                self._q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _produce(self) -> None:
        try:
            for chunk in self._chunks:
                if not self._put(("chunk", chunk)):
                    return
            self._put(("end", None))
        except BaseException as exc:   # handed to the consumer, raised there
            self._put(("error", exc))

    def __enter__(self):
        self._thread.start()
        return self

    def __iter__(self):
        while True:
            kind, item = self._q.get()
            if kind == "end":
                return
            if kind == "error":
                raise item
            yield item

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def write_stats_csv(stats: dict, path: str | pathlib.Path) -> None:
    """One row per channel and requestor."""
    from pimrt.output import atomic_open
    with atomic_open(path, "w", newline="") as f:
        w = None
        for entry in stats["channels"]:
            for who in ("host", "pim"):
                row = {"channel": entry["channel"], "pseudo_channel": entry["pseudo_channel"],
                       "requestor": who, **entry[who]}
                if w is None:
                    w = csv.DictWriter(f, fieldnames=list(row))
                    w.writeheader()
                w.writerow(row)
