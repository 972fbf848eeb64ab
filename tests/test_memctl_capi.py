"""memctl's C API under hostile calls (issue 25): configurations drawn from the shipped parts
with hostile values put in (organisation, timing, map bits, policies, watermarks, energy),
random request streams fed in random chunks, and every entry point called, the getters with
bad indices and NULL pointers, mc_feed after mc_finish, a NULL simulator. Every call must
return a documented code; nothing may crash, hang or read or write out of bounds.

`make -C memctl sanitize` (CI) runs this file on a build of the extension with AddressSanitizer
and UBSan, libasan preloaded: PIMRT_MEMCTL_CAPI names that module and
PIMRT_MEMCTL_CAPI_EXAMPLES how many examples to draw; any sanitizer report ends the process
and fails the run. The ordinary suite runs it on pimrt's own extension, with fewer examples.
"""
from __future__ import annotations

import importlib
import math
import os

from hypothesis import HealthCheck, event, given, settings, strategies as st

from pimrt.memctl.config import load_part
from pimrt.memctl.controller import Options, make_config

if os.environ.get("PIMRT_MEMCTL_CAPI"):
    _mod = importlib.import_module(os.environ["PIMRT_MEMCTL_CAPI"])
    ffi, lib = _mod.ffi, _mod.lib
else:
    from pimrt.memctl._native import ffi, lib
EXAMPLES = int(os.environ.get("PIMRT_MEMCTL_CAPI_EXAMPLES", "30"))

CODES = {lib.MC_OK, lib.MC_ERR_CONFIG, lib.MC_ERR_TRACE, lib.MC_ERR_STATE, lib.MC_ERR_MEMORY,
         lib.MC_PAUSED, lib.MC_ERR_ARG, lib.MC_ERR_STUCK}
ERRORS = CODES - {lib.MC_OK, lib.MC_PAUSED}
CONFIG = ffi.typeof("mc_config")


def _base_configs() -> list[bytes]:
    """mc_config bytes of the shipped parts under each policy (as pimrt makes them)."""
    from pimrt.memctl._native import ffi as own_ffi
    out = []
    for name in ("hbm2", "ddr4_3200", "hbm2_pim", "v100_hbm2_pim"):
        part = load_part(name)
        for policy in ("serial", "bank_partition", "authority"):
            if policy == "bank_partition" and part.pim is None:
                continue
            cfg = make_config(part, Options(policy=policy, issue_width=4,
                                            keep_completions=policy == "serial"))
            out.append(bytes(own_ffi.buffer(cfg)))
    return out


BASES = _base_configs()
assert all(len(b) == ffi.sizeof(CONFIG) for b in BASES)

INT32 = st.one_of(st.sampled_from([-2**31, -1, 0, 1, 2, 3, 4, 7, 8, 31, 32, 63, 64, 65535,
                                   65536, 65537, 2**20, 2**30, 2**31 - 1]),
                  st.integers(-8, 300))
INT64 = st.one_of(INT32, st.sampled_from([2**40, 2**60, 2**62, 2**63 - 1, -2**63]))
UINT64 = st.one_of(st.sampled_from([0, 1, 2**63, 2**64 - 1]), st.integers(0, 2**64 - 1))
DOUBLE = st.one_of(st.sampled_from([math.nan, math.inf, -math.inf, 0.0, -1.0, 1e-300, 1e300,
                                    5e-324]), st.floats(0.01, 1000.0))
POLICY = st.one_of(st.sampled_from([b"serial", b"bank_partition", b"authority", b"", b"x" * 31,
                                    b"Serial"]),
                   st.binary(min_size=0, max_size=31).filter(lambda b: b"\0" not in b))


def _field_values(name: str, ctype):
    if ctype.kind == "array" and ctype.item.cname == "char":
        return POLICY
    if ctype.kind == "array":
        return st.tuples(st.integers(0, ctype.length - 1), st.one_of(
            st.integers(-2, 70), st.sampled_from([2**31 - 1, -2**31])))
    return {"double": DOUBLE, "int64_t": INT64, "uint64_t": UINT64}.get(ctype.cname, INT32)


