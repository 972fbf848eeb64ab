"""The checker's arbitration rule: which bank a command log's channel should have served.

memctl's `[controller] arbitration` picks among the banks' commands either round-robin
(DRAMsim3's: the banks take turns from the one after the bank that last issued, row and
column commands alike) or column-first (a ready row hit before any ACT / PRE). A log alone
does not say what was queued, but two commands prove a request was waiting at a bank:

- an ACT (host) whose bank's next column commands, up to its next PRE, are all reads: the
  read that caused the ACT waited from it until the first of them, and could issue at any
  cycle in between at which a RD to that bank meets the timing table;
- a host PRE (open page) followed by an ACT: the request that closed the row waited for its
  ACT from the PRE on.

A channel that serves another bank while such a bank could issue breaks the rule if that bank
came first in turn (round_robin) or if it served a row command while such a read could issue
(column_first). Checked where the rule is the whole story: one command bus, no PIM commands,
and not while the bank's rank waits for a refresh (a REF of the rank between the two
commands). Violation name: `arbitration`.
"""
from __future__ import annotations

import bisect

ARBITRATIONS = ("round_robin", "column_first")


def arbitration_findings(log, part, arbitration: str):
    """(index, text, bank's index in the log) for each command that breaks the rule."""
    if arbitration not in ARBITRATIONS:
        raise ValueError(f"unknown arbitration {arbitration!r} (one of {', '.join(ARBITRATIONS)})")
    from pimrt.memctl.checker import ACT, PRE, RD, WR, REF, PIM_ENTER, HOST_REQ  # noqa: PLC0415
    o, tm = part.org, part.timing
    R, G, B = o["ranks"], o["bankgroups"], o["banks_per_group"]
    PC = o["pseudo_channels"]
    nbr = G * B
    N = R * nbr
    BURST = part.burst_cycles
    RL, WL = tm["CL"], tm["CWL"]
    ccd_l, ccd_s = max(BURST, tm["tCCD_L"]), max(BURST, tm["tCCD_S"])
    rtrs_rr = BURST + tm["tRTRS"]
    wtr_l, wtr_s = WL + BURST + tm["tWTR_L"], WL + BURST + tm["tWTR_S"]
    rtrs_wr = max(0, WL + BURST + tm["tRTRS"] - RL)
    open_page = part.controller.get("row_policy", "open") == "open"
    cmds = log["command"].tolist()
    if any(c >= PIM_ENTER for c in cmds):
        return []
    cyc = log["cycle"].tolist()
    reqs = log["requestor"].tolist()
    chans = [c * PC + max(p, 0) for c, p in zip(log["channel"].tolist(),
                                                  log["pseudo_channel"].tolist())]
    ranks = log["rank"].tolist()
    banks = [(r * nbr + g * B + b) if b >= 0 else -1 for r, g, b in
             zip(ranks, log["bankgroup"].tolist(), log["bank"].tolist())]
    n = len(cmds)
    # the next command at the same bank, and whether an ACT's columns are all reads
    nxt = [n] * n
    reads_only = [False] * n
    later: dict = {}
    cols_only_rd: dict = {}
    for i in range(n - 1, -1, -1):
        b = banks[i]
        if b < 0:
            continue
        key = (chans[i], b)
        nxt[i] = later.get(key, n)
        later[key] = i
        c = cmds[i]
        if c == ACT:
            reads_only[i] = cols_only_rd.get(key, True)
            cols_only_rd[key] = True
        elif c == PRE:
            cols_only_rd[key] = True
        elif c == WR:
            cols_only_rd[key] = False
    refs: dict = {}
    for i in range(n):
        if cmds[i] == REF:
            for r in ([ranks[i]] if ranks[i] >= 0 else range(R)):
                refs.setdefault((chans[i], r), []).append(cyc[i])

    def refresh_between(ch, r, a, b):
        ts = refs.get((ch, r))
        if not ts:
            return False
        k = bisect.bisect_right(ts, a)
        return k < len(ts) and ts[k] < b

    found = []
    state: dict = {}
    for i in range(n):
        ch = chans[i]
        s = state.get(ch)
        if s is None:
            s = state[ch] = {"ptr": 0, "wait": {}, "act": [None] * N, "pre": [None] * N,
                             "rd_g": {}, "rd_r": {}, "wr_g": {}, "wr_r": {}, "act_b": {},
                             "faw": {}, "ref": {}}
        c, t, b, req = cmds[i], cyc[i], banks[i], reqs[i]
        # ---- the rule, for a host command at bank b, against the banks known to wait
        if b >= 0 and req == HOST_REQ and s["wait"]:
            for x, (kind, since, until_i) in s["wait"].items():
                if x == b or cyc[until_i] <= t:
                    continue
                if kind == RD:
                    if arbitration == "round_robin":
                        if (x - s["ptr"]) % N >= (b - s["ptr"]) % N:
                            continue
                    elif c not in (ACT, PRE):
                        continue
                    ready = _rd_ready(s, x, t, nbr, B, tm["tRCDRD"], ccd_l, ccd_s, rtrs_rr,
                                      wtr_l, wtr_s, rtrs_wr)
                else:
                    if arbitration != "round_robin" or \
                            (x - s["ptr"]) % N >= (b - s["ptr"]) % N:
                        continue
                    ready = _act_ready(s, x, t, nbr, B, tm)
                if ready:
                    what = "RD" if kind == RD else "ACT"
                    rule = ("came first in turn (round_robin)" if arbitration == "round_robin"
                            else "a row command went before a ready read (column_first)")
                    found.append((i, f"bank {x}'s {what} (command {until_i}) could issue at "
                                     f"cycle {t} and {rule}", until_i))
                    break
        # ---- the command's effect
        if c == REF:
            for r in ([ranks[i]] if ranks[i] >= 0 else range(R)):
                s["ref"][r] = t
        if b < 0:
            continue
        s["wait"].pop(b, None)
        if req == HOST_REQ:
            s["ptr"] = (b + 1) % N
        r, g = b // nbr, b // B
        j = nxt[i]
        if c == ACT:
            s["act"][b] = t
            s["act_b"][b] = t
            s.setdefault("faw", {}).setdefault(r, []).append(t)
            del s["faw"][r][:-4]
            if (req == HOST_REQ and j < n and cmds[j] == RD and reads_only[i]
                    and not refresh_between(ch, r, t, cyc[j])):
                s["wait"][b] = (RD, t, j)
        elif c == PRE:
            s["pre"][b] = t
            s["act"][b] = None
            if (open_page and req == HOST_REQ and j < n and cmds[j] == ACT
                    and not refresh_between(ch, r, t, cyc[j])):
                s["wait"][b] = (ACT, t, j)
        elif c == RD:
            s["rd_g"][g] = t
            s["rd_r"][r] = max(t, s["rd_r"].get(r, t))
        elif c == WR:
            s["wr_g"][g] = t
            s["wr_r"][r] = t
    return found


