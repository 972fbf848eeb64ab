"""Robustness under hostile input (issue 25): random configurations through the Python
validation and straight through the C API, livelocks that must end, idle gaps crossed in one
step exactly as simulated, and safe output (atomic files, the --out lock, a full disk)."""
from __future__ import annotations

import errno
import io
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from pimrt.errors import ConfigError, PimrtError, SimulationError, TraceError
from pimrt.memctl import CommandLog, Controller, Options, load_part
from pimrt.memctl._native import ffi, lib
from pimrt.memctl.config import SCHEMA, encode_address
from pimrt.memctl.controller import make_config
from pimrt.trace.records import DELAY, HOST, PARAM, PARAM_IDS, PIM, READ, RECORD_DTYPE, WRITE
from pimrt import output


def _trace(part, n=40, seed=0, pim=True):
    rng = np.random.default_rng(seed)
    rec = np.zeros(n, RECORD_DTYPE)
    rec["cycle"] = np.sort(rng.integers(0, 4 * n, n))
    rec["op"] = np.where(rng.random(n) < 0.7, READ, WRITE)
    rec["requestor"] = np.where(pim & (rng.random(n) < 0.3), PIM, HOST)
    rec["addr"] = rng.integers(0, part.capacity_bytes // 64, n).astype(np.uint64) * np.uint64(64)
    return rec


def _run(part, rec, policy, log=False):
    buf = io.StringIO()
    ctl = Controller(part, Options(policy=policy), cmdlog=CommandLog(buf) if log else None)
    ctl.feed(rec)
    ctl.finish()
    return ctl.stats()


# -- random configurations ----------------------------------------------------------------------
_INTS = st.one_of(st.integers(-3, 70), st.sampled_from([0, 1, 255, 4096, 65536, 65537,
                                                        2**31 - 1, 2**31, 2**40, 2**63, -2**31]))
_KEYS = [(t, k) for t in ("organization", "timing", "controller")
         for k, (kind, _) in SCHEMA[t].items() if kind not in ("str", "bool")]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(_KEYS), _INTS), min_size=1, max_size=3),
       st.sampled_from(["serial", "authority", "bank_partition"]), st.booleans())
def test_random_part_is_refused_with_its_key_or_runs_every_request(changes, policy, refresh):
    """A mutated part either fails with a ConfigError naming the key, or runs a trace to the
    end with every request served: never an OverflowError from cffi, a hang or a crash."""
    over = {f"{t}.{k}": v for (t, k), v in changes}
    if not refresh:
        over["controller.refresh"] = "none"
    try:
        part = load_part("hbm2_pim", over)
    except ConfigError as exc:                  # names the table and key it is about
        assert re.search(r"\[(organization|timing|controller|pim)\] \w+: ", str(exc)), str(exc)
        return
    rec = _trace(part, seed=len(over))
    try:
        stats = _run(part, rec, policy)
    except (ConfigError, TraceError) as exc:   # e.g. a watermark the part's queues cannot hold
        assert str(exc)
        return
    assert stats["requests"] == len(rec)
    assert stats["requestors"]["host"]["requests"] + stats["requestors"]["pim"]["requests"] \
        == len(rec)
    assert np.isfinite(stats["bandwidth_gbs"])
    json.dumps(stats, allow_nan=False)


_C_FIELDS = ["channels", "pseudo_channels", "ranks", "bankgroups", "banks_per_group", "rows",
             "columns", "request_bytes", "offset_bits", "burst", "CL", "CWL", "tRCDRD", "tRP",
             "tRAS", "tRC", "tCCD_L", "tRRD_S", "tFAW", "tWR", "tRTRS", "tREFI", "tRFC",
             "queue_depth", "host_queue_depth", "bank_queue_depth", "row_hit_cap", "write_high",
             "write_low", "issue_width", "pim_column_cycles", "mode_switch_cycles", "host_hwm",
             "host_lwm"]
_C_INTS = st.one_of(st.integers(-2, 70), st.sampled_from([2**31 - 1, -2**31, 65536, 65537,
                                                          1 << 20, 3900, 260]))


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(_C_FIELDS + ["map_bits"]), _C_INTS,
                          st.integers(0, 6)), min_size=1, max_size=3),
       st.sampled_from([b"serial", b"authority", b"bank_partition"]))