FIELDS = [(name, f.type) for name, f in CONFIG.fields]


@st.composite
def configs(draw):
    """A shipped part's mc_config with up to 4 fields set to drawn values, hostile ones often
    (so mc_new refuses about half of them)."""
    cfg = ffi.new("mc_config *")
    ffi.memmove(cfg, draw(st.sampled_from(BASES)), ffi.sizeof(CONFIG))
    for _ in range(draw(st.sampled_from([0, 0, 1, 1, 1, 2, 4]))):
        name, ctype = draw(st.sampled_from(FIELDS))
        value = draw(_field_values(name, ctype))
        if ctype.kind == "array" and ctype.item.cname != "char":
            getattr(cfg, name)[value[0]] = value[1]
        else:
            setattr(cfg, name, value)
    return cfg


# requests mostly, markers often, a hostile field now and then
PLAIN = st.tuples(st.integers(0, 2000), st.integers(0, 1 << 14).map(lambda a: 64 * a),
                  st.integers(0, 8), st.sampled_from([0, 0, 0, 1, 1, 2, 3, 4, 5, 6, 7]),
                  st.sampled_from([0, 0, 0, 1]), st.integers(0, 8))
HOSTILE = st.tuples(
    st.one_of(st.integers(0, 2000), st.sampled_from([2**60, 2**60 + 1, 2**64 - 1])),   # cycle
    st.one_of(st.integers(0, 1 << 14).map(lambda a: 64 * a), UINT64),                 # addr
    st.one_of(st.integers(0, 8), st.integers(0, 2**32 - 1)),                          # value
    st.sampled_from([0, 1, 2, 3, 4, 5, 6, 7, 8, 255]),                                # op
    st.sampled_from([0, 1, 2, 255]),                                                  # requestor
    st.integers(0, 2**16 - 1),                                                        # param
)
RECORD = st.one_of(PLAIN, PLAIN, PLAIN, HOSTILE)




def _records(rows):
    recs = ffi.new("mc_record[]", max(len(rows), 1))
    for r, (cycle, addr, value, op, who, param) in zip(recs, rows):
        r.cycle, r.addr, r.value, r.op, r.requestor, r.param = cycle, addr, value, op, who, param
    return recs


def _finish(sim, logged) -> int:
    """mc_finish until it no longer pauses (the log drained each time): its last code."""
    for _ in range(100_000):
        rc = lib.mc_finish(sim)
        assert rc in CODES
        _drain(sim, logged)
        if rc != lib.MC_PAUSED:
            return rc
    raise AssertionError("mc_finish does not finish")


def _drain(sim, logged: list) -> None:
    buf = ffi.new("mc_cmd[]", 256)
    while True:
        n = lib.mc_cmdlog_take(sim, buf, 256)
        assert 0 <= n <= 256
        logged[0] += n
        if not n:
            break
    cyc, ch, ent = ffi.new("uint64_t[]", 64), ffi.new("uint32_t[]", 64), ffi.new("uint8_t[]", 64)
    while lib.mc_modelog_take(sim, cyc, ch, ent, 64):
        pass
    idx, c2, iss = (ffi.new("uint64_t[]", 64) for _ in range(3))
    while lib.mc_completions_take(sim, idx, c2, iss, 64):
        pass


