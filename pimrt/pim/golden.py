"""Golden model: an interpreter of the micro-ISA over numpy, bit-exact with hw/ (values,
faults, program counter and cycle count: one instruction per cycle).

`step` is the specification: one instruction at a time. For speed, when a counted loop whose
body is straight-line code (data ops, ADDP, NOP) comes round for the second time, the
remaining iterations run at once as numpy arrays of shape (iterations, lanes), provided
they are independent: no register carried from one iteration to the next except
accumulators of the form `ADD An, An, x` / `MAD An, x, y, An` (folded in order with
np.add.accumulate, the same sequence of float32 roundings), and no bank column written in
one iteration and touched in another. Otherwise the loop is stepped.
"""
from __future__ import annotations

import numpy as np

from pimrt.pim import fp, isa
from pimrt.pim.backend import Backend

U32 = np.uint32


class GoldenBackend(Backend):
    name = "golden"

    def __init__(self, *args, vectorise: bool = True, **kw):
        super().__init__(*args, **kw)
        L = self.lanes
        self.vectorise = vectorise
        self.bank = np.zeros((self.depth, L), U32)
        self.crf = [0] * isa.CRF_DEPTH
        self.grf = np.zeros((isa.N_GRF, L), U32)
        self.srf = np.zeros(isa.N_SRF, U32)
        self.acc = np.zeros((isa.N_ACC, L), U32)
        self.ptr = [0] * isa.N_PTR
        self.cnt = [0] * isa.N_CNT
        self.lc = [0] * isa.N_CNT
        self.col_reads = 0
        self.col_writes = 0
        self._plan_cache: dict = {}

    # ---- backend interface -----------------------------------------------------------------
    def _set_cfg(self, sel, idx, value):
        if sel == 0:
            self.crf[idx] = value
            self._plan_cache.clear()
        elif sel == 1:
            self.srf[idx] = value
        elif sel == 2:
            self.ptr[idx] = value & isa.PTR_MASK
        else:
            self.cnt[idx] = value

    def _write_bank(self, col, data):
        self.bank[col:col + len(data)] = data

    def _read_bank(self, col, n):
        return self.bank[col:col + n].copy()

    def _run(self, max_cycles):
        self.prog = [isa.decode(w) for w in self.crf]
        self.pc, self.cycles = 0, 0
        self.lc = list(self.cnt)
        while True:
            if self.cycles >= max_cycles:
                return self.cycles, -1, self.pc
            pc = self.pc
            ins = self.prog[pc] if pc < isa.CRF_DEPTH else None
            code = isa.E_PC if ins is None else isa.fault_of(ins, pc, self.ptr, self.depth)
            self.cycles += 1
            if code != isa.E_NONE:
                return self.cycles, code, pc
            if ins.name == "EXIT":
                return self.cycles, isa.E_NONE, pc
            if ins.name == "LOOP" and self.vectorise and self._try_loop(ins, max_cycles):
                continue
            self._step(ins)

    # ---- one instruction ---------------------------------------------------------------------
    def _value(self, o: isa.Operand) -> np.ndarray:
        if o.kind == isa.K_GRF:
            return self.grf[o.index]
        if o.kind == isa.K_SRF:
            return np.full(self.lanes, self.srf[o.index], U32)
        if o.kind == isa.K_ACC:
            return self.acc[o.index]
        return self._read_col

    def _step(self, ins: isa.Instr) -> None:
        name = ins.name
        self.pc += 1
        if name == "NOP":
            return
        if name == "JMP":
            self.pc = ins.target
            return
        if name == "LOOP":
            k = ins.counter
            if self.lc[k] > 1:
                self.lc[k] -= 1
                self.pc = ins.target
            else:
                self.lc[k] = self.cnt[k]
            return
        if name == "ADDP":
            for i in range(isa.N_PTR):
                if ins.mask >> i & 1:
                    self.ptr[i] = (self.ptr[i] + ins.step) & isa.PTR_MASK
            return
        used = ins.used()
        srcs = [getattr(ins, s) for s in used if s != "d"]
        banks = [o.index for o in srcs if o.kind == isa.K_BANK]
        if banks:
            self._read_col = self.bank[self.ptr[banks[0]]].copy()
            self.col_reads += 1
        y = fp.apply(name, *[self._value(o) for o in srcs])
        d = ins.d
        if d.kind == isa.K_GRF:
            self.grf[d.index] = y
        elif d.kind == isa.K_ACC:
            self.acc[d.index] = y
        else:
            self.bank[self.ptr[d.index]] = y
            self.col_writes += 1
        for p in {o.index for o in [d, *srcs] if o.kind == isa.K_BANK and o.inc}:
            self.ptr[p] = (self.ptr[p] + 1) & isa.PTR_MASK

    # ---- a whole loop at once ------------------------------------------------------------------
    def _try_loop(self, ins: isa.Instr, max_cycles: int) -> bool:
        k, start, end = ins.counter, ins.target, self.pc
        reps = self.lc[k] - 1
        body_len = end - start
        if reps < 1 or body_len < 1 or start > end:
            return False
        if self.cycles - 1 + 1 + reps * (body_len + 1) > max_cycles:
            return False
        plan = self._plan(start, end)
        if plan is None:
            return False
        if not self._run_plan(plan, reps):
            return False
        self.cycles += reps * (body_len + 1)
        self.lc[k] = self.cnt[k]
        self.pc = end + 1
        return True

    def _plan(self, start: int, end: int):
        """Static checks of a loop body; None when it cannot run vectorised."""
        key = (start, end)
        if key in self._plan_cache:
            return self._plan_cache[key]
        body = self.prog[start:end]
        plan = None
        if all(i.name in ("NOP", "ADDP") or i.fmt == "data" for i in body):
            plan = self._dataflow(body)
        self._plan_cache[key] = plan
        return plan

    @staticmethod
    def _dataflow(body):
        steps = []                  # (ins, srcs, bank offsets) per data instruction
        off = [0] * isa.N_PTR       # pointer offsets from the iteration's start
        g_written: set[int] = set()
        acc_use: dict[int, int] = {}
        for ins in body:
            if ins.name == "NOP":
                continue
            if ins.name == "ADDP":
                for i in range(isa.N_PTR):
                    if ins.mask >> i & 1:
                        off[i] += ins.step
                continue
            srcs = [getattr(ins, s) for s in ins.used() if s != "d"]
            for o in srcs:
                if o.kind == isa.K_GRF and o.index not in g_written and any(
                        j.fmt == "data" and j.d.kind == isa.K_GRF and j.d.index == o.index
                        for j in body):
                    return None     # value carried from the previous iteration
            for o in [ins.d, *srcs]:
                if o.kind == isa.K_ACC:
                    acc_use[o.index] = acc_use.get(o.index, 0) + 1
            banks = [o.index for o in srcs if o.kind == isa.K_BANK]
            rd = (banks[0], off[banks[0]]) if banks else None
            wr = (ins.d.index, off[ins.d.index]) if ins.d.kind == isa.K_BANK else None
            for p in {o.index for o in [ins.d, *srcs] if o.kind == isa.K_BANK and o.inc}:
                off[p] += 1
            steps.append((ins, srcs, rd, wr))
            if ins.d.kind == isa.K_GRF:
                g_written.add(ins.d.index)
        # accumulators written in the body: only the fold patterns (any number of them per
        # accumulator), and the accumulator used nowhere else in the body
        folds: dict[int, int] = {}
        for ins, srcs, _, _ in steps:
            d = ins.d
            if d.kind != isa.K_ACC:
                continue
            if ins.name == "ADD":
                others = [o for o in srcs if o != d]
                ok = len(others) == 1 and others[0].kind != isa.K_ACC
            elif ins.name == "MAD":
                ok = ins.c == d and ins.a.kind != isa.K_ACC and ins.b.kind != isa.K_ACC
            else:
                ok = False
            if not ok:
                return None
            folds[d.index] = folds.get(d.index, 0) + 1
        for idx, n in folds.items():
            if acc_use[idx] != 2 * n:
                return None
        return steps, off

    def _run_plan(self, plan, reps: int) -> bool:
        steps, delta = plan
        L = self.lanes
        r = np.arange(reps, dtype=np.int64)
        base = list(self.ptr)

        def addrs(p, o):
            return (base[p] + o + r * delta[p]) & isa.PTR_MASK

        # hazards: a column written in one iteration must not be touched in another
        acc_a, acc_r, acc_w = [], [], []
        for _, _, rd, wr in steps:
            for spec, is_w in ((rd, False), (wr, True)):
                if spec is not None:
                    a = addrs(*spec)
                    if int(a.max()) >= self.depth:
                        return False    # let stepping report the fault at its pc
                    acc_a.append(a)
                    acc_r.append(r)
                    acc_w.append(np.full(reps, is_w))
        if acc_a:
            a = np.concatenate(acc_a)
            it = np.concatenate(acc_r)
            w = np.concatenate(acc_w)
            if w.any():
                order = np.lexsort((it, a))
                a, it, w = a[order], it[order], w[order]
                starts = np.flatnonzero(np.r_[True, a[1:] != a[:-1]])
                has_w = np.maximum.reduceat(w, starts)
                spread = np.maximum.reduceat(it, starts) != np.minimum.reduceat(it, starts)
                if np.any(has_w & spread):
                    return False

        grf: dict[int, np.ndarray] = {}
        terms: dict[int, list] = {}
        for ins, srcs, rd, wr in steps:
            col = None
            if rd is not None:
                col = self.bank[addrs(*rd)]
                self.col_reads += reps

            def val(o):
                if o.kind == isa.K_GRF:
                    return grf.get(o.index, self.grf[o.index])
                if o.kind == isa.K_SRF:
                    return np.full(L, self.srf[o.index], U32)
                if o.kind == isa.K_ACC:
                    return self.acc[o.index]
                return col

            d = ins.d
            if d.kind == isa.K_ACC:
                if ins.name == "ADD":
                    term = val([o for o in srcs if o != d][0])
                else:
                    term = fp.mul(val(ins.a), val(ins.b))
                terms.setdefault(d.index, []).append(np.broadcast_to(term, (reps, L)))
                continue
            y = np.broadcast_to(fp.apply(ins.name, *[val(o) for o in srcs]), (reps, L))
            if d.kind == isa.K_GRF:
                grf[d.index] = y
            else:
                self.bank[addrs(*wr)] = y
                self.col_writes += reps
        for idx, ts in terms.items():
            # the order the unit adds them: iteration by iteration, instruction by instruction
            seq = np.stack(ts, axis=1).reshape(reps * len(ts), L)
            seq = np.concatenate([self.acc[idx][None, :], seq]).view(np.float32)
            with np.errstate(all="ignore"):
                total = np.add.accumulate(seq, axis=0, dtype=np.float32)[-1]
            self.acc[idx] = fp.canon(total)
        for i, v in grf.items():
            self.grf[i] = v[-1]
        for p in range(isa.N_PTR):
            self.ptr[p] = (self.ptr[p] + reps * delta[p]) & isa.PTR_MASK
        return True
