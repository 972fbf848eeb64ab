"""pimrt.memctl.checker: legal logs pass; each kind of violation is caught and named; the
single-pass checker agrees with a brute-force pairwise reading of the timing table."""
from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pimrt.errors import TraceError
from pimrt.memctl.checker import (COMMANDS, LOG_DTYPE, as_command_log, check_command_log,
                                  check_command_log_file, format_command_log,
                                  parse_command_log)
from pimrt.memctl.config import load_part

HBM2 = load_part("hbm2")
DDR4 = load_part("ddr4")
PIM = load_part("hbm2_pim")


def c(t, cmd, bg=-1, ba=-1, row=-1, col=-1, ch=0, rank=0, pc=0, req="host"):
    return (t, ch, pc, rank, bg, ba, row, col, cmd, req)


def names(violations) -> set[str]:
    return {v.constraint for v in violations}


def shifted(log, index, cycle):
    """log with command `index` moved to `cycle`, re-sorted by cycle (stable)."""
    out = list(log)
    out[index] = (cycle,) + tuple(out[index][1:])
    return sorted(out, key=lambda r: r[0])


# A legal HBM2 log touching most constraints at exactly their minimum distance.
# HBM2: tRCD 14, tRAS 34, tRP 14, tRC 48, tRRD_S/L 4/6, tFAW 30, BURST 2, tCCD_S/L -> 2/2,
# RL 14, WL 4, RD->WR 12, WR->RD same bank group 14, WR->PRE 22, tRTP 4, tRFC 260.
LEGAL = [
    c(0, "ACT", 0, 0, 5),          # 0
    c(6, "ACT", 0, 1, 9),          # 1  tRRD_L
    c(12, "ACT", 1, 0, 3),         # 2  tRRD_S
    c(14, "RD", 0, 0, 5, 0),       # 3  tRCDRD
    c(16, "ACT", 2, 0, 1),         # 4  tRRD_S
    c(18, "RD", 0, 0, 5, 1),       # 5  tCCD_L
    c(20, "RD", 0, 1, 9, 0),       # 6  tCCD_L (other bank, same group), tRCDRD
    c(26, "RD", 1, 0, 3, 0),       # 7  tRCDRD
    c(30, "ACT", 3, 0, 2),         # 8  tFAW (5th ACT, 30 after the 1st)
    c(38, "WR", 1, 0, 3, 1),       # 9  RD -> WR
    c(40, "PRE", 0, 0),            # 10 tRAS
    c(52, "RD", 1, 0, 3, 2),       # 11 WR -> RD, same bank group (tWTR_L)
    c(54, "ACT", 0, 0, 7),         # 12 tRP
    c(60, "PRE", 1, 0),            # 13 write recovery (WL + BURST + tWR)
    c(88, "PRE", req="ctrl"),      # 14 precharge all (tRAS of ACT 12)
    c(102, "REF", req="ctrl"),     # 15 tRP before REF
    c(362, "ACT", 0, 0, 1),        # 16 tRFC
    c(376, "WR", 0, 0, 1, 3),      # 17 tRCDWR
]


def test_legal_log_passes():
    assert check_command_log(LEGAL, HBM2) == []


def test_legal_log_as_csv_and_file(tmp_path):
    text = format_command_log(LEGAL)
    assert text.startswith("cycle,channel,pseudo_channel,rank,bankgroup,bank,row,column,"
                           "command,requestor\n")
    arr = parse_command_log(text)
    assert arr.dtype == LOG_DTYPE and len(arr) == len(LEGAL)
    assert check_command_log(text, HBM2) == []
    p = tmp_path / "cmd.csv"
    p.write_text(text)
    assert check_command_log_file(p, HBM2) == []
    # a structured array with string command / requestor columns works too
    s = np.array(LEGAL, dtype=[(n, "<i8") for n in LOG_DTYPE.names[:8]]
                 + [("command", "U9"), ("requestor", "U4")])
    assert check_command_log(s, HBM2) == []