def _feed_all(sim, rows, chunks: list[int], logged: list, end: bool = True) -> int:
    """Feed rows in chunks of the drawn sizes, then the end (unless `end` is false); the first
    error code, or MC_OK."""
    consumed = ffi.new("uint64_t *")
    at, i = 0, 0
    while True:
        size = chunks[i % len(chunks)] if chunks else len(rows)
        i += 1
        part = rows[at:at + size]
        last = at + size >= len(rows) and end
        recs = _records(part)
        done = 0
        for _ in range(100_000):
            rc = lib.mc_feed(sim, recs + done if part else ffi.NULL, len(part) - done, int(last),
                             consumed)
            assert rc in CODES and consumed[0] <= len(part) - done
            done += consumed[0]
            _drain(sim, logged)
            if rc in ERRORS:
                assert ffi.string(lib.mc_error(sim))          # says what
                return rc
            if rc == lib.MC_OK and done == len(part):
                break
        else:
            raise AssertionError("mc_feed does not take its records")
        at += size
        if at >= len(rows):
            return lib.MC_OK


def _getters(sim, cfg, data) -> None:
    nch = cfg.channels * cfg.pseudo_channels
    s = ffi.new("mc_summary *")
    assert lib.mc_get_summary(sim, s) == lib.MC_OK
    assert lib.mc_get_summary(sim, ffi.NULL) == lib.MC_ERR_ARG
    cs, out, e = ffi.new("mc_chan_stats *"), ffi.new("uint64_t *"), ffi.new("mc_energy *")
    idx = st.one_of(st.integers(-3, nch + 2), st.sampled_from([-2**31, 2**31 - 1]))
    for _ in range(3):
        who, ch = data.draw(st.integers(-2, 6)), data.draw(idx)
        ok = 0 <= who < 2 and 0 <= ch < nch
        assert lib.mc_get_chan_stats(sim, who, ch, cs) == (lib.MC_OK if ok else lib.MC_ERR_ARG)
        assert lib.mc_get_chan_stats(sim, who, ch, ffi.NULL) == lib.MC_ERR_ARG
        q = data.draw(st.one_of(st.floats(-1, 2), st.sampled_from([math.nan, math.inf])))
        ok_p = 0 <= who < 2 and -1 <= ch < nch and 0 <= q <= 1
        assert lib.mc_latency_percentile(sim, who, ch, q, out) == \
            (lib.MC_OK if ok_p else lib.MC_ERR_ARG)
        assert lib.mc_mode_switches(sim, ch, out) == \
            (lib.MC_OK if 0 <= ch < nch else lib.MC_ERR_ARG)
        rank = data.draw(st.integers(-3, cfg.ranks + 2))
        ok_e = -1 <= ch < nch and -1 <= rank < cfg.ranks
        assert lib.mc_get_energy(sim, ch, rank, e) == (lib.MC_OK if ok_e else lib.MC_ERR_ARG)
        assert lib.mc_get_energy(sim, ch, rank, ffi.NULL) == lib.MC_ERR_ARG
    fields = ffi.new("int64_t[]", lib.MC_F_COUNT)
    capacity = cfg.request_bytes << sum(cfg.map_bits[i] for i in range(cfg.map_count))
    addr = data.draw(st.one_of(UINT64, st.sampled_from([capacity - 1, capacity])))
    assert lib.mc_decode(sim, addr, fields) == (lib.MC_OK if addr < capacity else lib.MC_ERR_ARG)
    assert lib.mc_decode(sim, 0, ffi.NULL) == lib.MC_ERR_ARG
    reached, fired = ffi.new("uint64_t *"), ffi.new("uint64_t *")
    lib.mc_event(sim, data.draw(st.integers(0, 2**32 - 1)), reached, fired)
    lib.mc_event(sim, 0, ffi.NULL, ffi.NULL)
    held = [ffi.new("uint64_t *") for _ in range(3)]
    lib.mc_held(sim, *held)
    lib.mc_held(sim, ffi.NULL, ffi.NULL, ffi.NULL)
    for count, take in ((lib.mc_event_count, lib.mc_event_ids),
                        (lib.mc_layer_count, lib.mc_layer_ids)):
        n = count(sim)
        ids = ffi.new("uint32_t[]", n + 1)
        assert take(sim, ids, n + 1) == n
        assert take(sim, ffi.NULL, 0) == 0
        assert take(sim, ffi.NULL, 5) == 0
    start, end, nreq = (ffi.new("uint64_t *") for _ in range(3))
    lib.mc_layer_span(sim, data.draw(UINT64), start, end, nreq)
    assert lib.mc_layer_span(sim, 0, ffi.NULL, end, nreq) == lib.MC_ERR_ARG


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(cfg=configs(), rows=st.lists(RECORD, max_size=40),
       chunks=st.lists(st.integers(1, 12), max_size=4), data=st.data())