def _rd_ready(s, x, t, nbr, B, tRCDRD, ccd_l, ccd_s, rtrs_rr, wtr_l, wtr_s, rtrs_wr):
    """could a RD to bank x issue at t, after the channel's commands so far?"""
    act = s["act"][x]
    if act is None or t - act < tRCDRD:
        return False
    r, g = x // nbr, x // B
    for gg, last in s["rd_g"].items():
        if gg // (nbr // B) != r:
            continue
        if t - last < (ccd_l if gg == g else ccd_s):
            return False
    for rr, last in s["rd_r"].items():
        if rr != r and t - last < rtrs_rr:
            return False
    for gg, last in s["wr_g"].items():
        if gg // (nbr // B) == r and t - last < (wtr_l if gg == g else wtr_s):
            return False
    for rr, last in s["wr_r"].items():
        if rr != r and t - last < rtrs_wr:
            return False
    return True


def _act_ready(s, x, t, nbr, B, tm):
    """could an ACT to bank x issue at t, after the channel's commands so far?"""
    r, g = x // nbr, x // B
    pre = s["pre"][x]
    if s["act"][x] is not None or pre is None or t - pre < tm["tRP"]:
        return False
    last_act = s["act_b"].get(x)
    if last_act is not None and t - last_act < tm["tRC"]:
        return False
    for ob, last in s["act_b"].items():
        if ob == x or ob // nbr != r:
            continue
        if t - last < (tm["tRRD_L"] if ob // B == g else tm["tRRD_S"]):
            return False
    faw = s["faw"].get(r, [])
    if len(faw) == 4 and t - faw[0] < tm["tFAW"]:
        return False
    ref = s["ref"].get(r)
    return ref is None or t - ref >= tm["tRFC"]