@pytest.mark.parametrize("index,cycle,constraint", [
    (3, 13, "tRCDRD"),
    (12, 53, "tRP"),
    (10, 33, "tRAS"),
    (1, 5, "tRRD_L"),
    (2, 9, "tRRD_S"),
    (8, 29, "tFAW"),
    (5, 15, "tCCD_L"),
    (11, 51, "tWTR_L"),
    (13, 59, "tWR"),
    (16, 361, "tRFC"),
    (15, 101, "tRP"),
    (9, 37, "read_to_write"),
    (17, 375, "tRCDWR"),
    (5, 16, "command_bus"),
])
def test_each_violation_is_caught(index, cycle, constraint):
    log = shifted(LEGAL, index, cycle)
    v = check_command_log(log, HBM2, dual_command_bus=False)
    assert names(v) == {constraint}, [str(x) for x in v]
    (only,) = v
    assert only.cycle == cycle and only.command == LEGAL[index][8]
    if constraint != "command_bus":
        assert only.actual is not None and only.actual < only.required
    assert constraint in str(only) and f"cycle {cycle}" in str(only)


def test_trc():
    part = load_part("hbm2", {"tRC": 60})
    log = [c(0, "ACT", 0, 0, 1), c(34, "PRE", 0, 0), c(48, "ACT", 0, 0, 2)]
    (v,) = check_command_log(log, part)
    assert (v.constraint, v.required, v.actual, v.index) == ("tRC", 60, 48, 2)
    assert check_command_log(shifted(log, 2, 60), part) == []


def test_trtp():
    log = [c(0, "ACT", 0, 0, 1), c(31, "RD", 0, 0, 1, 0), c(34, "PRE", 0, 0)]
    assert names(check_command_log(log, HBM2)) == {"tRTP"}
    assert check_command_log(shifted(log, 2, 35), HBM2) == []


def test_tccd_s_and_twtr_s():
    base = [c(0, "ACT", 0, 0, 1), c(4, "ACT", 1, 0, 1), c(18, "RD", 0, 0, 1, 0),
            c(20, "RD", 1, 0, 1, 0)]
    assert check_command_log(base, HBM2) == []
    assert names(check_command_log(shifted(base, 3, 19), HBM2)) == {"tCCD_S"}
    w = [c(0, "ACT", 0, 0, 1), c(4, "ACT", 1, 0, 1), c(18, "WR", 0, 0, 1, 0),
         c(30, "RD", 1, 0, 1, 0)]                     # WL + BURST + tWTR_S = 12
    assert check_command_log(w, HBM2) == []
    assert names(check_command_log(shifted(w, 3, 29), HBM2)) == {"tWTR_S"}


def test_bank_state_rules():
    closed = LEGAL[:11] + [c(50, "RD", 0, 0, 5, 2)]       # bank 0/0 precharged at 40
    v = check_command_log(closed, HBM2)
    assert names(v) == {"bank_closed"} and "closed bank" in str(v[0])
    wrong = shifted(LEGAL, 5, 18)
    wrong[5] = c(18, "RD", 0, 0, 6, 1)
    assert names(check_command_log(wrong, HBM2)) == {"wrong_row"}
    again = [c(0, "ACT", 0, 0, 1), c(60, "ACT", 0, 0, 2)]
    assert names(check_command_log(again, HBM2)) == {"bank_open"}
    # PRE of a closed bank is a no-op: no tRAS, and it does not restart tRP
    noop = [c(0, "PRE", 0, 0), c(1, "ACT", 0, 0, 3)]
    assert check_command_log(noop, HBM2) == []
    ref_open = [c(0, "ACT", 0, 0, 1), c(40, "REF", req="ctrl")]
    assert names(check_command_log(ref_open, HBM2)) == {"bank_open"}


def test_ranks_ddr4():
    # DDR4: BURST 4, tRTRS 1 -> RD -> RD across ranks 5; RD -> WR 22 + 4 - 16 + 1 = 11
    log = [c(0, "ACT", 0, 0, 1, rank=0), c(4, "ACT", 0, 0, 1, rank=1),
           c(30, "RD", 0, 0, 1, 0, rank=0), c(35, "RD", 0, 0, 1, 0, rank=1),
           c(46, "WR", 0, 0, 1, 1, rank=0), c(50, "WR", 1 - 1, 0, 1, 2, rank=1)]
    v = check_command_log(log, DDR4)
    assert names(v) == {"tRTRS"} and v[0].index == 5           # WR -> WR across ranks: 5
    assert check_command_log(shifted(log, 5, 51), DDR4) == []
    assert names(check_command_log(shifted(log, 3, 34), DDR4)) == {"tRTRS"}
    assert names(check_command_log(shifted(log, 4, 45), DDR4)) == {"read_to_write"}
    # tRRD and tFAW are per rank: ACTs of two ranks in consecutive cycles are fine
    assert check_command_log([c(0, "ACT", 0, 0, 1, rank=0), c(1, "ACT", 0, 0, 1, rank=1)],
                             DDR4) == []
    # one command per cycle per channel, whatever the rank
    assert names(check_command_log([c(0, "ACT", 0, 0, 1, rank=0),
                                    c(0, "ACT", 1, 0, 1, rank=1)], DDR4)) == {"command_bus"}


