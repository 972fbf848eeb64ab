"""Per-bank refresh (refresh = "bank", memctl/refresh.c): each rank refreshes its next bank
every tREFI / banks for tRFCb, blocking only that bank (and the PIM's all-bank commands); the
command log passes the independent checker, which catches a broken per-bank rule; the counts
follow from the interval; a part without per-bank refresh is refused naming the key."""
import io

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from pimrt.errors import ConfigError
from pimrt.memctl import CommandLog, Controller, Options, load_part
from pimrt.memctl.checker import LOG_DTYPE, REFB, as_command_log, check_command_log
from pimrt.trace.records import HOST, PIM, READ, RECORD_DTYPE, WRITE

BANK = {"controller.refresh": "bank"}
#: with PIM units every bank's refresh blocks the all-bank commands: a short tRFCb (the
#: datasheet's 160 would block them 66% of the time, which the part check refuses)
PIM_BANK = {"controller.refresh": "bank", "timing.tRFCb": 12}


def _trace(part, n, seed, pim, span):
    rng = np.random.default_rng(seed)
    rec = np.zeros(n, RECORD_DTYPE)
    rec["cycle"] = np.sort(rng.integers(0, span, n))
    rec["op"] = np.where(rng.random(n) < 0.7, READ, WRITE)
    rec["requestor"] = np.where(pim & (rng.random(n) < 0.4), PIM, HOST)
    rec["addr"] = rng.integers(0, 1 << 14, n).astype(np.uint64) * np.uint64(64)
    return rec


def _run(part, rec, policy="serial", log=True):
    buf = io.StringIO()
    ctl = Controller(part, Options(policy=policy), cmdlog=CommandLog(buf) if log else None)
    ctl.feed(rec)
    ctl.finish()
    return ctl.stats(), buf.getvalue()


def _log_array(text):
    return as_command_log(text)