def test_random_c_configs_are_refused_or_run(changes, policy):
    """Straight through the C API (no Python validation): mc_new refuses with a message or
    the simulator runs to the end (the C tests run the same idea under ASan/UBSan)."""
    part = load_part("hbm2_pim")
    cfg = make_config(part, Options(policy="authority"))
    cfg.policy = policy
    cfg.pim_bank_mask = 0xCCCC
    for field, value, i in changes:
        if field == "map_bits":
            cfg.map_bits[i] = value
        else:
            setattr(cfg, field, value)
    err = ffi.new("char[512]")
    sim = lib.mc_new(cfg, err, 512)
    if sim == ffi.NULL:
        assert ffi.string(err)
        return
    sim = ffi.gc(sim, lib.mc_free)
    rec = _trace(part, n=60, seed=3)
    consumed = ffi.new("uint64_t *")
    rc = lib.mc_feed(sim, ffi.cast("mc_record *", ffi.from_buffer(rec)), len(rec), 1, consumed)
    while rc == lib.MC_PAUSED:
        rc = lib.mc_feed(sim, ffi.cast("mc_record *", ffi.from_buffer(rec[consumed[0]:])),
                         len(rec) - consumed[0], 1, consumed)
    if rc == lib.MC_OK:
        rc = lib.mc_finish(sim)
    msg = ffi.string(lib.mc_error(sim)).decode()
    assert rc == lib.MC_OK or (rc == lib.MC_ERR_TRACE and "capacity" in msg), (rc, msg)
    if rc == lib.MC_OK:
        s = ffi.new("mc_summary *")
        assert lib.mc_get_summary(sim, s) == lib.MC_OK and s.requests == len(rec)


# -- livelocks -------------------------------------------------------------------------------------
def test_an_epoch_cap_shorter_than_a_request_still_serves_both():
    part = load_part("hbm2_pim")
    rec = np.zeros(2, RECORD_DTYPE)
    rec["op"] = READ
    rec["requestor"] = [HOST, PIM]
    rec["addr"] = [0, 0x100000]
    for opts in (Options(epoch_cap=4), Options(epoch_cap=1)):
        ctl = Controller(part, opts)
        ctl.feed(rec)
        ctl.finish()
        s = ctl.stats()
        assert s["requests"] == 2 and s["mode_switches"] == 1
        assert s["requestors"]["host"]["requests"] == 1 and s["requestors"]["pim"]["requests"] == 1
    marker = np.zeros(1, RECORD_DTYPE)
    marker["op"], marker["param"], marker["value"] = PARAM, PARAM_IDS["epoch_cap"], 4
    ctl = Controller(part, Options())
    ctl.feed(np.concatenate([marker, rec]))
    ctl.finish()
    assert ctl.stats()["requests"] == 2


def test_refresh_without_room_is_refused_in_python_and_in_c():
    with pytest.raises(ConfigError, match=r"96\.3% of the time; refresh may take at most 50%"):
        load_part("hbm2", {"timing.tREFI": 270})
    part = load_part("hbm2")
    cfg = make_config(part, Options())
    cfg.tREFI = 270                              # behind Python's back: C checks again
    err = ffi.new("char[512]")
    assert lib.mc_new(cfg, err, 512) == ffi.NULL
    assert "refresh takes 1 x tRFC = 260 of every tREFI = 270 cycles" in ffi.string(err).decode()


# -- idle gaps ------------------------------------------------------------------------------------
@pytest.mark.parametrize("policy", ["authority", "serial", "bank_partition"])
def test_an_idle_gap_crossed_in_one_step_equals_simulating_it(policy):
    """The command log on simulates every refresh; off, the refreshes of an idle gap are
    accounted for at once: every figure must be the same (a gap of ~60 refresh intervals,
    DELAY markers as the runtime writes them)."""
    part = load_part("hbm2_pim", {"organization.ranks": 2})
    parts = []
    for k, gap in enumerate((0, 230_000, 1_000, 77_777)):
        rec = _trace(part, n=30, seed=k)
        d = np.zeros(2, RECORD_DTYPE)
        d["op"], d["requestor"], d["value"] = DELAY, [HOST, PIM], gap
        parts += [d, rec]
    rec = np.concatenate(parts)
    simulated = _run(part, rec, policy, log=True)
    skipped = _run(part, rec, policy, log=False)
    assert simulated == skipped
    assert simulated["refreshes"] > 16 * 60