def test_channels_are_independent():
    log = [c(0, "ACT", 0, 0, 1, ch=0), c(0, "ACT", 0, 0, 1, ch=1), c(14, "RD", 0, 0, 1, 0, ch=0),
           c(14, "RD", 0, 0, 1, 0, ch=1)]
    assert check_command_log(log, HBM2) == []


def test_log_order_and_bad_fields():
    assert "log_order" in names(check_command_log([c(10, "ACT", 0, 0, 1),
                                                   c(5, "ACT", 1, 0, 1)], HBM2))
    assert names(check_command_log([c(0, "ACT", 0, 4, 1)], HBM2)) == {"bad_command"}
    assert names(check_command_log([c(0, "ACT", 0, 0, 1, ch=8)], HBM2)) == {"bad_command"}
    assert names(check_command_log([c(0, "RD", -1, -1, 1)], HBM2)) == {"bad_command"}
    assert names(check_command_log([c(0, "PIM_ENTER")], HBM2)) == {"bad_command"}


def test_bad_csv(tmp_path):
    with pytest.raises(TraceError, match="header"):
        parse_command_log("cycle,channel\n0,0\n")
    head = "cycle,channel,pseudo_channel,rank,bankgroup,bank,row,column,command,requestor\n"
    with pytest.raises(TraceError, match=r"<log>:2: unknown command 'ACTIVATE'"):
        parse_command_log(head + "0,0,0,0,0,0,1,-1,ACTIVATE,host\n")
    with pytest.raises(TraceError, match=r"<log>:3: cycle 'x' is not an integer"):
        parse_command_log(head + "0,0,0,0,0,0,1,-1,ACT,host\nx,0,0,0,0,0,1,-1,ACT,host\n")
    with pytest.raises(TraceError, match="expected 10"):
        parse_command_log(head + "0,0,0\n")
    with pytest.raises(TraceError, match="unknown requestor 'cpu'"):
        parse_command_log(head + "0,0,0,0,0,0,1,-1,ACT,cpu\n")


def test_limit():
    log = [c(i, "RD", 0, 0, 1, 0) for i in range(100)]
    assert len(check_command_log(log, HBM2, limit=5)) == 5


# ---------------------------------------------------------------------------------------------
# PIM (hbm2_pim: mode switch 24, PIM column spacing 4 banks x tCCD_L 2 = 8)
PIM_LEGAL = [
    c(0, "PIM_ENTER", req="ctrl"),                  # 0
    c(24, "PIM_ACT", row=100, req="pim"),           # 1 mode switch over
    c(38, "PIM_RD", row=100, col=0, req="pim"),     # 2 tRCDRD
    c(46, "PIM_RD", row=100, col=1, req="pim"),     # 3 pim_column
    c(54, "PIM_WR", row=100, col=2, req="pim"),     # 4 pim_column
    c(76, "PIM_PRE", req="pim"),                    # 5 WL + BURST + tWR after PIM_WR
    c(90, "PIM_EXIT", req="ctrl"),                  # 6
    c(114, "ACT", 0, 0, 7),                         # 7 mode switch over
]


def test_pim_legal():
    assert check_command_log(PIM_LEGAL, PIM) == []
    assert check_command_log(PIM_LEGAL, PIM, policy="serial") == []
    assert check_command_log(PIM_LEGAL, PIM, policy="authority") == []


@pytest.mark.parametrize("index,cycle,constraint", [
    (1, 23, "mode_switch"),
    (2, 37, "tRCDRD"),
    (3, 45, "pim_column"),
    (4, 53, "pim_column"),
    (5, 75, "tWR"),
    (7, 113, "mode_switch"),
])
def test_pim_violations(index, cycle, constraint):
    assert names(check_command_log(shifted(PIM_LEGAL, index, cycle), PIM)) == {constraint}


