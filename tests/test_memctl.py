"""memctl: the C model through its Python API. Properties with hypothesis over random small
traces, every policy and part; analytical bounds; bad input."""
import io
import subprocess
import pathlib

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from pimrt.errors import ConfigError, TraceError
from pimrt.memctl import CommandLog, Controller, Options, default_pim_banks, load_part, run_trace
from pimrt.memctl.checker import check_command_log
from pimrt.memctl.config import decode_address
from pimrt.trace import synthetic
from pimrt.trace.records import (BARRIER, DELAY, HOST, LAYER, PARAM, PARAM_IDS, PIM, READ,
                                 RECORD_DTYPE, SIGNAL, WAIT, WRITE)

ROOT = pathlib.Path(__file__).resolve().parent.parent
POLICIES = ("serial", "bank_partition", "authority")


def simulate(part, records, policy="authority", width=4, chunk=97, log=True, **kw):
    """Run records in odd-sized chunks; returns (controller, command log text)."""
    buf = io.StringIO()
    cmdlog = CommandLog(buf) if log else None
    ctl = Controller(part, Options(policy=policy, issue_width=width, keep_completions=True, **kw),
                     cmdlog=cmdlog, cmdlog_chunk=1000)
    for lo in range(0, len(records), chunk):
        ctl.feed(records[lo:lo + chunk])
    ctl.finish()
    return ctl, buf.getvalue()


@st.composite
def traces(draw, pim=True, max_n=300):
    n = draw(st.integers(1, max_n))
    part = load_part("hbm2_pim")
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    addrs = draw(st.sampled_from([16, 256, 1 << 14, 1 << 20]))  # small sets: conflicts, RAW
    rec = np.zeros(n, RECORD_DTYPE)
    rec["addr"] = rng.integers(0, addrs, n).astype(np.uint64) * 64 % np.uint64(part.capacity_bytes)
    rec["op"] = rng.random(n) < draw(st.sampled_from([0.0, 0.3, 0.7]))
    if pim:
        rec["requestor"] = (rng.random(n) < draw(st.sampled_from([0.0, 0.3, 0.8]))).astype(np.uint8)
    rec["cycle"] = np.sort(rng.integers(0, draw(st.sampled_from([1, 50, 5000])), n)).astype(np.uint64)
    # sprinkle markers
    k = draw(st.integers(0, 4))
    for j in sorted(rng.integers(0, n, k).tolist(), reverse=True):
        m = np.zeros(1, RECORD_DTYPE)
        kind = rng.integers(0, 3)
        if kind == 0:
            m["op"], m["value"] = LAYER, rng.integers(0, 5)
        elif kind == 1:
            m["op"], m["param"], m["value"] = PARAM, PARAM_IDS["epoch_cap"], rng.integers(50, 3000)
        else:
            m["op"] = BARRIER
        m["cycle"] = rec["cycle"][j]
        rec = np.concatenate([rec[:j], m, rec[j:]])
    return rec


def request_indices(rec):
    return np.flatnonzero(rec["op"] <= WRITE)


@settings(max_examples=25)
@given(rec=traces(), policy=st.sampled_from(POLICIES), width=st.sampled_from([1, 4]))
def test_every_request_completes_once_and_timing_holds(rec, policy, width):
    part = load_part("hbm2_pim")
    ctl, log = simulate(part, rec, policy, width)
    comp = ctl.completion_array()
    assert sorted(comp[:, 0].tolist()) == request_indices(rec).tolist()
    s = ctl.stats()
    assert s["requests"] == len(request_indices(rec))
    banks = default_pim_banks(part) if policy == "bank_partition" else None
    violations = check_command_log(log, part, policy=policy, pim_banks=banks)
    assert violations == [], violations[:3]


