"""An independent timing checker for memctl's command log (docs/memctl.md "Command log").

    violations = check_command_log_file("run.cmdlog.csv", load_part("hbm2"))
    for v in violations: print(v)

It replays the log once, keeping per bank / bank group / rank / channel the time (and log index)
of the last command of each kind, and checks every command against the timing-constraint
table, the bank-state rules and the PIM rules of docs/memctl.md. It shares no code with the C
model on purpose: it is the second opinion.

Scopes: a channel is (channel, pseudo_channel) — each pseudo-channel has its own command bus,
banks and mode; a rank is (channel, pseudo_channel, rank). Constraint names in Violation:

  tRC tRRD_L tRRD_S tFAW tRCDRD tRCDWR tRAS tRTP tWR tRP tCCD_L tCCD_S tRTRS read_to_write
  tWTR_L tWTR_S tRFC        the timing table (tRTRS: RD->RD / WR->WR / WR->RD across ranks;
                            read_to_write: RD -> WR, RL + BURST - WL + tRTRS, any rank)
  tRFCb                     ACT / PIM_ACT / REFB to a bank within tRFCb of its per-bank
                            refresh (REFB, refresh = "bank"); a REFB also waits tRP after the
                            bank's PRE and tRFC after its rank's REF, with the bank closed
                            (bank_open), to one bank of a part that gives tRFCb (bad_command)
  tRREFD                    ACT or REFB within tRREFD of a REFB to another bank of the rank
  command_bus               two commands on one channel in one cycle
  log_order                 a command with a cycle earlier than the one before it in the log
  bank_closed               RD / WR / PIM_RD / PIM_WR to a closed bank
  bank_open                 ACT / PIM_ACT to an open bank; REF, PIM_ENTER, PIM_EXIT with a bank
                            open
  wrong_row                 RD / WR to a row other than the open one
  pim_mode                  ACT/RD/WR/PRE while the channel is in PIM mode; a PIM bank command
                            outside PIM mode (serial, authority); PIM_ENTER twice, PIM_EXIT
                            outside PIM mode; PIM_ENTER/EXIT under bank_partition
  mode_switch               any command within mode_switch_cycles after PIM_ENTER / PIM_EXIT
  pim_column                two PIM column commands closer than the units take: the most
                            banks of the PIM scope one unit serves x tCCD_L
                            (part.pim_scope_column_cycles)
  bank_partition            a host command on a PIM bank, or a PIM command on a host bank
  arbitration               (with arbitration=) a bank proven to wait was passed over
                            (pimrt.memctl.arbitration)
  bad_command               unknown command, a field out of the part's range, a PIM command
                            on a part without [pim]
"""
from __future__ import annotations

import dataclasses
import gc
import pathlib
from typing import Iterable

import numpy as np

from pimrt.errors import TraceError

COMMANDS = ("ACT", "PRE", "RD", "WR", "REF", "PIM_ENTER", "PIM_EXIT", "PIM_ACT", "PIM_RD",
            "PIM_WR", "PIM_PRE", "REFB")
(ACT, PRE, RD, WR, REF, PIM_ENTER, PIM_EXIT, PIM_ACT, PIM_RD, PIM_WR, PIM_PRE) = range(11)
REFB = 11  # one bank's refresh (refresh = "bank")
COMMAND_CODES = {name: i for i, name in enumerate(COMMANDS)}
REQUESTORS = ("host", "pim", "ctrl")
HOST_REQ, PIM_REQ, CTRL_REQ = range(3)
REQUESTOR_CODES = {name: i for i, name in enumerate(REQUESTORS)}

LOG_COLUMNS = ("cycle", "channel", "pseudo_channel", "rank", "bankgroup", "bank", "row",
               "column", "command", "requestor")
LOG_DTYPE = np.dtype([
    ("cycle", "<i8"), ("channel", "<i4"), ("pseudo_channel", "<i4"), ("rank", "<i4"),
    ("bankgroup", "<i4"), ("bank", "<i4"), ("row", "<i8"), ("column", "<i8"),
    ("command", "u1"), ("requestor", "u1"),
])
POLICIES = ("serial", "authority", "bank_partition")

_NEVER = -(1 << 62)


@dataclasses.dataclass(frozen=True)
class Violation:
    """One broken rule: the command at log index `index` (0-based, header not counted)."""

    index: int
    cycle: int
    command: str
    constraint: str
    required: int | None   # minimum distance in cycles (None: not a distance rule)
    actual: int | None     # the distance found
    message: str

    def __str__(self) -> str:
        return self.message


# ---------------------------------------------------------------------------------------------
# reading logs
def _parse_code(token: str, codes: dict, what: str, where: str) -> int:
    code = codes.get(token)
    if code is None:
        code = codes.get(token.strip().upper() if what == "command" else token.strip().lower())
    if code is None:
        raise TraceError(f"{where}: unknown {what} {token!r} (one of {', '.join(codes)})")
    return code


class _NoGC:
    """Cyclic GC off while building millions of small containers (it would rescan them)."""

    def __enter__(self):
        self.was = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc):
        if self.was:
            gc.enable()