def test_host_command_during_pim_mode():
    log = sorted(PIM_LEGAL + [c(60, "RD", 0, 0, 100, 5)], key=lambda r: r[0])
    v = check_command_log(log, PIM)
    assert names(v) == {"pim_mode"} and v[0].command == "RD" and v[0].cycle == 60
    log = sorted(PIM_LEGAL + [c(10, "PRE", 0, 0)], key=lambda r: r[0])   # in the switch
    assert names(check_command_log(log, PIM)) == {"mode_switch", "pim_mode"}


def test_pim_mode_rules():
    # PIM_ENTER with a bank open, and too soon after a PRE
    log = [c(0, "ACT", 0, 0, 1), c(40, "PIM_ENTER", req="ctrl")]
    assert names(check_command_log(log, PIM)) == {"bank_open"}
    log = [c(0, "ACT", 0, 0, 1), c(40, "PRE", 0, 0), c(50, "PIM_ENTER", req="ctrl")]
    assert names(check_command_log(log, PIM)) == {"tRP"}
    # PIM command outside PIM mode; PIM_EXIT with banks open; exit twice
    assert names(check_command_log([c(0, "PIM_ACT", row=1, req="pim")], PIM)) == {"pim_mode"}
    log = PIM_LEGAL[:5] + [c(80, "PIM_EXIT", req="ctrl")]
    assert names(check_command_log(log, PIM)) == {"bank_open"}
    log = PIM_LEGAL[:7] + [c(200, "PIM_EXIT", req="ctrl")]
    assert names(check_command_log(log, PIM)) == {"pim_mode"}
    # PIM_ACT too soon after a host PRE of one bank in scope
    log = [c(0, "ACT", 1, 2, 1), c(34, "PRE", 1, 2), c(36, "PIM_ENTER", req="ctrl")]
    assert names(check_command_log(log, PIM)) == {"tRP"}
    # PIM_PRE too soon after PIM_ACT (tRAS) and PIM_RD (tRTP)
    log = PIM_LEGAL[:3] + [c(40, "PIM_PRE", req="pim")]
    assert names(check_command_log(log, PIM)) == {"tRAS", "tRTP"}


def test_bank_partition():
    pim_banks = [(bg, 0) for bg in range(4)]            # bank 0 of every group, every rank
    log = [
        c(0, "PIM_ACT", row=9, req="pim"),
        c(1, "ACT", 0, 1, 5),                             # host bank: fine
        c(14, "PIM_RD", row=9, col=0, req="pim"),
        c(15, "RD", 0, 1, 5, 0),
        c(22, "PIM_RD", row=9, col=1, req="pim"),
    ]
    assert check_command_log(log, PIM, policy="bank_partition", pim_banks=pim_banks) == []
    # the same flat indices
    assert check_command_log(log, PIM, policy="bank_partition", pim_banks=[0, 4, 8, 12]) == []
    bad = log + [c(30, "ACT", 2, 0, 5)]                  # host ACT on a PIM bank
    v = check_command_log(bad, PIM, policy="bank_partition", pim_banks=pim_banks)
    assert "bank_partition" in names(v)
    bad = log + [c(30, "PIM_ACT", 0, 1, row=3, req="pim")]   # PIM on a host bank
    assert "bank_partition" in names(check_command_log(bad, PIM, policy="bank_partition",
                                                       pim_banks=pim_banks))
    bad = [c(0, "PIM_ENTER", req="ctrl")]
    assert names(check_command_log(bad, PIM, policy="bank_partition",
                                   pim_banks=pim_banks)) == {"pim_mode"}
    with pytest.raises(ValueError, match="pim_banks"):
        check_command_log(log, PIM, policy="bank_partition")
    with pytest.raises(ValueError, match="unknown policy"):
        check_command_log(log, PIM, policy="fair")