def test_hostile_calls_of_the_c_api_return_codes(cfg, rows, chunks, data):
    errlen = data.draw(st.sampled_from([-5, 0, 1, 2, 8, 512]))
    err = ffi.new("char[]", 600) if data.draw(st.booleans()) or errlen <= 0 else ffi.NULL
    sim = lib.mc_new(cfg, err, errlen)
    event("refused by mc_new" if sim == ffi.NULL else "a simulator")
    if sim == ffi.NULL:
        if err != ffi.NULL and errlen > 0:
            msg = ffi.string(err)
            assert len(msg) < errlen and (msg or errlen == 1)   # says why, within errlen
        return
    try:
        lib.mc_set_window(sim, data.draw(st.sampled_from([0, 1, 2, 7, 2**62, 2**64 - 1])))
        if data.draw(st.booleans()) and all(r[0] <= 2000 and r[2] <= 2000 for r in rows):
            # (a command log lists every refresh: with it, a request 2^60 cycles on, or a long
            # DELAY, means 2^48 refreshes simulated and logged one by one)
            lib.mc_cmdlog_enable(sim, data.draw(st.sampled_from([0, 1, 3, 1000])))
        logged = [0]
        rc = _feed_all(sim, rows, chunks, logged)
        consumed = ffi.new("uint64_t *")
        one = _records([(0, 0, 0, 0, 0, 0)])
        if rc == lib.MC_OK and data.draw(st.booleans()):   # records after the last ones: refused
            again = lib.mc_feed(sim, one, 1, data.draw(st.integers(0, 1)), consumed)
            assert again == lib.MC_ERR_ARG and consumed[0] == 0
        if data.draw(st.booleans()):                 # a copy of the run as it stands
            msg = ffi.new("char[]", 600)
            copy = lib.mc_clone(sim, msg, 600)
            assert (copy == ffi.NULL) == (rc in ERRORS and rc != lib.MC_ERR_ARG)
            if copy == ffi.NULL:
                assert b"failed" in ffi.string(msg)
            else:
                assert (_finish(copy, [0]) == lib.MC_OK) == (rc == lib.MC_OK)
                lib.mc_free(copy)
        if rc == lib.MC_OK:
            rc = _finish(sim, logged)
        event(f"run: {'finished' if rc == lib.MC_OK else 'error ' + str(rc)}")
        after = lib.mc_feed(sim, one, 1, 1, consumed)
        assert after in ERRORS and consumed[0] == 0          # after mc_finish or an error
        assert lib.mc_feed(sim, ffi.NULL, 3, 0, consumed) in ERRORS
        assert lib.mc_feed(sim, one, 1, 0, ffi.NULL) == lib.MC_ERR_ARG
        _getters(sim, cfg, data)
        if rc == lib.MC_OK:                                   # a finished run adds up
            s = ffi.new("mc_summary *")
            lib.mc_get_summary(sim, s)
            cs = ffi.new("mc_chan_stats *")
            total = 0
            for who in (0, 1):
                for ch in range(cfg.channels * cfg.pseudo_channels):
                    assert lib.mc_get_chan_stats(sim, who, ch, cs) == lib.MC_OK
                    total += cs.reads + cs.writes
            assert total == s.requests
            assert s.requests == sum(1 for r in rows if r[3] in (0, 1))
    finally:
        lib.mc_free(sim)