@settings(max_examples=15)
@given(rec=traces(pim=False), part=st.sampled_from(["hbm2", "ddr4"]))
def test_host_only_parts_keep_timing(rec, part):
    p = load_part(part)
    rec["addr"] %= np.uint64(p.capacity_bytes)
    ctl, log = simulate(p, rec, "authority", 4)
    assert len(ctl.completion_array()) == len(request_indices(rec))
    assert check_command_log(log, p) == []


@settings(max_examples=20)
@given(seed=st.integers(0, 10**6), policy=st.sampled_from(["serial", "authority"]))
def test_read_after_write_and_write_after_read_order(seed, policy):
    """Few addresses, many reads and writes: at each address the DRAM sees the commands in
    trace order (a read after a queued write is served from it)."""
    part = load_part("hbm2")
    rng = np.random.default_rng(seed)
    n = 400
    rec = np.zeros(n, RECORD_DTYPE)
    rec["addr"] = rng.integers(0, 8, n).astype(np.uint64) * 64
    rec["op"] = rng.random(n) < 0.5
    ctl, log = simulate(part, rec, policy, 4)
    comp = ctl.completion_array()
    issue = dict(zip(comp[:, 0].tolist(), comp[:, 2].tolist()))
    cmds = [line.split(",") for line in log.splitlines()[1:]]
    forwarded = 0
    for a in range(8):  # address 64 a: channel 0, bank 0, row 0, column a
        issued = {int(c[0]) for c in cmds if c[8] in ("RD", "WR") and c[7] == str(a)}
        last_write, last_read = -1, -1
        for i in np.flatnonzero(rec["addr"] == a * 64).tolist():
            t = issue[i]
            if t == 2**64 - 1:  # a read served from a queued write
                assert rec["op"][i] == READ and last_write >= 0
                forwarded += 1
                continue
            assert t in issued
            if rec["op"][i] == WRITE:
                assert t > last_read  # write after read
                last_write = max(last_write, t)
            else:
                assert t > last_write  # read after write
                last_read = max(last_read, t)
    assert forwarded > 0


def test_authority_never_shares_a_channel_and_waits_are_bounded():
    part = load_part("hbm2_pim")
    cap = 600
    rec = np.concatenate(list(synthetic.host_pim_interleave(20000, part=part, layers=2,
                                                            pim_fraction=0.5, pim_write_every=4)))
    ctl, log = simulate(part, rec, "authority", 4, chunk=4096, epoch_cap=cap)
    assert check_command_log(log, part, policy="authority") == []
    # epochs: from each PIM_ENTER / PIM_EXIT to the next on that channel
    switch = part.pim["mode_switch_cycles"]
    last = {}
    longest = 0
    for line in log.splitlines()[1:]:
        c = line.split(",")
        if c[8] in ("PIM_ENTER", "PIM_EXIT"):
            ch, t = int(c[1]), int(c[0])
            if ch in last:
                longest = max(longest, t - last[ch])
            last[ch] = t
    assert ctl.stats()["mode_switches"] > 10
    # cap + switch latency + finishing the request under way (row cycle, refresh)
    bound = cap + switch + part.timing["tRC"] + part.timing["tRFC"] + 100
    assert 0 < longest <= bound, (longest, bound)