# ---------------------------------------------------------------------------------------------
# differential test: the checker against a brute-force pairwise reading of the table
def brute_force(log: np.ndarray, part, dual: bool = False) -> set[tuple[int, str]]:
    tm = part.timing
    BURST, RL, WL = part.burst_cycles, tm["CL"], tm["CWL"]
    out = set()
    state = {}              # bank -> open?
    last_act = {}           # bank -> index of its last ACT
    events = []             # (index, cycle, cmd, rank, bg, bank) of effective commands
    ev_open_since = {}      # index of a RD/WR/PRE -> index of the bank's ACT before it
    for i, r in enumerate(log.tolist()):
        t, ch, pc, rank, bg, ba, row, col, cmd, req = r
        name = COMMANDS[cmd]
        key = (ch, pc, rank, bg, ba)
        if name == "PRE":
            if not state.get(key):
                events.append((i, t, "NOP", ch, rank, bg, ba))
                continue
            state[key] = False
            ev_open_since[i] = last_act[key]
        elif name == "ACT":
            state[key] = True
            last_act[key] = i
        elif name in ("RD", "WR"):
            ev_open_since[i] = last_act.get(key, -1)
        events.append((i, t, name, ch, rank, bg, ba))
    rules = {
        ("ACT", "ACT", "bank"): ("tRC", tm["tRC"]),
        ("ACT", "ACT", "bg"): ("tRRD_L", tm["tRRD_L"]),
        ("ACT", "ACT", "rank"): ("tRRD_S", tm["tRRD_S"]),
        ("ACT", "RD", "bank"): ("tRCDRD", tm["tRCDRD"]),
        ("ACT", "WR", "bank"): ("tRCDWR", tm["tRCDWR"]),
        ("ACT", "PRE", "bank"): ("tRAS", tm["tRAS"]),
        ("PRE", "ACT", "bank"): ("tRP", tm["tRP"]),
        ("REF", "ACT", "rank*"): ("tRFC", tm["tRFC"]),
        ("REF", "REF", "rank*"): ("tRFC", tm["tRFC"]),
        ("PRE", "REF", "rank*"): ("tRP", tm["tRP"]),
    }
    for a in ("RD", "WR"):
        rules[(a, a, "bank")] = rules[(a, a, "bg")] = ("tCCD_L", max(BURST, tm["tCCD_L"]))
        rules[(a, a, "rank")] = ("tCCD_S", max(BURST, tm["tCCD_S"]))
        rules[(a, a, "other_rank")] = ("tRTRS", BURST + tm["tRTRS"])
    for rel in ("bank", "bg", "rank", "other_rank"):
        rules[("RD", "WR", rel)] = ("read_to_write", RL + BURST - WL + tm["tRTRS"])
    rules[("WR", "RD", "bank")] = rules[("WR", "RD", "bg")] = ("tWTR_L",
                                                               WL + BURST + tm["tWTR_L"])
    rules[("WR", "RD", "rank")] = ("tWTR_S", WL + BURST + tm["tWTR_S"])
    rules[("WR", "RD", "other_rank")] = ("tRTRS", max(0, WL + BURST + tm["tRTRS"] - RL))
    for j, (ij, tj, cj, chj, rj, gj, bj) in enumerate(events):
        acts = []
        for (ii, ti, ci, chi, ri, gi, bi) in events[:j]:
            if ti == tj and chi == chj and (not dual or (ci in ("RD", "WR")) ==
                                            (cj in ("RD", "WR"))):
                out.add((ij, "command_bus"))
            if chi != chj:
                continue
            if ri != rj:
                rel = "other_rank"
            elif gj < 0 or gi < 0:
                rel = "rank*"
            elif gi != gj:
                rel = "rank"
            elif bi != bj:
                rel = "bg"
            else:
                rel = "bank"
            rule = rules.get((ci, cj, rel)) or (rules.get((ci, cj, "rank*"))
                                                 if ri == rj else None)
            if ci in ("RD", "WR") and cj == "PRE" and rel == "bank" and \
                    ev_open_since.get(ii) == ev_open_since.get(ij):
                rule = ("tRTP", tm["tRTP"]) if ci == "RD" else ("tWR", WL + BURST + tm["tWR"])
            if rule and tj - ti < rule[1]:
                out.add((ij, rule[0]))
            if ci == "ACT" and cj == "ACT" and ri == rj:
                acts.append(ti)
        if cj == "ACT" and len(acts) >= 4 and tj - acts[-4] < tm["tFAW"]:
            out.add((ij, "tFAW"))
    return out