def _feed_by_side(sim, rows, chunks: list[int], logged: list) -> int:
    """Each side's rows (LAYER, PARAM and BARRIER rows to both, those of no side to the host's)
    in chunks of the drawn sizes to the side mc_hungry names, then the ends; the first error
    code, or MC_OK."""
    consumed = ffi.new("uint64_t *")
    sides = [[r for r in rows if r[3] in (2, 3, 4) or r[4] == s or (s == 0 and r[4] > 1)]
             for s in (0, 1)]
    at, side, i = [0, 0], 0, 0
    for _ in range(100_000):
        size = chunks[i % len(chunks)] if chunks else len(rows)
        i += 1
        part = sides[side][at[side]:at[side] + size]
        last = at[side] + size >= len(sides[side])
        at[side] += size
        rc = lib.mc_feed_side(sim, side, _records(part) if part else ffi.NULL, len(part),
                              int(last), consumed)
        assert rc in CODES and consumed[0] in ((len(part), 0) if rc != lib.MC_OK else
                                               (len(part),))
        while rc == lib.MC_PAUSED:
            _drain(sim, logged)
            rc = lib.mc_feed_side(sim, side, ffi.NULL, 0, int(last), consumed)
            assert rc in CODES
        _drain(sim, logged)
        if rc in ERRORS:
            assert ffi.string(lib.mc_error(sim))
            return rc
        hungry = lib.mc_hungry(sim)
        assert hungry in (0, 1, 2, 3)
        if not hungry:
            return lib.MC_OK
        side = 0 if hungry & 1 else 1
    raise AssertionError("mc_feed_side does not end")


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(cfg=configs(), rows=st.lists(RECORD, max_size=40),
       chunks=st.lists(st.integers(1, 12), max_size=4), data=st.data())
def test_hostile_calls_of_feed_by_side_return_codes(cfg, rows, chunks, data):
    sim = lib.mc_new(cfg, ffi.NULL, 0)
    if sim == ffi.NULL:
        return
    try:
        consumed = ffi.new("uint64_t *")
        one = _records([(0, 0, 0, 0, 0, 0)])
        assert lib.mc_feed_side(sim, data.draw(st.sampled_from([-1, 2, 255])), one, 1, 0,
                                consumed) == lib.MC_ERR_ARG
        assert lib.mc_feed_side(sim, 0, ffi.NULL, 3, 0, consumed) == lib.MC_ERR_ARG
        assert lib.mc_feed_side(sim, 0, one, 1, 0, ffi.NULL) == lib.MC_ERR_ARG
        if lib.mc_cursor_count(sim) == 1:         # serial: one stream only
            assert lib.mc_feed_side(sim, 0, one, 1, 0, consumed) == lib.MC_ERR_ARG
            return
        if data.draw(st.booleans()) and all(r[0] <= 2000 and r[2] <= 2000 for r in rows):
            lib.mc_cmdlog_enable(sim, data.draw(st.sampled_from([0, 1, 3, 1000])))
        logged = [0]
        rc = _feed_by_side(sim, rows, chunks, logged)
        event(f"by side: {'fed' if rc == lib.MC_OK else 'error ' + str(rc)}")
        if rc == lib.MC_OK:
            assert lib.mc_feed(sim, one, 1, 0, consumed) == lib.MC_ERR_ARG  # fed by side
            rc = _finish(sim, logged)
        assert lib.mc_feed_side(sim, 1, one, 1, 1, consumed) in ERRORS | {lib.MC_OK}
        _getters(sim, cfg, data)
    finally:
        lib.mc_free(sim)