def parse_command_log(text: str | bytes, name: str = "<log>") -> np.ndarray:
    """The CSV text of a command log (header line first) as an array of LOG_DTYPE."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    lines = text.split("\n")
    first = 0
    while first < len(lines) and not lines[first].strip():
        first += 1
    if first == len(lines):
        return np.zeros(0, LOG_DTYPE)
    header = [h.strip() for h in lines[first].split(",")]
    if tuple(header) != LOG_COLUMNS:
        raise TraceError(f"{name}:{first + 1}: header {','.join(header)!r} is not "
                         f"{','.join(LOG_COLUMNS)!r}")
    body = lines[first + 1:]
    while body and not body[-1].strip():
        body.pop()
    with _NoGC():
        out = _parse_columns(body)
        if out is None:
            out = _parse_rows(body, first + 2, name)   # the slow path names the bad line
    return out


def _parse_columns(body: list[str]) -> np.ndarray | None:
    """Column-wise parse of clean lines; None when anything is off."""
    n = len(body)
    out = np.zeros(n, LOG_DTYPE)
    if n == 0:
        return out
    rows = [line.split(",") for line in body]
    if any(len(r) != 10 for r in rows):
        return None
    cols = list(zip(*rows))
    try:
        for k, name in enumerate(LOG_COLUMNS[:8]):
            out[name] = np.fromiter(map(int, cols[k]), np.int64, n)
    except ValueError:
        return None
    for k, codes in ((8, COMMAND_CODES), (9, REQUESTOR_CODES)):
        vals = [codes.get(x, -1) for x in cols[k]]
        arr = np.array(vals, dtype=np.int16)
        if (arr < 0).any():
            return None
        out[LOG_COLUMNS[k]] = arr
    return out


def _parse_rows(body: list[str], first_no: int, name: str) -> np.ndarray:
    rows = []
    append = rows.append
    cmd_codes, req_codes = COMMAND_CODES, REQUESTOR_CODES
    for no, line in enumerate(body, first_no):
        if not line or line.isspace():
            continue
        f = line.split(",")
        if len(f) != 10:
            raise TraceError(f"{name}:{no}: expected 10 comma-separated fields, found {len(f)}")
        try:
            nums = [int(x) for x in f[:8]]
        except ValueError:
            k = next(k for k, x in enumerate(f[:8]) if not _is_int(x))
            raise TraceError(f"{name}:{no}: {LOG_COLUMNS[k]} {f[k].strip()!r} is not an "
                             f"integer") from None
        c = cmd_codes.get(f[8])
        if c is None:
            c = _parse_code(f[8], cmd_codes, "command", f"{name}:{no}")
        r = req_codes.get(f[9])
        if r is None:
            r = _parse_code(f[9], req_codes, "requestor", f"{name}:{no}")
        nums.append(c)
        nums.append(r)
        append(tuple(nums))
    return np.array(rows, dtype=LOG_DTYPE) if rows else np.zeros(0, LOG_DTYPE)


def _is_int(x: str) -> bool:
    try:
        int(x)
        return True
    except ValueError:
        return False


def read_command_log(path) -> np.ndarray:
    path = pathlib.Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TraceError(f"{path}: cannot read: {exc.strerror}") from None
    return parse_command_log(text, str(path))


def as_command_log(log) -> np.ndarray:
    """A log as LOG_DTYPE: an array of LOG_DTYPE, a structured array with the same columns
    (command / requestor as names or codes), CSV text, or a sequence of rows (tuples in
    column order or dicts by column name)."""
    if isinstance(log, np.ndarray) and log.dtype == LOG_DTYPE:
        return log
    if isinstance(log, (str, bytes)):
        return parse_command_log(log)
    if isinstance(log, np.ndarray) and log.dtype.names:
        missing = [c for c in LOG_COLUMNS if c not in log.dtype.names]
        if missing:
            raise TraceError(f"command log array lacks columns {missing}")
        out = np.zeros(len(log), LOG_DTYPE)
        for c in LOG_COLUMNS[:8]:
            out[c] = log[c]
        for c, codes in (("command", COMMAND_CODES), ("requestor", REQUESTOR_CODES)):
            col = log[c]
            if col.dtype.kind in "ui":
                out[c] = col
            else:
                out[c] = [_parse_code(x.decode() if isinstance(x, bytes) else str(x), codes, c,
                                      "command log") for x in col.tolist()]
        return out
    rows = list(log)
    out = np.zeros(len(rows), LOG_DTYPE)
    for i, row in enumerate(rows):
        if isinstance(row, dict):
            row = tuple(row[c] for c in LOG_COLUMNS)
        row = list(row)
        if isinstance(row[8], str):
            row[8] = _parse_code(row[8], COMMAND_CODES, "command", f"row {i}")
        if isinstance(row[9], str):
            row[9] = _parse_code(row[9], REQUESTOR_CODES, "requestor", f"row {i}")
        out[i] = tuple(row)
    return out


def format_command_log(log) -> str:
    """CSV text (header included) of a log."""
    log = as_command_log(log)
    lines = [",".join(LOG_COLUMNS)]
    for r in log.tolist():
        lines.append(",".join(str(x) for x in r[:8]) + f",{COMMANDS[r[8]]},{REQUESTORS[r[9]]}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
def _pim_bank_set(part, pim_banks) -> set[int] | None:
    """pim_banks as indices within a channel: rank * banks_per_rank + bankgroup *
    banks_per_group + bank (the convention of memctl's Options.pim_banks). An int is such an
    index; a (bankgroup, bank) pair means that bank in every rank; (rank, bankgroup, bank)
    one bank."""
    if pim_banks is None:
        return None
    o = part.org
    bpg, nbr, R = o["banks_per_group"], part.banks_per_rank, o["ranks"]
    out = set()
    for b in pim_banks:
        if isinstance(b, (tuple, list)):
            if len(b) == 2:
                ranks, (bg, ba) = range(R), b
            else:
                rk, bg, ba = b
                ranks = [rk]
            if not (0 <= bg < o["bankgroups"] and 0 <= ba < bpg) or \
                    not all(0 <= rk < R for rk in ranks):
                raise ValueError(f"pim_banks: {tuple(b)} is not a bank of {part.name}")
            out.update(rk * nbr + bg * bpg + ba for rk in ranks)
        else:
            b = int(b)
            if not 0 <= b < R * nbr:
                raise ValueError(f"pim_banks: bank {b} is not within 0..{R * nbr - 1}")
            out.add(b)
    return out


def check_command_log(log, part, policy: str | None = None,
                      pim_banks: Iterable | None = None, limit: int | None = None,
                      dual_command_bus: bool | None = None,
                      arbitration: str | None = None) -> list[Violation]:
    """Every violation in a command log (see the module doc for the constraint names).

    log: see as_command_log. part: a pimrt.memctl.config.Part. policy: serial, authority
    (both: PIM scope = every bank of the channel, host excluded from PIM mode) or
    bank_partition (PIM scope = pim_banks, no mode changes); None = serial rules.
    pim_banks: for bank_partition, the PIM's banks of each channel (see _pim_bank_set: flat
    indices rank * banks_per_rank + bankgroup * banks_per_group + bank, or (bankgroup, bank)
    pairs meaning every rank). limit: stop after this many violations. dual_command_bus: allow
    one row command (ACT, PRE, REF, PIM_*) and one column command (RD, WR, PIM_RD, PIM_WR) in
    the same cycle on a channel; None = the part's controller.dual_command_bus.
    arbitration: round_robin or column_first also checks that rule where the log proves a
    request waited (pimrt.memctl.arbitration; one command bus only); None: not checked."""
    log = as_command_log(log)
    if policy is not None and policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r} (one of {', '.join(POLICIES)})")
    partition = policy == "bank_partition"
    pim_set = _pim_bank_set(part, pim_banks)
    if partition and pim_set is None:
        raise ValueError("policy bank_partition needs pim_banks")
    if dual_command_bus is None:
        dual_command_bus = bool(part.controller.get("dual_command_bus", False))
    found = _Checker(part, partition, pim_set, limit, dual_command_bus).run(log)
    if arbitration is not None and not dual_command_bus:
        from pimrt.memctl.arbitration import arbitration_findings  # noqa: PLC0415
        for i, text, _ in arbitration_findings(log, part, arbitration):
            name = COMMANDS[int(log["command"][i])]
            t = int(log["cycle"][i])
            found.append(Violation(i, t, name, "arbitration", None, None,
                                   f"command {i} ({name} at cycle {t}): arbitration: {text}"))
        found.sort(key=lambda v: v.index)
        if limit is not None:
            found = found[:limit]
    return found


def check_command_log_file(path, part, policy: str | None = None,
                           pim_banks: Iterable | None = None, limit: int | None = None,
                           dual_command_bus: bool | None = None,
                      arbitration: str | None = None) -> list[Violation]:
    return check_command_log(read_command_log(path), part, policy, pim_banks, limit,
                             dual_command_bus, arbitration)


class _Stop(Exception):
    pass


class _Checker:
    def __init__(self, part, partition: bool, pim_set: set[int] | None, limit: int | None,
                 dual_bus: bool = False):
        o, tm = part.org, part.timing
        self.part = part
        self.partition = partition
        self.limit = limit
        self.dual_bus = dual_bus
        self.PC = o["pseudo_channels"]
        self.NCH = o["channels"]
        self.R = o["ranks"]
        self.G = o["bankgroups"]
        self.B = o["banks_per_group"]
        self.rows = o["rows"]
        self.cols = part.columns_per_row
        BURST = part.burst_cycles
        RL, WL = tm["CL"], tm["CWL"]
        self.t = {
            "tRC": tm["tRC"], "tRRD_L": tm["tRRD_L"], "tRRD_S": tm["tRRD_S"],
            "tFAW": tm["tFAW"], "tRCDRD": tm["tRCDRD"], "tRCDWR": tm["tRCDWR"],
            "tRAS": tm["tRAS"], "tRTP": tm["tRTP"], "tWR": WL + BURST + tm["tWR"],
            "tRP": tm["tRP"], "tCCD_L": max(BURST, tm["tCCD_L"]),
            "tCCD_S": max(BURST, tm["tCCD_S"]), "tRTRS_rr": BURST + tm["tRTRS"],
            "read_to_write": RL + BURST - WL + tm["tRTRS"],
            "tWTR_L": WL + BURST + tm["tWTR_L"], "tWTR_S": WL + BURST + tm["tWTR_S"],
            "tRTRS_wr": max(0, WL + BURST + tm["tRTRS"] - RL), "tRFC": tm["tRFC"],
            "tRFCb": tm.get("tRFCb"),       # None: the part has no per-bank refresh
            "tRREFD": tm.get("tRREFD", 0),
        }
        self.has_pim = part.pim is not None
        self.mode_switch = part.pim["mode_switch_cycles"] if self.has_pim else 0
        # PIM scope: bank indices within a channel (rank * banks_per_rank + local bank)
        if partition:
            self.scope = sorted(pim_set)
        else:
            self.scope = list(range(self.R * self.G * self.B))
        # each unit takes its banks of the scope one after another, tCCD_L apart
        self.pim_col = part.pim_scope_column_cycles(self.scope) if self.has_pim else 0
        self.pim_set = pim_set if partition else None
        self.violations: list[Violation] = []

    # ------------------------------------------------------------------------------------------
    def run(self, log: np.ndarray) -> list[Violation]:
        try:
            with _NoGC():
                self._run(log)
        except _Stop:
            pass
        return self.violations

    def _run(self, log: np.ndarray) -> None:
        PC, R, G, B = self.PC, self.R, self.G, self.B
        NC = self.NCH * PC
        NR, NG = NC * R, NC * R * G
        NB = NG * B
        T = self.t
        tRC, tRRD_L, tRRD_S, tFAW = T["tRC"], T["tRRD_L"], T["tRRD_S"], T["tFAW"]
        tRCDRD, tRCDWR, tRAS, tRTP, tWRp = (T["tRCDRD"], T["tRCDWR"], T["tRAS"], T["tRTP"],
                                            T["tWR"])
        tRP, ccd_l, ccd_s, rtrs_rr = T["tRP"], T["tCCD_L"], T["tCCD_S"], T["tRTRS_rr"]
        rd_wr, wtr_l, wtr_s, rtrs_wr, tRFC = (T["read_to_write"], T["tWTR_L"], T["tWTR_S"],
                                              T["tRTRS_wr"], T["tRFC"])
        tRFCb, tRREFD = T["tRFCb"], T["tRREFD"]
        NEVER = _NEVER
        # per bank
        b_refb = [NEVER] * NB     # per-bank refresh (REFB)
        b_refb_i = [-1] * NB
        r_refb = [NEVER] * NR     # the rank's last REFB (tRREFD)
        r_refb_i = [-1] * NR
        b_open = [False] * NB
        b_row = [-1] * NB
        b_act = [NEVER] * NB      # ACT or PIM_ACT
        b_act_i = [-1] * NB
        b_hact = [NEVER] * NB     # host ACT only (tRRD)
        b_hact_i = [-1] * NB
        b_pre = [NEVER] * NB      # PRE / PIM_PRE that closed the bank
        b_pre_i = [-1] * NB
        b_rd = [NEVER] * NB       # RD / PIM_RD (tRTP)
        b_rd_i = [-1] * NB
        b_wr = [NEVER] * NB       # WR / PIM_WR (write recovery)
        b_wr_i = [-1] * NB
        # per bank group: host ACT / RD / WR
        g_act = [NEVER] * NG
        g_act_i = [-1] * NG
        g_rd = [NEVER] * NG
        g_rd_i = [-1] * NG
        g_wr = [NEVER] * NG
        g_wr_i = [-1] * NG
        # per rank
        r_rd = [NEVER] * NR
        r_rd_i = [-1] * NR
        r_wr = [NEVER] * NR
        r_wr_i = [-1] * NR
        r_ref = [NEVER] * NR
        r_ref_i = [-1] * NR
        r_faw = [[] for _ in range(NR)]   # (cycle, index) of the last 4 host ACTs
        r_open = [0] * NR                 # open banks
        # per channel
        c_last = [NEVER] * NC             # last command (row command with a dual bus)
        c_last_i = [-1] * NC
        c_lastc = [NEVER] * NC            # last column command with a dual bus
        c_lastc_i = [-1] * NC
        dual_bus = self.dual_bus
        c_rd = [NEVER] * NC
        c_rd_i = [-1] * NC
        c_mode = [False] * NC             # in PIM mode
        c_sw_until = [NEVER] * NC         # end of the mode switch window
        c_sw_at = [NEVER] * NC
        c_sw_i = [-1] * NC
        c_pcol = [NEVER] * NC
        c_pcol_i = [-1] * NC

        partition = self.partition
        pim_set = self.pim_set
        has_pim = self.has_pim
        mode_switch = self.mode_switch
        pim_col = self.pim_col
        scope = self.scope
        nbr = G * B
        rows_n = self.rows
        cmds = log["command"].tolist()
        reqs = log["requestor"].tolist()
        cyc = log["cycle"].tolist()
        chl = log["channel"].tolist()
        pcl = log["pseudo_channel"].tolist()
        ral = log["rank"].tolist()
        bgl = log["bankgroup"].tolist()
        bal = log["bank"].tolist()
        rowl = log["row"].tolist()
        cmds_all = cmds

        found: list = []

        def v(constraint, required, actual, prev_i, text=None):
            found.append((constraint, required, actual, prev_i, text))

        prev_t = NEVER
        prev_idx = -1
        for i in range(len(cmds)):
            cmd = cmds[i]
            t = cyc[i]
            ch = chl[i]
            pc = pcl[i]
            rank = ral[i]
            bg = bgl[i]
            ba = bal[i]
            row = rowl[i]
            if t < prev_t:
                v("log_order", None, t - prev_t, prev_idx, f"cycle {t} is before cycle "
                  f"{prev_t} of command {prev_idx}: the log must be in cycle order")
            prev_t, prev_idx = t, i

            # ---- fields and targets ------------------------------------------------------
            if cmd > REFB:
                v("bad_command", None, None, -1, f"unknown command code {cmd}")
                self._flush(i, log, found)
                continue
            if pc < 0 and PC == 1:
                pc = 0
            if not (0 <= ch < self.NCH) or not (-1 <= pc < PC) or not (-1 <= rank < R) \
                    or not (-1 <= bg < G) or not (-1 <= ba < B) or (bg < 0) != (ba < 0):
                v("bad_command", None, None, -1, "channel, pseudo_channel, rank, bankgroup or "
                  "bank out of the part's range (or only one of bankgroup/bank given)")
                self._flush(i, log, found)
                continue
            single_bank = ba >= 0
            if cmd in (ACT, RD, WR) and (not single_bank or rank < 0 or pc < 0):
                v("bad_command", None, None, -1, f"{COMMANDS[cmd]} needs a pseudo_channel, "
                  f"rank, bankgroup and bank")
                self._flush(i, log, found)
                continue
            if cmd in (ACT, RD, WR) or (cmd >= PIM_ACT and cmd != PIM_EXIT):
                if row >= rows_n or (cmd in (ACT, PIM_ACT) and row < 0):
                    v("bad_command", None, None, -1, f"row {row} out of range 0..{rows_n - 1}")
                    self._flush(i, log, found)
                    continue
            if cmd == REFB and (tRFCb is None or not single_bank or rank < 0):
                v("bad_command", None, None, -1, "REFB needs a rank, bankgroup and bank, on a "
                  "part that gives tRFCb (per-bank refresh)")
                self._flush(i, log, found)
                continue
            if PIM_ENTER <= cmd <= PIM_PRE and not has_pim:
                v("bad_command", None, None, -1, f"{COMMANDS[cmd]} on a part without [pim]")
                self._flush(i, log, found)
                continue
            chans = [ch * PC + pc] if pc >= 0 else [ch * PC + p for p in range(PC)]

            # ---- channel: command bus, order, mode switch ---------------------------------
            column_cmd = dual_bus and cmd in (RD, WR, PIM_RD, PIM_WR)
            for c in chans:
                if column_cmd:
                    if t == c_lastc[c]:
                        v("command_bus", 1, 0, c_lastc_i[c], "two column commands on the "
                          "channel in one cycle")
                    c_lastc[c] = t
                    c_lastc_i[c] = i
                else:
                    if t == c_last[c]:
                        v("command_bus", 1, 0, c_last_i[c], "two row commands on the channel "
                          "in one cycle" if dual_bus else "two commands on the channel in one "
                          "cycle")
                    c_last[c] = t
                    c_last_i[c] = i
                if t < c_sw_until[c]:
                    v("mode_switch", mode_switch, t - c_sw_at[c], c_sw_i[c],
                      f"{COMMANDS[cmds_all[c_sw_i[c]]]} mode switch not over")

            # ---- host bank commands ---------------------------------------------------------
            if cmd <= WR:
                for c in chans:
                    if c_mode[c]:
                        v("pim_mode", None, None, -1, f"{COMMANDS[cmd]} while the channel is in "
                          f"PIM mode")
                ranks = [rank] if rank >= 0 else list(range(R))
                if single_bank:
                    local = [bg * B + ba]
                else:
                    local = list(range(nbr))
                if partition and (cmd != PRE or reqs[i] == HOST_REQ):
                    if any(rk * nbr + lb in pim_set for rk in ranks for lb in local):
                        v("bank_partition", None, None, -1, f"{COMMANDS[cmd]} on a PIM bank")
                for c in chans:
                    for rk in ranks:
                        r = c * R + rk
                        for lb in local:
                            b = r * nbr + lb
                            g = b // B
                            if cmd == ACT:
                                if b_open[b]:
                                    v("bank_open", None, None, b_act_i[b], "ACT to an open bank")
                                d = t - b_act[b]
                                if d < tRC:
                                    v("tRC", tRC, d, b_act_i[b])
                                d = t - b_pre[b]
                                if d < tRP:
                                    v("tRP", tRP, d, b_pre_i[b])
                                d = t - r_ref[r]
                                if d < tRFC:
                                    v("tRFC", tRFC, d, r_ref_i[r])
                                d = t - b_refb[b]
                                if tRFCb is not None and d < tRFCb:
                                    v("tRFCb", tRFCb, d, b_refb_i[b])
                                d = t - r_refb[r]
                                if d < tRREFD:
                                    v("tRREFD", tRREFD, d, r_refb_i[r])
                                # tRRD_L: other banks of the bank group
                                g0 = g * B
                                best = NEVER
                                bi = -1
                                for ob in range(g0, g0 + B):
                                    if ob != b and b_hact[ob] > best:
                                        best, bi = b_hact[ob], b_hact_i[ob]
                                d = t - best
                                if d < tRRD_L:
                                    v("tRRD_L", tRRD_L, d, bi)
                                # tRRD_S: other bank groups of the rank
                                r0 = r * G
                                best = NEVER
                                bi = -1
                                for og in range(r0, r0 + G):
                                    if og != g and g_act[og] > best:
                                        best, bi = g_act[og], g_act_i[og]
                                d = t - best
                                if d < tRRD_S:
                                    v("tRRD_S", tRRD_S, d, bi)
                                faw = r_faw[r]
                                if len(faw) == 4:
                                    d = t - faw[0][0]
                                    if d < tFAW:
                                        v("tFAW", tFAW, d, faw[0][1], "a fifth ACT within "
                                          "tFAW")
                                    del faw[0]
                                faw.append((t, i))
                                b_open[b] = True
                                b_row[b] = row
                                r_open[r] += 1
                                b_act[b] = b_hact[b] = g_act[g] = t
                                b_act_i[b] = b_hact_i[b] = g_act_i[g] = i
                            elif cmd == PRE:
                                if not b_open[b]:
                                    continue        # precharging a closed bank: no-op
                                self._pre_checks(b, t, v, b_act, b_act_i, b_rd, b_rd_i, b_wr,
                                                 b_wr_i, tRAS, tRTP, tWRp)
                                b_open[b] = False
                                r_open[r] -= 1
                                b_pre[b] = t
                                b_pre_i[b] = i
                            else:   # RD, WR
                                if not b_open[b]:
                                    v("bank_closed", None, None, b_pre_i[b],
                                      f"{COMMANDS[cmd]} to a closed bank")
                                elif row >= 0 and b_row[b] >= 0 and row != b_row[b]:
                                    v("wrong_row", None, None, b_act_i[b],
                                      f"{COMMANDS[cmd]} to row {row}, open row is {b_row[b]}")
                                if cmd == RD:
                                    d = t - b_act[b]
                                    if d < tRCDRD:
                                        v("tRCDRD", tRCDRD, d, b_act_i[b])
                                    d = t - g_rd[g]
                                    if d < ccd_l:
                                        v("tCCD_L", ccd_l, d, g_rd_i[g])
                                    d = t - g_wr[g]
                                    if d < wtr_l:
                                        v("tWTR_L", wtr_l, d, g_wr_i[g])
                                    r0 = r * G
                                    best_r = best_w = NEVER
                                    ri = wi = -1
                                    for og in range(r0, r0 + G):
                                        if og != g:
                                            if g_rd[og] > best_r:
                                                best_r, ri = g_rd[og], g_rd_i[og]
                                            if g_wr[og] > best_w:
                                                best_w, wi = g_wr[og], g_wr_i[og]
                                    d = t - best_r
                                    if d < ccd_s:
                                        v("tCCD_S", ccd_s, d, ri)
                                    d = t - best_w
                                    if d < wtr_s:
                                        v("tWTR_S", wtr_s, d, wi)
                                    if R > 1:
                                        c0 = c * R
                                        best_r = best_w = NEVER
                                        for orr in range(c0, c0 + R):
                                            if orr != r:
                                                if r_rd[orr] > best_r:
                                                    best_r, ri = r_rd[orr], r_rd_i[orr]
                                                if r_wr[orr] > best_w:
                                                    best_w, wi = r_wr[orr], r_wr_i[orr]
                                        d = t - best_r
                                        if d < rtrs_rr:
                                            v("tRTRS", rtrs_rr, d, ri, "RD after RD of "
                                              "another rank")
                                        d = t - best_w
                                        if d < rtrs_wr:
                                            v("tRTRS", rtrs_wr, d, wi, "RD after WR of "
                                              "another rank")
                                    b_rd[b] = g_rd[g] = r_rd[r] = c_rd[c] = t
                                    b_rd_i[b] = g_rd_i[g] = r_rd_i[r] = c_rd_i[c] = i
                                else:
                                    d = t - b_act[b]
                                    if d < tRCDWR:
                                        v("tRCDWR", tRCDWR, d, b_act_i[b])
                                    d = t - g_wr[g]
                                    if d < ccd_l:
                                        v("tCCD_L", ccd_l, d, g_wr_i[g])
                                    r0 = r * G
                                    best_w = NEVER
                                    wi = -1
                                    for og in range(r0, r0 + G):
                                        if og != g and g_wr[og] > best_w:
                                            best_w, wi = g_wr[og], g_wr_i[og]
                                    d = t - best_w
                                    if d < ccd_s:
                                        v("tCCD_S", ccd_s, d, wi)
                                    if R > 1:
                                        c0 = c * R
                                        best_w = NEVER
                                        for orr in range(c0, c0 + R):
                                            if orr != r and r_wr[orr] > best_w:
                                                best_w, wi = r_wr[orr], r_wr_i[orr]
                                        d = t - best_w
                                        if d < rtrs_rr:
                                            v("tRTRS", rtrs_rr, d, wi, "WR after WR of "
                                              "another rank")
                                    d = t - c_rd[c]
                                    if d < rd_wr:
                                        v("read_to_write", rd_wr, d, c_rd_i[c])
                                    b_wr[b] = g_wr[g] = r_wr[r] = t
                                    b_wr_i[b] = g_wr_i[g] = r_wr_i[r] = i

            elif cmd == REF:
                ranks = [rank] if rank >= 0 else list(range(R))
                for c in chans:
                    for rk in ranks:
                        r = c * R + rk
                        if r_open[r]:
                            ob = next(b for b in range(r * nbr, (r + 1) * nbr) if b_open[b])
                            v("bank_open", None, None, b_act_i[ob], f"REF with {r_open[r]} "
                              f"bank(s) of the rank open")
                        worst = NEVER
                        wi = -1
                        for b in range(r * nbr, (r + 1) * nbr):
                            if b_pre[b] > worst:
                                worst, wi = b_pre[b], b_pre_i[b]
                        d = t - worst
                        if d < tRP:
                            v("tRP", tRP, d, wi, "REF too soon after a PRE")
                        d = t - r_ref[r]
                        if d < tRFC:
                            v("tRFC", tRFC, d, r_ref_i[r])
                        r_ref[r] = t
                        r_ref_i[r] = i

            elif cmd == PIM_ENTER or cmd == PIM_EXIT:
                if partition:
                    v("pim_mode", None, None, -1, f"{COMMANDS[cmd]} under bank_partition (the "
                      f"channel never changes mode)")
                for c in chans:
                    if cmd == PIM_ENTER and c_mode[c]:
                        v("pim_mode", None, None, c_sw_i[c], "PIM_ENTER while in PIM mode")
                    if cmd == PIM_EXIT and not c_mode[c]:
                        v("pim_mode", None, None, -1, "PIM_EXIT outside PIM mode")
                    worst = NEVER
                    wi = -1
                    n_open = 0
                    oi = -1
                    base = c * R * nbr
                    for f in scope:
                        if rank < 0 or f // nbr == rank:
                            b = base + f
                            if b_open[b]:
                                n_open += 1
                                oi = b_act_i[b]
                            if b_pre[b] > worst:
                                worst, wi = b_pre[b], b_pre_i[b]
                    if n_open:
                        v("bank_open", None, None, oi, f"{COMMANDS[cmd]} with {n_open} bank(s) "
                          f"open")
                    if cmd == PIM_ENTER:
                        d = t - worst
                        if d < tRP:
                            v("tRP", tRP, d, wi, "PIM_ENTER too soon after a PRE")
                    c_mode[c] = cmd == PIM_ENTER
                    c_sw_until[c] = t + mode_switch
                    c_sw_at[c] = t
                    c_sw_i[c] = i

            elif cmd == REFB:
                for c in chans:
                    r = c * R + rank
                    b = r * nbr + bg * B + ba
                    if b_open[b]:
                        v("bank_open", None, None, b_act_i[b], "REFB to an open bank")
                    d = t - b_pre[b]
                    if d < tRP:
                        v("tRP", tRP, d, b_pre_i[b], "REFB too soon after a PRE")
                    d = t - b_refb[b]
                    if d < tRFCb:
                        v("tRFCb", tRFCb, d, b_refb_i[b], "REFB during the bank's refresh")
                    d = t - r_ref[r]
                    if d < tRFC:
                        v("tRFC", tRFC, d, r_ref_i[r])
                    d = t - r_refb[r]
                    if d < tRREFD:
                        v("tRREFD", tRREFD, d, r_refb_i[r], "REFB too soon after another")
                    b_refb[b] = t
                    b_refb_i[b] = i
                    r_refb[r] = t
                    r_refb_i[r] = i

            else:   # PIM_ACT, PIM_RD, PIM_WR, PIM_PRE
                if not partition:
                    for c in chans:
                        if not c_mode[c]:
                            v("pim_mode", None, None, -1, f"{COMMANDS[cmd]} outside PIM mode")
                if single_bank:
                    targets = [rk * nbr + bg * B + ba for rk in
                               ([rank] if rank >= 0 else range(R))]
                    if partition and any(f not in pim_set for f in targets):
                        v("bank_partition", None, None, -1, f"{COMMANDS[cmd]} on a host bank")
                elif rank >= 0:
                    targets = [f for f in scope if f // nbr == rank]
                else:
                    targets = scope
                if cmd == PIM_RD or cmd == PIM_WR:
                    for c in chans:
                        d = t - c_pcol[c]
                        if d < pim_col:
                            v("pim_column", pim_col, d, c_pcol_i[c])
                        c_pcol[c] = t
                        c_pcol_i[c] = i
                for c in chans:
                    base = c * R * nbr
                    for f in targets:
                        b = base + f
                        r = c * R + f // nbr
                        if cmd == PIM_ACT:
                            if b_open[b]:
                                v("bank_open", None, None, b_act_i[b],
                                  "PIM_ACT to an open bank")
                            d = t - b_act[b]
                            if d < tRC:
                                v("tRC", tRC, d, b_act_i[b])
                            d = t - b_pre[b]
                            if d < tRP:
                                v("tRP", tRP, d, b_pre_i[b])
                            d = t - r_ref[r]
                            if d < tRFC:
                                v("tRFC", tRFC, d, r_ref_i[r])
                            d = t - b_refb[b]
                            if tRFCb is not None and d < tRFCb:
                                v("tRFCb", tRFCb, d, b_refb_i[b])
                            if not b_open[b]:
                                r_open[r] += 1
                            b_open[b] = True
                            b_row[b] = row
                            b_act[b] = t
                            b_act_i[b] = i
                        elif cmd == PIM_PRE:
                            if not b_open[b]:
                                continue
                            self._pre_checks(b, t, v, b_act, b_act_i, b_rd, b_rd_i, b_wr,
                                             b_wr_i, tRAS, tRTP, tWRp)
                            b_open[b] = False
                            r_open[r] -= 1
                            b_pre[b] = t
                            b_pre_i[b] = i
                        else:
                            if not b_open[b]:
                                v("bank_closed", None, None, b_pre_i[b],
                                  f"{COMMANDS[cmd]} to a closed bank")
                            elif row >= 0 and b_row[b] >= 0 and row != b_row[b]:
                                v("wrong_row", None, None, b_act_i[b],
                                  f"{COMMANDS[cmd]} to row {row}, open row is {b_row[b]}")
                            d = t - b_act[b]
                            if cmd == PIM_RD:
                                if d < tRCDRD:
                                    v("tRCDRD", tRCDRD, d, b_act_i[b])
                                b_rd[b] = t
                                b_rd_i[b] = i
                            else:
                                if d < tRCDWR:
                                    v("tRCDWR", tRCDWR, d, b_act_i[b])
                                b_wr[b] = t
                                b_wr_i[b] = i
            if found:
                self._flush(i, log, found)

    @staticmethod
    def _pre_checks(b, t, v, b_act, b_act_i, b_rd, b_rd_i, b_wr, b_wr_i, tRAS, tRTP, tWRp):
        d = t - b_act[b]
        if d < tRAS:
            v("tRAS", tRAS, d, b_act_i[b])
        if b_rd_i[b] > b_act_i[b]:            # a read since the bank opened
            d = t - b_rd[b]
            if d < tRTP:
                v("tRTP", tRTP, d, b_rd_i[b])
        if b_wr_i[b] > b_act_i[b]:
            d = t - b_wr[b]
            if d < tWRp:
                v("tWR", tWRp, d, b_wr_i[b], "PRE too soon after WR (WL + BURST + tWR)")

    def _flush(self, i: int, log: np.ndarray, found: list) -> None:
        """One Violation per constraint for command i (the tightest when several)."""
        rec = log[i]
        cmd = int(rec["command"])
        name = COMMANDS[cmd] if cmd < len(COMMANDS) else f"#{cmd}"
        t = int(rec["cycle"])
        best: dict[str, tuple] = {}
        for item in found:
            key = item[0]
            old = best.get(key)
            if old is None or (item[2] is not None and old[2] is not None and item[2] < old[2]):
                best[key] = item
        found.clear()
        where = (f"ch {rec['channel']} pc {rec['pseudo_channel']} ra {rec['rank']} bg "
                 f"{rec['bankgroup']} ba {rec['bank']} row {rec['row']}")
        for constraint, required, actual, prev_i, text in best.values():
            msg = f"command {i} ({name} at cycle {t}, {where}): {constraint}"
            prev = ""
            if prev_i is not None and prev_i >= 0:
                p = log[prev_i]
                pc = int(p["command"])
                pname = COMMANDS[pc] if pc < len(COMMANDS) else f"#{pc}"
                prev = f"{pname} at cycle {int(p['cycle'])} (command {prev_i})"
            if required is not None:
                msg += f": needs {required} cycles"
                msg += f" after {prev}" if prev else ""
                msg += f", found {actual}"
                if text:
                    msg += f" ({text})"
            else:
                msg += f": {text}" if text else ""
                if prev:
                    msg += f" (see {prev})"
            self.violations.append(Violation(i, t, name, constraint, required, actual, msg))
            if self.limit is not None and len(self.violations) >= self.limit:
                raise _Stop


__all__ = [
    "Violation", "check_command_log", "check_command_log_file", "read_command_log",
    "parse_command_log", "as_command_log", "format_command_log", "COMMANDS", "REQUESTORS",
    "LOG_COLUMNS", "LOG_DTYPE", "POLICIES",
]