@st.composite
def host_logs(draw, part):
    """State-legal host command sequences (random timing) on channel 0."""
    R, G, B = part.org["ranks"], part.org["bankgroups"], part.org["banks_per_group"]
    open_rows: dict = {}
    t = 0
    rows = []
    for _ in range(draw(st.integers(1, 40))):
        t += draw(st.sampled_from([0, 1, 2, 3, 4, 6, 8, 12, 20, 30, 60]))
        rank = draw(st.integers(0, R - 1))
        bank = (draw(st.integers(0, G - 1)), draw(st.integers(0, B - 1)))
        key = (rank,) + bank
        kind = draw(st.sampled_from(["ACT"] * 3 + ["RD"] * 4 + ["WR"] * 3 + ["PRE"] * 3
                                    + ["REF"]))
        if kind == "REF":
            if any(k[0] == rank for k in open_rows):
                continue
            rows.append(c(t, "REF", rank=rank, req="ctrl"))
        elif kind == "PRE" or (kind == "ACT" and key in open_rows):
            open_rows.pop(key, None)
            rows.append(c(t, "PRE", *bank, rank=rank))
        elif kind == "ACT":
            open_rows[key] = draw(st.integers(0, 3))
            rows.append(c(t, "ACT", *bank, open_rows[key], rank=rank))
        elif key in open_rows:
            rows.append(c(t, kind, *bank, open_rows[key], 0, rank=rank))
    return as_command_log(rows)


@pytest.mark.parametrize("part,dual", [(HBM2, True), (HBM2, False), (DDR4, False)],
                         ids=["hbm2-dual-bus", "hbm2", "ddr4"])
@given(data=st.data())
def test_checker_matches_brute_force(part, dual, data):
    log = data.draw(host_logs(part))
    got = {(v.index, v.constraint)
           for v in check_command_log(log, part, dual_command_bus=dual)}
    assert got == brute_force(log, part, dual)


def test_dual_command_bus():
    assert HBM2.controller["dual_command_bus"] and not DDR4.controller["dual_command_bus"]
    row_col = [c(0, "ACT", 0, 0, 1), c(14, "ACT", 1, 0, 1), c(14, "RD", 0, 0, 1, 0)]
    assert check_command_log(row_col, HBM2) == []                     # row + column bus
    assert names(check_command_log(row_col, HBM2, dual_command_bus=False)) == {"command_bus"}
    two_rows = [c(0, "ACT", 0, 0, 1), c(0, "ACT", 1, 0, 1)]
    assert "command_bus" in names(check_command_log(two_rows, HBM2))
    two_cols = [c(0, "ACT", 0, 0, 1), c(4, "ACT", 1, 0, 1), c(20, "RD", 0, 0, 1, 0),
                c(20, "RD", 1, 0, 1, 0)]
    assert "command_bus" in names(check_command_log(two_cols, HBM2))


# ---------------------------------------------------------------------------------------------
def _long_log(n_rounds: int) -> np.ndarray:
    """A legal HBM2 log: rounds of ACT, 4 RD, PRE on 8 channels x 4 bank groups."""
    rows = []
    t = 0
    for k in range(n_rounds):
        for ch in range(8):
            bg = k % 4
            rows.append(c(t, "ACT", bg, 0, k % 100, ch=ch))
        t += 14
        for col in range(4):
            for ch in range(8):
                rows.append(c(t, "RD", k % 4, 0, k % 100, col, ch=ch))
            t += 2
        t += 26
        for ch in range(8):
            rows.append(c(t, "PRE", k % 4, 0, ch=ch))
        t += 14
    return as_command_log(rows)


def test_long_legal_log_passes():
    assert check_command_log(_long_log(50), HBM2) == []