def test_the_host_epoch_cap_bounds_the_hosts_epochs_and_epoch_cap_the_pims():
    """host_epoch_cap (Options, or a PARAM record) caps the host's own epochs; epoch_cap
    still caps the PIM's: each side's longest epoch from the command log, as above."""
    part = load_part("hbm2_pim")
    cap, host_cap = 300, 3000
    rec = np.concatenate(list(synthetic.host_pim_interleave(20000, part=part, layers=2,
                                                            pim_fraction=0.5, pim_write_every=4)))
    switch = part.pim["mode_switch_cycles"]
    slack = switch + part.timing["tRC"] + part.timing["tRFC"] + 100
    longest = {}
    for how in ("options", "param"):
        if how == "options":
            ctl, log = simulate(part, rec, "authority", 4, chunk=4096, epoch_cap=cap,
                                host_epoch_cap=host_cap)
        else:
            head = np.zeros(1, rec.dtype)
            head["op"], head["param"], head["value"] = PARAM, PARAM_IDS["host_epoch_cap"], host_cap
            ctl, log = simulate(part, np.concatenate([head, rec]), "authority", 4, chunk=4096,
                                epoch_cap=cap)
        assert check_command_log(log, part, policy="authority") == []
        pim, host, last = 0, 0, {}
        for line in log.splitlines()[1:]:
            c = line.split(",")
            if c[8] in ("PIM_ENTER", "PIM_EXIT"):
                ch, t = int(c[1]), int(c[0])
                if ch in last:      # an epoch of the side the switch ends
                    if c[8] == "PIM_EXIT":
                        pim = max(pim, t - last[ch])
                    else:
                        host = max(host, t - last[ch])
                last[ch] = t
        longest[how] = (host, pim)
        assert 0 < pim <= cap + slack, (how, pim)
        assert cap + slack < host <= host_cap + slack, (how, host)
    assert longest["options"] == longest["param"]


def test_bank_partition_confines_each_side():
    part = load_part("hbm2_pim")
    rec = np.concatenate(list(synthetic.host_pim_interleave(5000, part=part, pim_fraction=0.4)))
    rec = np.concatenate([rec, np.concatenate(list(synthetic.random(3000, capacity=1 << 30)))])
    ctl, log = simulate(part, rec, "bank_partition", 4, chunk=2048)
    pim_banks = set(default_pim_banks(part))
    bpr = part.banks_per_rank
    for line in log.splitlines()[1:]:
        c = line.split(",")
        if c[8] in ("ACT", "RD", "WR") and c[9] == "host":
            b = int(c[3]) * bpr + int(c[4]) * part.org["banks_per_group"] + int(c[5])
            assert b not in pim_banks, line
        assert c[8] not in ("PIM_ENTER", "PIM_EXIT")
    assert check_command_log(log, part, policy="bank_partition", pim_banks=sorted(pim_banks)) == []


def test_deterministic():
    part = load_part("hbm2_pim")
    rec = np.concatenate(list(synthetic.host_pim_interleave(8000, part=part, pim_fraction=0.3)))
    a, la = simulate(part, rec, "authority", 4, chunk=1000)
    b, lb = simulate(part, rec, "authority", 4, chunk=333)
    assert a.stats() == b.stats()
    assert la == lb


@pytest.mark.parametrize("cap", [1, 16])
@pytest.mark.parametrize("policy,width", [("serial", 1), ("serial", 4), ("authority", 1)])
def test_writes_below_the_low_watermark_drain_at_the_end_without_refresh(cap, policy, width):
    """A channel holding one write (below the low watermark) sleeps; it drains once no records
    can come. The last chunk (finish() feeds it with last=True, no records left) must wake it:
    without refresh nothing else would, and finish() failed with "requests can never be
    served" (regression)."""
    part = load_part("hbm2", {"controller.row_hit_cap": cap, "controller.refresh": "none"})
    rec = np.zeros(3, RECORD_DTYPE)
    rec["addr"] = [0x0, 0x800, 0x1000]  # channels 0, 1, 2
    rec["op"] = [WRITE, READ, READ]
    rec["cycle"] = [0, 1, 2]  # the write's channel steps (and sleeps) before the trace ends
    ctl, log = simulate(part, rec, policy, width)
    comp = ctl.completion_array()
    assert sorted(comp[:, 0].tolist()) == [0, 1, 2]
    assert check_command_log(log, part, policy=policy) == []


def test_stream_reaches_90_percent_of_peak():
    part = load_part("hbm2")
    s = run_trace(synthetic.stream(200_000), part, Options(policy="serial", issue_width=4))
    assert s["host_bandwidth_gbs"] >= 0.9 * part.peak_bandwidth_gbs
    assert s["requestors"]["host"]["row_hit_rate"] == pytest.approx(31 / 32, abs=0.002)