def test_a_null_simulator_is_refused_by_every_entry_point():
    consumed, out = ffi.new("uint64_t *"), ffi.new("uint64_t *")
    null = ffi.NULL
    assert lib.mc_feed(null, null, 0, 1, consumed) == lib.MC_ERR_ARG
    assert lib.mc_feed_side(null, 0, null, 0, 1, consumed) == lib.MC_ERR_ARG
    assert lib.mc_hungry(null) == 0 and lib.mc_cursor_count(null) == 0
    assert lib.mc_finish(null) == lib.MC_ERR_ARG
    assert lib.mc_get_summary(null, ffi.new("mc_summary *")) == lib.MC_ERR_ARG
    assert lib.mc_get_chan_stats(null, 0, 0, ffi.new("mc_chan_stats *")) == lib.MC_ERR_ARG
    assert lib.mc_latency_percentile(null, 0, 0, 0.5, out) == lib.MC_ERR_ARG
    assert lib.mc_mode_switches(null, 0, out) == lib.MC_ERR_ARG
    assert lib.mc_get_energy(null, 0, 0, ffi.new("mc_energy *")) == lib.MC_ERR_ARG
    assert lib.mc_decode(null, 0, ffi.new("int64_t[]", lib.MC_F_COUNT)) == lib.MC_ERR_ARG
    assert lib.mc_layer_span(null, 0, out, out, out) == lib.MC_ERR_ARG
    assert ffi.string(lib.mc_error(null))
    assert lib.mc_event_count(null) == 0 and lib.mc_layer_count(null) == 0
    assert lib.mc_event_ids(null, ffi.new("uint32_t[]", 4), 4) == 0
    assert lib.mc_layer_ids(null, ffi.new("uint32_t[]", 4), 4) == 0
    assert lib.mc_cmdlog_take(null, ffi.new("mc_cmd[]", 4), 4) == 0
    assert lib.mc_modelog_take(null, out, ffi.new("uint32_t *"), ffi.new("uint8_t *"), 1) == 0
    assert lib.mc_completions_take(null, out, out, out, 1) == 0
    lib.mc_event(null, 0, out, out)
    lib.mc_held(null, out, out, out)
    lib.mc_set_window(null, 5)
    lib.mc_cmdlog_enable(null, 5)
    lib.mc_free(null)
    err = ffi.new("char[]", 64)
    assert lib.mc_new(null, err, 64) == ffi.NULL and ffi.string(err)
    assert lib.mc_run_text(null, 1, b"x", 0, 0, ffi.new("mc_text_pos *")) == lib.MC_ERR_ARG


@settings(max_examples=EXAMPLES, deadline=None)
@given(text=st.one_of(st.binary(max_size=300), st.lists(st.sampled_from(
    [b"0x40 READ 0", b"0X80 write 7", b"1f40\tP_MEM_RD 9", b"# c", b"", b"LD 0x40", b"st 64",
     b"0x40 R", b"80 w", b"100", b"0x40 READ 18446744073709551616", b"0x40 READ 3 #x",
     b"0x\xc3\xa9 READ 0", b"0x10000000000000000 READ 0", b"0x40 READ", b"\r"])).map(
        lambda lines: b"\n".join(lines))),
       fmt=st.integers(-1, 4), cap=st.sampled_from([0, 1, 0x200, 2**64 - 1]),
       last=st.sampled_from([0, 5, 2**64 - 1]), room=st.integers(0, 6))
def test_the_text_reader_takes_any_bytes(text, fmt, cap, last, room):
    out = ffi.new("mc_record[]", max(room, 1))
    n, used, lines, last_line = (ffi.new("uint64_t *") for _ in range(4))
    buf = ffi.new("char[]", text)      # (exactly len(text) bytes are read: a NUL follows)
    rc = lib.mc_text_parse(fmt, buf, len(text), cap, last, out, room, n, used, lines, last_line)
    assert rc in (0, -1)
    if rc == 0:
        assert n[0] <= room and used[0] <= len(text) and lines[0] <= text.count(b"\n") + 1
        assert fmt in (1, 2, 3) or n[0] == 0