@pytest.mark.parametrize("policy", ["authority", "serial"])
def test_a_gap_with_writes_kept_in_the_write_buffer_equals_simulating_it(policy):
    """Three host writes (below the low watermark) stay in the write buffer through a DELAY of
    ~80 refresh intervals: the gap is crossed in one step all the same, with the same figures."""
    part = load_part("hbm2_pim")
    rec = np.zeros(8, RECORD_DTYPE)
    rec["op"] = [WRITE, WRITE, WRITE, DELAY, READ, WRITE, DELAY, READ]
    rec["requestor"] = HOST
    rec["value"][[3, 6]] = [310_000, 50_000]
    rec["addr"] = [0, 0x40, 0x2000, 0, 0x80, 0x4000, 0, 0x100000]
    rec["requestor"][7] = PIM
    simulated = _run(part, rec, policy, log=True)
    skipped = _run(part, rec, policy, log=False)
    assert simulated == skipped and simulated["requests"] == 6
    assert simulated["refreshes"] >= 8 * 360_000 // 3900 - 8


def test_a_gap_of_10_12_cycles_is_crossed():
    part = load_part("hbm2")
    rec = np.zeros(2, RECORD_DTYPE)
    rec["op"] = READ
    rec["cycle"] = [0, 10**12]
    rec["addr"] = [0, 64]
    s = _run(part, rec, "authority")
    assert s["cycles"] == 10**12 + 31 and s["refreshes"] == 8 * (10**12 // 3900)


def test_arrival_cycles_beyond_2_60_are_refused():
    part = load_part("hbm2")
    rec = np.zeros(2, RECORD_DTYPE)
    rec["op"] = READ
    rec["cycle"] = [0, 2**63]
    with pytest.raises(TraceError, match="record 1: arrival cycle 9223372036854775808 is beyond"):
        _run(part, rec, "authority")


def test_c_getters_check_their_arguments():
    part = load_part("hbm2_pim")
    ctl = Controller(part, Options())
    ctl.feed(_trace(part, n=10))
    ctl.finish()
    cs, v = ffi.new("mc_chan_stats *"), ffi.new("uint64_t *")
    assert lib.mc_get_chan_stats(ctl._sim, 0, part.channel_count, cs) == lib.MC_ERR_ARG
    assert lib.mc_get_chan_stats(ctl._sim, 5, 0, cs) == lib.MC_ERR_ARG
    assert lib.mc_latency_percentile(ctl._sim, 0, -2, 0.5, v) == lib.MC_ERR_ARG
    assert lib.mc_mode_switches(ctl._sim, -1, v) == lib.MC_ERR_ARG
    assert lib.mc_get_summary(ctl._sim, ffi.NULL) == lib.MC_ERR_ARG
    consumed = ffi.new("uint64_t *")
    assert lib.mc_feed(ctl._sim, ffi.NULL, 0, 1, consumed) == lib.MC_ERR_ARG   # after finish
    with pytest.raises(SimulationError, match="feed\\(\\) after finish"):
        ctl.feed(_trace(part, n=2))


def test_controller_feed_takes_record_arrays_only():
    """Issue 39: a list of numbers (or a plain integer array) used to become records with
    every field set to each number."""
    part = load_part("hbm2")
    ctl = Controller(part, Options())
    for bad, what in (([1, 2, 3], "not a list"), (np.arange(3), "not a 1-d array of dtype int64"),
                      (np.zeros((2, 2), RECORD_DTYPE), "not a 2-d array"), ("abc", "not a str")):
        with pytest.raises(TraceError, match=f"trace: records must be a 1-d numpy array of "
                                             f"RECORD_DTYPE .*{what}"):
            ctl.feed(bad)
    ctl.feed(_trace(part, n=4))
    ctl.finish()
    assert ctl.stats()["requests"] == 4


def test_decode_refuses_an_address_beyond_the_capacity():
    """Issue 39: mc_decode returned the fields of the address's low bits."""
    part = load_part("hbm2")
    ctl = Controller(part, Options())
    cap = part.capacity_bytes
    assert ctl.decode(cap - 64)["ro"] == part.org["rows"] - 1
    for addr in (cap, cap + 64, 2**64 - 1):
        with pytest.raises(SimulationError, match=f"decode: mc_decode: address {addr:#x} is "
                                                  f"beyond the capacity \\({cap:#x} bytes\\)"):
            ctl.decode(addr)
    for addr in (-1, 2**64, 1.5, True):
        with pytest.raises(SimulationError, match="is not an integer in 0..2\\^64-1"):
            ctl.decode(addr)


def test_records_after_the_last_ones_are_refused_not_a_hang():
    """Issue 39: a second mc_feed with last set before mc_finish spun for ever in the refresh
    steps (the cursors had stopped at the end of the records)."""
    part = load_part("hbm2_pim")
    for policy in ("serial", "authority"):
        ctl = Controller(part, Options(policy=policy))
        rec = _trace(part, n=6)
        recs = ffi.cast("mc_record *", ffi.from_buffer(rec))
        consumed = ffi.new("uint64_t *")
        assert lib.mc_feed(ctl._sim, recs, 3, 1, consumed) == lib.MC_OK and consumed[0] == 3
        assert lib.mc_feed(ctl._sim, recs + 3, 3, 1, consumed) == lib.MC_ERR_ARG
        assert consumed[0] == 0
        assert "3 records offered after the last records" in ffi.string(
            lib.mc_error(ctl._sim)).decode()
        assert lib.mc_finish(ctl._sim) == lib.MC_OK
        s = ffi.new("mc_summary *")
        lib.mc_get_summary(ctl._sim, s)
        assert s.requests == 3


# -- output ---------------------------------------------------------------------------------------
def test_atomic_write_keeps_the_old_file_when_writing_fails(tmp_path, monkeypatch):
    f = tmp_path / "summary.json"
    output.atomic_write_text(f, "old")
    with pytest.raises(RuntimeError):
        with output.atomic_open(f) as h:
            h.write("half of the new")
            raise RuntimeError("interrupted")
    assert f.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]   # no temporary left

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(output.OutputError, match="summary.json: cannot write: No space left"):
        output.atomic_write_text(f, "new " * 1000)
    assert f.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]