@pytest.mark.parametrize("name", ["hbm2", "ddr4"])
def test_random_reads_land_on_the_activation_bound(name):
    """Random reads need one ACT each: the rate is bounded by tRC per bank, tRRD_S and tFAW
    per rank. Without refresh, the run takes at least that bound and little more."""
    part = load_part(name, {"controller.refresh": "none", "controller.queue_depth": 64,
                            "controller.write_high_watermark": 64})
    o, t = part.org, part.timing
    n = 40_000
    ranks = part.channel_count * o["ranks"]
    per_rank = min(4 / t["tFAW"], 1 / t["tRRD_S"], part.banks_per_rank / t["tRC"])
    bound = n / (ranks * per_rank)
    s = run_trace(synthetic.random(n, capacity=part.capacity_bytes), part,
                  Options(policy="serial", issue_width=8))
    assert bound <= s["cycles"] <= 1.15 * bound, (s["cycles"], bound)


@pytest.mark.parametrize("name, org", [("hbm2", {}), ("ddr4", {}), ("hbm2_pim", {}),
                                       ("hbm2", {"channels": 40}),
                                       ("hbm2", {"channels": 6, "pseudo_channels": 2})])
def test_python_and_c_decode_addresses_alike(name, org):
    part = load_part(name, {"organization": org})
    ctl = Controller(part, Options(policy="serial"))
    addrs = np.random.default_rng(1).integers(0, part.capacity_bytes, 200, dtype=np.uint64)
    py = decode_address(part, addrs)
    for i, a in enumerate(addrs.tolist()):
        c = ctl.decode(a)
        assert c["ro"] == py["row"][i] and c["co"] == py["column"][i]
        assert c["ba"] == py["bank"][i] and c["bg"] == py["bankgroup"][i]
        assert c["ch"] * part.org["pseudo_channels"] + c["pc"] == \
            py["channel"][i] * part.org["pseudo_channels"] + py["pseudo_channel"][i]


def test_layer_spans_and_stats_shape():
    part = load_part("hbm2_pim")
    trace = synthetic.host_pim_interleave(4000, part=part, layers=3)
    s = run_trace(trace, part, Options(policy="authority"))
    assert [x["name"] for x in s["layers"]] == ["layer0", "layer1", "layer2"]
    assert sum(x["requests"] for x in s["layers"]) == 4000
    assert all(x["start"] <= x["end"] for x in s["layers"])
    host = s["requestors"]["host"]
    assert host["requests"] == host["row_hits"] + host["row_misses"] + host["row_conflicts"]
    assert len(s["channels"]) == part.channel_count
    for key in ("bandwidth_gbs", "mean_latency", "p99_latency", "cycles_idle", "cycles_blocked"):
        assert key in host


def _stream_marker(op, requestor, value):
    m = np.zeros(1, RECORD_DTYPE)
    m["op"], m["requestor"], m["value"] = op, requestor, value
    return m