def test_mc_run_text_names_no_file_it_cannot_open(tmp_path):
    part = load_part("hbm2")
    from pimrt.memctl._native import ffi as own_ffi
    cfg = ffi.new("mc_config *")
    ffi.memmove(cfg, bytes(own_ffi.buffer(make_config(part, Options()))), ffi.sizeof(CONFIG))
    sim = lib.mc_new(cfg, ffi.NULL, 0)
    try:
        pos = ffi.new("mc_text_pos *")
        assert lib.mc_run_text(sim, 1, str(tmp_path / "none").encode(), 0, 0, pos) == \
            lib.MC_TEXT_STOPPED
        assert (pos.offset, pos.line, pos.records) == (0, 1, 0)
        assert lib.mc_run_text(sim, 9, str(tmp_path).encode(), 0, 0, pos) == lib.MC_ERR_ARG
        assert lib.mc_run_text(sim, 1, str(tmp_path).encode(), 0, 0, pos) == lib.MC_TEXT_STOPPED
        assert lib.mc_run_text(sim, 1, ffi.NULL, 0, 0, pos) == lib.MC_ERR_ARG
    finally:
        lib.mc_free(sim)


def _outcome(sim, rc) -> tuple:
    """A run's rc, summary, events and completions (mc_finish run when it was fed)."""
    if rc == lib.MC_OK:
        rc = _finish(sim, [0])
    s = ffi.new("mc_summary *")
    lib.mc_get_summary(sim, s)
    n = lib.mc_event_count(sim)
    ids = ffi.new("uint32_t[]", n + 1)
    lib.mc_event_ids(sim, ids, n + 1)
    reached, fired = ffi.new("uint64_t *"), ffi.new("uint64_t *")
    events = []
    for i in range(n):
        lib.mc_event(sim, ids[i], reached, fired)
        events.append((ids[i], reached[0], fired[0]))
    idx, cyc, iss = (ffi.new("uint64_t[]", 64) for _ in range(3))
    done = []
    while (m := lib.mc_completions_take(sim, idx, cyc, iss, 64)):
        done += [(idx[i], cyc[i], iss[i]) for i in range(m)]
    return (rc, s.cycles, s.drain_cycles, s.requests, s.commands, s.refreshes,
            s.mode_switches, s.epochs, s.records, events, done)


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(base=st.sampled_from(BASES), rows=st.lists(PLAIN, min_size=1, max_size=60),
       chunks=st.lists(st.integers(1, 12), max_size=4), data=st.data())
def test_a_copy_fed_the_rest_gives_the_whole_runs_cycles(base, rows, chunks, data):
    """mc_clone part way through: the copy, the original and a copy of the copy, each fed the
    rest of the records (in drawn chunks), end as the run fed whole in one piece."""
    cfg = ffi.new("mc_config *")
    ffi.memmove(cfg, base, ffi.sizeof(CONFIG))
    cut = data.draw(st.integers(0, len(rows)), label="cut")
    whole = lib.mc_new(cfg, ffi.NULL, 0)
    try:
        want = _outcome(whole, _feed_all(whole, rows, [], [0]))
    finally:
        lib.mc_free(whole)
    sim = lib.mc_new(cfg, ffi.NULL, 0)
    runs = [sim]
    try:
        rc = _feed_all(sim, rows[:cut], chunks, [0], end=False) if cut else lib.MC_OK
        consumed = ffi.new("uint64_t *")
        event(f"whole run: {'ok' if want[0] == lib.MC_OK else 'error'}")
        if rc != lib.MC_OK:                       # (failed in the first part)
            assert want[0] in ERRORS
            return
        copy = lib.mc_clone(sim, ffi.NULL, 0)
        assert copy != ffi.NULL
        runs.append(copy)
        runs.append(lib.mc_clone(copy, ffi.NULL, 0))
        for run in runs:
            got = _outcome(run, _feed_all(run, rows[cut:], chunks, [0]) if cut < len(rows)
                           else _feed_all(run, [], [], [0]))
            assert got == want if want[0] == lib.MC_OK else got[0] == want[0]
        assert lib.mc_feed(sim, _records(rows[:1]), 1, 1, consumed) in ERRORS   # finished
    finally:
        for run in runs:
            lib.mc_free(run)