@pytest.mark.slow
def test_speed_one_million_commands():
    log = _long_log(1_000_000 // 48 + 1)
    t0 = time.perf_counter()
    assert check_command_log(log, HBM2) == []
    assert time.perf_counter() - t0 < 60


def test_bank_partition_flat_indices_span_ranks():
    part = load_part("hbm2_pim", {"ranks": 2})
    pim_banks = [16 + 0]                                  # rank 1, bank group 0, bank 0
    ok = [c(0, "ACT", 0, 0, 1, rank=0), c(1, "PIM_ACT", row=2, rank=1, req="pim")]
    assert check_command_log(ok, part, "bank_partition", pim_banks) == []
    bad = [c(0, "ACT", 0, 0, 1, rank=1)]
    assert names(check_command_log(bad, part, "bank_partition", pim_banks)) == \
        {"bank_partition"}
    assert names(check_command_log(bad, part, "bank_partition", [(0, 0, 0)])) == set()
    with pytest.raises(ValueError, match="not within 0..31"):
        check_command_log(bad, part, "bank_partition", [32])


# ---- the arbitration rule (issue 24): round-robin among the banks, as DRAMsim3 -----------------
# DDR4 banks within the channel: rank * 16 + bankgroup * 4 + bank. Bank 0 is (r0, bg0, ba0),
# bank 1 (r0, bg0, ba1), bank 16 (r1, bg0, ba0).

def test_arbitration_round_robin_catches_the_old_rule():
    # bank 0 and bank 16 open; after the ACT of bank 16 the turn starts at bank 17, so bank 0
    # (ready to read from cycle 22) comes before bank 16: the read of bank 16 at 30 skipped
    # it, as the column-first rule (any ready row hit) may and round-robin may not
    log = [c(0, "ACT", 0, 0, row=1), c(1, "ACT", 0, 0, row=1, rank=1),
           c(30, "RD", 0, 0, row=1, rank=1), c(40, "RD", 0, 0, row=1)]
    assert check_command_log(log, DDR4) == []
    v = check_command_log(log, DDR4, arbitration="round_robin")
    assert [(x.index, x.constraint) for x in v] == [(2, "arbitration")]
    assert "bank 0's RD (command 3) could issue at cycle 30" in v[0].message
    assert check_command_log(log, DDR4, arbitration="column_first") == []
    # bank 0 served first in its turn: legal under both
    ok = [c(0, "ACT", 0, 0, row=1), c(1, "ACT", 0, 0, row=1, rank=1),
          c(22, "RD", 0, 0, row=1), c(27, "RD", 0, 0, row=1, rank=1)]
    assert check_command_log(ok, DDR4, arbitration="round_robin") == []


def test_arbitration_column_first_catches_the_new_rule():
    # bank 0's read is ready from cycle 22; at 23 bank 1 (first in turn after bank 0) takes an
    # ACT: round-robin's choice, never column-first's
    log = [c(0, "ACT", 0, 0, row=1), c(23, "ACT", 0, 1, row=2), c(27, "RD", 0, 0, row=1)]
    assert check_command_log(log, DDR4, arbitration="round_robin") == []
    v = check_command_log(log, DDR4, arbitration="column_first")
    assert [(x.index, x.constraint) for x in v] == [(1, "arbitration")]


def test_arbitration_waiting_activate():
    # a host PRE then the ACT of the same bank: a request waited for that ACT from tRP on
    # (cycle 74 for bank 0); after bank 0's PRE the turn starts at bank 1, so bank 1's ACT at
    # 80 skipped nothing; bank 16's RD at 82, its turn starting at bank 17, skipped bank 0
    pre = [c(0, "ACT", 0, 0, row=1), c(22, "RD", 0, 0, row=1), c(52, "PRE", 0, 0)]
    ok = pre + [c(80, "ACT", 0, 1, row=3), c(90, "ACT", 0, 0, row=2)]
    assert check_command_log(ok, DDR4, arbitration="round_robin") == []
    bad = pre + [c(60, "ACT", 0, 0, row=1, rank=1), c(82, "RD", 0, 0, row=1, rank=1),
                 c(90, "ACT", 0, 0, row=2)]
    v = check_command_log(bad, DDR4, arbitration="round_robin")
    assert [(x.index, x.constraint) for x in v] == [(4, "arbitration")]
    assert "bank 0's ACT" in v[0].message


@pytest.mark.parametrize("trace", ["random", "mix"])
def test_arbitration_of_memctl_logs(tmp_path, trace):
    """memctl's logs keep their own rule, and (random reads) break the other one."""
    from pimrt.memctl.controller import Options, run_trace
    from pimrt.memctl.checker import read_command_log
    from pimrt.trace import synthetic
    counts = {}
    for rule in ("round_robin", "column_first"):
        part = load_part("ddr4", {"controller.arbitration": rule})
        gen = synthetic.random(3000) if trace == "random" else synthetic.mix(3000)
        path = tmp_path / f"{rule}.csv"
        run_trace(gen, part, Options(issue_width=1), cmdlog=path)
        log = read_command_log(path)
        assert check_command_log(log, part, arbitration=rule) == []
        other = "column_first" if rule == "round_robin" else "round_robin"
        counts[rule] = len(check_command_log(log, part, arbitration=other))
    if trace == "random":
        assert counts["round_robin"] > 0 and counts["column_first"] > 0