def test_delay_signal_wait_order_the_streams():
    """The host computes (DELAY) then writes; the PIM waits for those writes (SIGNAL/WAIT),
    reads them, and the host waits for the PIM in turn."""
    part = load_part("hbm2_pim")
    host = np.zeros(64, RECORD_DTYPE)
    host["addr"] = np.arange(64, dtype=np.uint64) * 64
    host["op"] = WRITE
    pim = np.zeros(16, RECORD_DTYPE)
    pim["requestor"] = PIM
    pim["addr"] = np.uint64(part.capacity_bytes // 2) + np.arange(16, dtype=np.uint64) * 64
    rec = np.concatenate([_stream_marker(DELAY, HOST, 500), host, _stream_marker(SIGNAL, HOST, 0),
                          _stream_marker(WAIT, PIM, 0), pim, _stream_marker(SIGNAL, PIM, 1),
                          _stream_marker(WAIT, HOST, 1), host[:4]])
    ctl, log = simulate(part, rec, "authority", 4, chunk=50)
    ev = ctl.events()
    comp = ctl.completion_array()
    done = dict(zip(comp[:, 0].tolist(), comp[:, 2].tolist()))  # record -> command cycle
    finish = dict(zip(comp[:, 0].tolist(), comp[:, 1].tolist()))  # record -> completion
    first_host = [done[i] for i in range(1, 65)]
    assert min(first_host) >= 500                        # after the compute delay
    assert ev[0, 1] == max(finish[i] for i in range(1, 65))  # fires when the writes completed
    pim_cmds = [done[i] for i in range(67, 83)]
    assert min(pim_cmds) >= ev[0, 1]                     # the PIM waited for it
    assert ev[1, 1] == max(finish[i] for i in range(67, 83))
    assert min(done[i] for i in range(85, 89)) >= ev[1, 1]
    assert check_command_log(log, part, policy="authority") == []


def test_wait_for_an_event_nobody_signals():
    rec = np.concatenate([np.zeros(2, RECORD_DTYPE), _stream_marker(WAIT, HOST, 5),
                          np.zeros(1, RECORD_DTYPE)])
    with pytest.raises(TraceError, match="record 2: WAIT for event 5"):
        run_trace([rec], "hbm2")


# ---- bad input -------------------------------------------------------------------------

def test_address_beyond_capacity_names_the_request():
    part = load_part("hbm2")
    rec = np.zeros(3, RECORD_DTYPE)
    rec["addr"][2] = part.capacity_bytes
    with pytest.raises(TraceError, match="record 2.*capacity"):
        run_trace([rec], part)


def test_pim_request_on_a_part_without_pim():
    rec = np.zeros(1, RECORD_DTYPE)
    rec["requestor"] = PIM
    with pytest.raises(TraceError, match="PIM"):
        run_trace([rec], "hbm2")


def test_bad_op_and_requestor():
    rec = np.zeros(1, RECORD_DTYPE)
    rec["op"] = 9
    with pytest.raises(TraceError, match="op"):
        run_trace([rec], "hbm2")
    rec["op"], rec["requestor"] = READ, 7
    with pytest.raises(TraceError, match="requestor"):
        run_trace([rec], "hbm2_pim")


def test_bad_policy_and_options():
    with pytest.raises(ConfigError, match="policy"):
        Controller("hbm2", Options(policy="fair"))
    with pytest.raises(ConfigError, match="bank_partition"):
        Controller("hbm2", Options(policy="bank_partition"))
    with pytest.raises(ConfigError, match="issue width"):
        Controller("hbm2", Options(issue_width=0))
    with pytest.raises(ConfigError, match="pim_banks"):
        Controller("hbm2_pim", Options(policy="bank_partition", pim_banks=(99,)))
    with pytest.raises(ConfigError, match="leave banks"):
        Controller("hbm2_pim", Options(policy="bank_partition", pim_banks=tuple(range(16))))


def test_c_unit_tests():
    """memctl's own C tests (make check); CI also runs them under ASan and UBSan."""
    out = subprocess.run(["make", "-s", "-C", str(ROOT / "memctl"), "check"], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert " 0 failed" in out.stdout


def test_host_queue_depth_lets_the_host_run_ahead_of_a_pim_epoch():
    """A deeper host queue (host_queue_depth) accepts more of the host's requests while the
    PIM holds the channel; every request still completes once and the timing holds."""
    rng = np.random.default_rng(7)
    n = 3000
    recs = np.zeros(2 * n, RECORD_DTYPE)
    recs["requestor"][:n] = PIM                      # a PIM burst, then the host's requests
    recs["requestor"][n:] = HOST
    recs["op"] = READ
    out = {}
    for depth in (32, 256):
        part = load_part("hbm2_pim", {"controller.refresh": "none",
                                      "controller.host_queue_depth": depth})
        assert part.controller["host_queue_depth"] == depth
        recs["addr"] = rng.integers(0, part.capacity_bytes // 64, 2 * n, dtype=np.uint64) * 64
        ctl, log = simulate(part, recs, "authority", 4, chunk=4096, epoch_cap=4000)
        comp = ctl.completion_array()
        assert sorted(comp[:, 0].tolist()) == list(range(2 * n))
        assert check_command_log(log, part, policy="authority") == []
        out[depth] = ctl.stats()
    # accepted earlier (their latency counts from acceptance, so it grows) and done no later
    host = {d: s["requestors"]["host"] for d, s in out.items()}
    assert host[256]["mean_latency"] > 2 * host[32]["mean_latency"]
    assert out[256]["cycles"] <= out[32]["cycles"]


# ---- bounded memory: the records held, sparse marker ids (issue 24) ----------------------

def _host_reads(n, start=0):
    rec = np.zeros(n, RECORD_DTYPE)
    rec["addr"] = (np.arange(start, start + n, dtype=np.uint64) * np.uint64(2654435761)
                   % np.uint64(1 << 22)) * np.uint64(64)
    rec["op"][::5] = WRITE
    return rec


def _run_held(part, rec, policy, window, chunk=4096):
    ctl = Controller(part, Options(policy=policy, window=window))
    peak = 0
    for lo in range(0, len(rec), chunk):
        ctl.feed(rec[lo:lo + chunk])
        peak = max(peak, ctl.held()["records"])
    ctl.finish()
    return ctl, peak


def _mixes(part):
    """Traces of about 200k records whose requestors drift apart: the PIM silent, the PIM
    ending early, stream markers on the host's side only."""
    n = 200_000
    silent = _host_reads(n)
    pim = np.zeros(500, RECORD_DTYPE)
    pim["requestor"] = PIM
    pim["addr"] = np.uint64(part.capacity_bytes // 2) + np.arange(500, dtype=np.uint64) * 64
    early = np.concatenate([pim, _host_reads(n)])
    parts = []
    for i in range(0, n, 10_000):
        parts += [_stream_marker(DELAY, HOST, 300), _host_reads(10_000, i),
                  _stream_marker(SIGNAL, HOST, i), _stream_marker(WAIT, HOST, i)]
    markers = np.concatenate(parts)
    return {"silent": silent, "ends early": early, "host markers": markers}


@pytest.mark.parametrize("policy", POLICIES)
def test_what_is_held_stays_bounded_whatever_the_mix_of_requestors(policy):
    """Many chunks of a 200k-record trace with one requestor silent (or ending early, or
    markers on one side only): the controller holds at most `window` records beyond the
    lagging cursor (the leading one waits for it) in a buffer of the next power of two. With
    a window of 20,000 the cycles equal a run whose window never binds; with one of 1,000 the
    PIM's early requests hold the host back (back-pressure), but every request completes."""
    part = load_part("hbm2_pim")
    for name, rec in _mixes(part).items():
        big, _ = _run_held(part, rec, policy, window=None)
        for window, cap in ((20_000, 32_768), (1000, 1024)):
            small, peak = _run_held(part, rec, policy, window=window)
            held = small.held()
            assert peak <= window and held["peak"] <= window, (name, window, peak, held)
            assert held["capacity"] <= cap, (name, held)
            assert small.stats()["requests"] == np.count_nonzero(rec["op"] <= WRITE)
            if window == 20_000 or name != "ends early":
                assert small.stats()["cycles"] == big.stats()["cycles"], (name, window)
                assert np.array_equal(small.events(), big.events()), name
        if policy != "serial":                         # two cursors: without back-pressure
            assert big.held()["peak"] > 150_000, name  # it would hold nearly everything


def test_a_wait_for_a_signal_beyond_the_window_reads_on():
    """The host waits for an event the PIM signals after 20,000 host records: only the PIM's
    cursor can reach the SIGNAL, so it reads past the window instead of waiting for the host
    (which would never move); the run equals one with a window that never binds."""
    part = load_part("hbm2_pim")
    pim = np.zeros(100, RECORD_DTYPE)
    pim["requestor"] = PIM
    pim["addr"] = np.uint64(part.capacity_bytes // 2) + np.arange(100, dtype=np.uint64) * 64
    rec = np.concatenate([_stream_marker(WAIT, HOST, 7), _host_reads(20_000), pim,
                          _stream_marker(SIGNAL, PIM, 7), _host_reads(1000)])
    small, _ = _run_held(part, rec, "authority", window=1000, chunk=3000)
    big, _ = _run_held(part, rec, "authority", window=None, chunk=3000)
    assert small.held()["peak"] > 1000
    assert small.stats()["cycles"] == big.stats()["cycles"]
    ev = small.event_table()
    assert ev[7] == tuple(big.events()[7]) and ev[7][1] > 0


def test_sparse_marker_ids_cost_what_they_use():
    """Event and layer ids of 10^8: one entry each, not 10^8 (the controller keeps ids in a
    map); the spans and events come back under their ids."""
    part = load_part("hbm2_pim")
    big = 100_000_000
    layer = np.zeros(1, RECORD_DTYPE)
    layer["op"], layer["value"] = LAYER, big
    rec = np.concatenate([layer, _host_reads(100), _stream_marker(SIGNAL, HOST, big),
                          _stream_marker(WAIT, PIM, big), _stream_marker(SIGNAL, PIM, 3)])
    ctl = Controller(part, Options(policy="authority"))
    ctl.feed(rec)
    ctl.finish()
    held = ctl.held()
    assert held["events"] == 2 and held["layers"] == 1
    table = ctl.event_table()
    assert sorted(table) == [3, big]
    reached, fired = table[big]
    assert 0 <= reached <= fired <= table[3][1]
    stats = ctl.stats()
    assert [(x["layer"], x["requests"]) for x in stats["layers"]] == [(big, 100)]
    assert stats["layers"][0]["end"] == fired


def test_memsim_signal_id_of_a_hundred_million(tmp_path):
    """`@signal host 100000000` in a three-line trace: a small process (the events were kept
    densely up to their id: 4.7 GB)."""
    import sys
    trace = tmp_path / "sparse.trace"
    trace.write_text("0 host R 0x0\n@signal host 100000000\n0 host W 0x40\n")
    # the child's own peak: VmHWM of its image after exec (ru_maxrss would carry over exec the
    # peak of the forked copy of this pytest process, over 1 GB late in a full run)
    code = ("import sys\nfrom pimrt.cli import main\n"
            f"rc = main(['memsim', {str(trace)!r}, '--quiet', '--config', 'hbm2'])\n"
            "hwm = open('/proc/self/status').read().split('VmHWM:')[1].split()[0]\n"
            "print('VmHWM', hwm, file=sys.stderr)\nsys.exit(rc)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "2 requests" in proc.stdout
    hwm = int(proc.stderr.split("VmHWM")[1].split()[0])
    assert hwm < 1_000_000                             # KiB: < 1 GB


def test_a_failed_run_leaves_the_command_log_that_was_there(tmp_path):
    """The command log is written under a temporary name and renamed at the end: a run that
    fails (here an idle gap too long to log) leaves the earlier log whole, and no temporary."""
    import subprocess
    import sys
    log = tmp_path / "log.csv"
    log.write_text("the earlier log\n")
    far = tmp_path / "far.trace"
    far.write_text("0 host R 0x0\n1000000000000 host R 0x40\n")
    r = subprocess.run([sys.executable, "-m", "pimrt", "memsim", str(far), "--quiet",
                        "--cmdlog", str(log)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "with the command log on" in r.stderr
    assert log.read_text() == "the earlier log\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["far.trace", "log.csv"]