def test_host_run_passes_the_checker_with_one_refb_per_interval():
    part = load_part("hbm2", BANK)
    s, text = _run(part, _trace(part, 3000, 1, False, 40_000))
    assert check_command_log(text, part) == []
    lines = text.splitlines()
    assert not any(",REF," in line for line in lines)
    refb = [line for line in lines if ",REFB," in line]
    every = part.timing["tREFI"] // 16
    # every channel refreshes one bank per interval from cycle `every` on, until the run ends
    assert len(refb) == s["refreshes"]
    # (the run stops once every request is served: within one interval of its last cycle)
    assert 8 * (s["cycles"] // every - 1) <= len(refb) <= 8 * (s["cycles"] // every + 1)
    e = s["energy_pj"]
    assert e["counts"]["bank_refreshes"] == len(refb) and e["counts"]["refreshes"] == 0


@pytest.mark.parametrize("policy", ["serial", "authority", "bank_partition"])
@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_pim_runs_pass_the_checker(policy, seed):
    """With the PIM: its all-bank commands wait for (are ordered with) the per-bank
    refreshes of its scope; the checker's tRFCb rule covers PIM_ACT too."""
    part = load_part("hbm2_pim", PIM_BANK)
    _, text = _run(part, _trace(part, 400, seed, True, 8000), policy)
    from pimrt.memctl import default_pim_banks
    kw = {"pim_banks": default_pim_banks(part)} if policy == "bank_partition" else {}
    assert check_command_log(text, part, policy=policy, **kw) == []
    assert ",REFB," in text


def _first_act_after_refb(log):
    """index of a REFB and of the first ACT to the same bank after it"""
    for i in np.flatnonzero(log["command"] == REFB):
        r = log[i]
        same = np.flatnonzero((log["command"] == 0) & (np.arange(len(log)) > i) &
                              (log["channel"] == r["channel"]) & (log["bank"] == r["bank"]) &
                              (log["bankgroup"] == r["bankgroup"]) & (log["rank"] == r["rank"]))
        if len(same):
            return i, same[0]
    raise AssertionError("no ACT after a REFB")


def test_checker_catches_an_act_inside_trfcb_and_a_refb_to_an_open_bank():
    part = load_part("hbm2", BANK)
    _, text = _run(part, _trace(part, 3000, 2, False, 40_000))
    log = _log_array(text)
    i, j = _first_act_after_refb(log)
    bad = log.copy()
    bad["cycle"][j] = bad["cycle"][i] + part.timing["tRFCb"] - 1  # one cycle early
    bad = bad[np.argsort(bad["cycle"], kind="stable")]
    found = {v.constraint for v in check_command_log(bad, part)}
    assert "tRFCb" in found
    # a REFB to that bank one cycle after the ACT opened it: bank_open
    extra = log[i:i + 1].copy()
    extra["cycle"] = log["cycle"][j] + 1
    bad = np.concatenate([log, extra])
    bad = bad[np.argsort(bad["cycle"], kind="stable")]
    found = {v.constraint for v in check_command_log(bad, part)}
    assert "bank_open" in found


def test_checker_catches_an_act_to_another_bank_inside_trredf():
    part = load_part("hbm2", BANK)
    _, text = _run(part, _trace(part, 3000, 4, False, 40_000))
    log = _log_array(text)
    for i in np.flatnonzero(log["command"] == REFB):
        r = log[i]
        other = np.flatnonzero((log["command"] == 0) & (np.arange(len(log)) > i) &
                               (log["channel"] == r["channel"]) & (log["rank"] == r["rank"]) &
                               ((log["bank"] != r["bank"]) | (log["bankgroup"] != r["bankgroup"])))
        if len(other):
            j = other[0]
            break
    bad = log.copy()
    bad["cycle"][j] = log["cycle"][i] + part.timing["tRREFD"] - 1
    bad = bad[np.argsort(bad["cycle"], kind="stable")]
    assert "tRREFD" in {v.constraint for v in check_command_log(bad, part)}
    # and a REFB right after another one of the rank
    extra = log[i:i + 1].copy()
    extra["cycle"] += 1
    extra["bank"] = (int(r["bank"]) + 1) % part.org["banks_per_group"]
    bad = np.concatenate([log, extra])
    bad = bad[np.argsort(bad["cycle"], kind="stable")]
    assert "tRREFD" in {v.constraint for v in check_command_log(bad, part)}


def test_refb_on_a_part_without_per_bank_refresh_is_a_bad_command():
    part = load_part("ddr4_3200")
    log = np.zeros(1, dtype=LOG_DTYPE)
    log["command"] = REFB
    log["cycle"] = 100
    assert {v.constraint for v in check_command_log(log, part)} == {"bad_command"}


def test_a_part_without_trfcb_is_refused_naming_the_key():
    with pytest.raises(ConfigError, match=r"\[timing\] tRFCb: refresh = \"bank\" needs tRFCb"):
        load_part("ddr4_3200", BANK)
    with pytest.raises(ConfigError, match=r"\[timing\] tRFCb: per-bank refresh leaves too little"):
        load_part("hbm2_pim", BANK)     # 160 of every 243 cycles blocks the PIM


def test_default_parts_keep_rank_refresh():
    for name in ("hbm2", "hbm2_pim", "v100_hbm2_pim", "ddr4_3200"):
        assert load_part(name).controller["refresh"] == "rank"


def test_row_hits_to_one_bank_do_not_hold_its_refresh_back():
    """A stream of row hits to one bank: once its refresh falls due the bank gets no host
    command until it is precharged and refreshed, so channel 0 still refreshes a bank every
    tREFI / banks and the log passes the checker."""
    part = load_part("hbm2", BANK)
    n = 20_000
    rec = np.zeros(n, RECORD_DTYPE)
    rec["op"] = READ
    rec["addr"] = (np.arange(n, dtype=np.uint64) % 32) * np.uint64(64)  # one row, channel 0
    rec["cycle"] = np.arange(n, dtype=np.uint64) * np.uint64(2)
    s, text = _run(part, rec)
    assert check_command_log(text, part) == []
    every = part.timing["tREFI"] // 16
    ch0 = [line for line in text.splitlines() if ",REFB," in line and line.split(",")[1] == "0"]
    assert s["cycles"] // every - 1 <= len(ch0) <= s["cycles"] // every + 1
    # and each REFB came no later than one service after it fell due (its cycle - due)
    dues = [every * (k + 1) for k in range(len(ch0))]
    lag = max(int(line.split(",")[0]) - d for line, d in zip(ch0, dues))
    assert 0 <= lag < 100, lag