def test_a_device_is_written_in_place_never_replaced(tmp_path):
    import stat
    output.atomic_write_text("/dev/null", "x" * 100)      # (root could replace the node)
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    with pytest.raises(output.OutputError, match="/dev/full: cannot write: No space left"):
        output.atomic_write_text("/dev/full", "x" * 100)
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)
    target = tmp_path / "target.json"
    target.write_text("old")
    (tmp_path / "link.json").symlink_to(target)
    output.atomic_write_text(tmp_path / "link.json", "new")  # the link stays a link
    assert (tmp_path / "link.json").is_symlink() and target.read_text() == "new"


def test_out_checks(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(output.OutputError, match="is a file; give a folder"):
        output.check_out_dir(tmp_path / "f")
    with pytest.raises(output.OutputError, match="cannot create the folder"):
        output.check_out_dir(tmp_path / "f" / "sub", create=False)
    assert not (tmp_path / "new").exists()
    output.check_out_dir(tmp_path / "new", create=False)            # only checked
    assert not (tmp_path / "new").exists()
    assert output.check_out_dir(tmp_path / "new").is_dir()
    with pytest.raises(output.OutputError, match="--stats .*: is a folder"):
        output.check_out_file(tmp_path, "--stats")
    if os.geteuid() != 0:                                          # root writes anywhere
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o555)
        with pytest.raises(output.OutputError, match="permission denied|Permission denied"):
            output.check_out_dir(ro / "x", create=False)


def test_the_out_lock_refuses_a_running_run_and_takes_over_a_dead_ones(tmp_path):
    out = output.check_out_dir(tmp_path / "out")
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (out / output.LOCK_NAME).write_text(f"{alive.pid}\n")
        with pytest.raises(output.OutputError, match=f"in use by a running pimrt \\(pid "
                                                     f"{alive.pid}"):
            output.lock_out_dir(out)
    finally:
        alive.kill()
        alive.wait()
    (out / output.LOCK_NAME).write_text(f"{alive.pid}\n")           # its run died
    lock = output.lock_out_dir(out)
    assert (out / output.LOCK_NAME).read_text().strip() == str(os.getpid())
    lock.release()
    assert not (out / output.LOCK_NAME).exists()


def test_incomplete_folders_are_named(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        with output.writing(tmp_path / "m" / "authority"):
            raise KeyboardInterrupt
    with output.writing(tmp_path / "m" / "serial"):
        pass
    assert output.incomplete_folders(tmp_path) == [tmp_path / "m" / "authority"]
