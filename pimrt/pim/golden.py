"""Golden model: an interpreter of the micro-ISA over numpy, bit-exact with hw/ (values,
faults, program counter and cycle count: one instruction per cycle).

`step` is the specification: one instruction at a time. For speed, a counted loop runs at once
as numpy arrays: all of it when execution arrives at the first instruction of its body (other
than by its own LOOP jumping back) and no instruction of the body can fault whatever the
pointers, otherwise its remaining iterations when it comes round (an unrolled body, n copies
of the same words, runs as n times as many iterations of one copy):

* a loop whose body is straight-line code (data ops, ADDP, NOP): arrays of shape
  (iterations, lanes), provided the iterations are independent: no register carried from one
  iteration to the next except accumulators of the form `ADD An, An, x` / `MAD An, x, y, An`
  (folded in order with np.add.accumulate, the same sequence of float32 roundings), and no
  bank column written in one iteration and touched in another;
* a loop whose body is straight-line code around one inner counted loop (a prologue, the inner
  loop, an epilogue: the shape of a per-channel kernel that loads a channel's constants,
  zeroes its accumulators, walks its columns and stores its sums): arrays of shape
  (outer iterations, inner iterations, lanes), under the same rules per level: no register
  carried from one outer iteration to the next (an accumulator folded by the inner loop must
  be set by the prologue), none carried between inner iterations but the accumulator folds,
  and no bank column written by one (outer, inner) iteration and touched by another.

Otherwise the loop is stepped (an inner loop still runs at once when it qualifies). Faults,
the cycle cap and anything the checks cannot prove are left to stepping, which reports them
at their pc. Decoded programs and loop plans are cached by the program's words.
"""
from __future__ import annotations

import numpy as np

from pimrt.pim import fp, isa
from pimrt.pim.backend import Backend

U32 = np.uint32

_DECODED: dict[tuple[int, ...], list] = {}   # program words -> decoded instructions


def _decoded(words: tuple[int, ...]) -> list:
    prog = _DECODED.get(words)
    if prog is None:
        if len(_DECODED) > 256:
            _DECODED.clear()
        prog = _DECODED[words] = [isa.decode(w) for w in words]
    return prog


_TARGETS: dict[tuple[int, ...], dict] = {}


def _loop_targets(words: tuple[int, ...], prog) -> dict[int, list[tuple[int, int]]]:
    """first pc of a loop body -> [(pc of its LOOP, counter)], the outermost loop first."""
    t = _TARGETS.get(words)
    if t is None:
        if len(_TARGETS) > 256:
            _TARGETS.clear()
        t = {}
        for j, ins in enumerate(prog):
            if ins.name == "LOOP" and ins.target < j:
                t.setdefault(ins.target, []).append((j, ins.counter))
        for v in t.values():
            v.sort(reverse=True)
        t = _TARGETS[words] = t
    return t


def _reg(o: isa.Operand):
    """Register identity of an operand (GRF or ACC), None for scalars and the bank."""
    if o.kind == isa.K_GRF:
        return ("G", o.index)
    if o.kind == isa.K_ACC:
        return ("A", o.index)
    return None


def _period(body) -> int:
    """The shortest p such that body is len(body) / p copies of body[:p] (an unrolled loop
    body): running the copies one after another is running body[:p] that many times more."""
    words = [i.word for i in body]
    n = len(words)
    for p in range(1, n + 1):
        if n % p == 0 and words == words[:p] * (n // p):
            return p
    return n


def _hazard(depth: int, accesses) -> bool:
    """accesses: (addresses, key, inner key or None, is_write) per bank access of a vectorised
    loop, as arrays of one shape. True when a column written by one iteration is touched by
    another: the keys of its accesses (the iteration; in a nest the outer iteration) differ,
    or the inner keys of those made inside the inner loop (inner key >= 0) differ."""
    if not any(w for *_, w in accesses):
        return False
    big = np.int64(1) << 40
    written = np.zeros(depth, bool)
    lo, hi = np.full(depth, big), np.full(depth, -1, np.int64)
    ilo, ihi = np.full(depth, big), np.full(depth, -1, np.int64)
    for a, key, ikey, w in accesses:
        a, key = a.ravel(), key.ravel()
        if w:
            written[a] = True
        np.minimum.at(lo, a, key)
        np.maximum.at(hi, a, key)
        if ikey is not None:
            ikey = ikey.ravel()
            np.minimum.at(ilo, a, ikey)
            np.maximum.at(ihi, a, ikey)
    spread = (lo != hi) | ((ihi >= 0) & (ilo != ihi))
    return bool(np.any(written & spread))



def _moves_only(ins, off: list[int]) -> bool:
    """True for an instruction that touches no data (NOP, or ADDP, whose pointer steps it
    adds to `off`)."""
    if ins.name == "NOP":
        return True
    if ins.name == "ADDP":
        for i in range(isa.N_PTR):
            if ins.mask >> i & 1:
                off[i] += ins.step
        return True
    return False


def _fold_term(ins, a, b):
    """What a fold (_is_fold) adds to its accumulator: ADD's other operand (a: ADD acc, x,
    acc in a widening form), MAD's product; a widening form's a widened first."""
    if ins.dtype:
        a = fp.widen_a(a, ins.dtype)
    return a if ins.name == "ADD" else fp.mul(a, b)


def _is_fold(ins, srcs) -> bool:
    """Whether an instruction writing an accumulator folds into it as the vectorised loops can
    replay: ADD acc, acc, x or MAD acc, a, b, acc with no other accumulator read, in binary32
    or a widening form whose widened operand a is not the accumulator (_fold_term; a 16-bit
    fold is stepped)."""
    d = ins.d
    if ins.dtype and not (isa.widening(ins.dtype) and ins.a != d):
        return False
    if ins.name == "ADD":
        others = [o for o in srcs if o != d]
        return len(others) == 1 and others[0].kind != isa.K_ACC
    if ins.name == "MAD":
        return ins.c == d and ins.a.kind != isa.K_ACC and ins.b.kind != isa.K_ACC
    return False


def _fold_counts(pairs) -> dict[int, int] | None:
    """For (instruction, its source operands) pairs: how many times each accumulator is folded
    into (_is_fold), or None when one is written any other way."""
    folds: dict[int, int] = {}
    for ins, srcs in pairs:
        if ins.d.kind != isa.K_ACC:
            continue
        if not _is_fold(ins, srcs):
            return None
        folds[ins.d.index] = folds.get(ins.d.index, 0) + 1
    return folds


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
        self._hazards: dict = {}

    # ---- backend interface -----------------------------------------------------------------
    def _set_cfg(self, sel, idx, value):
        if sel == 0:
            self.crf[idx] = value
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
        self._words = tuple(self.crf)
        self.prog = _decoded(self._words)
        targets = _loop_targets(self._words, self.prog) if self.vectorise else {}
        self.pc, self.cycles = 0, 0
        self.lc = list(self.cnt)
        self._jumped = False
        while True:
            if self.cycles >= max_cycles:
                return self.cycles, -1, self.pc
            pc = self.pc
            if pc in targets and not self._jumped and self._try_entry(targets[pc], max_cycles):
                self._jumped = False
                continue
            self._jumped = False
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
                self._jumped = True
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
        y = fp.apply(name, *[self._value(o) for o in srcs], dtype=ins.dtype)
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
        """At a LOOP coming round (its cycle counted): the remaining iterations at once."""
        return self._at_once(ins.counter, ins.target, self.pc, self.lc[ins.counter] - 1,
                             max_cycles)

    def _try_entry(self, loops, max_cycles: int) -> bool:
        """On arriving at the first instruction of a loop body (not from its LOOP): the whole
        loop at once, from the outermost loop starting there. From pc `start` with live
        counter v the body runs max(v, 1) times, then the LOOP falls through."""
        for end, k in loops:
            if self._at_once(k, self.pc, end, max(self.lc[k], 1), max_cycles, entry=True):
                return True
        return False

    def _at_once(self, k: int, start: int, end: int, reps: int, max_cycles: int,
                 entry: bool = False) -> bool:
        """reps iterations of the loop body start..end-1 (each with its LOOP at end) at once;
        then pc = end + 1 with the loop's counter reloaded. False (nothing changed) when the
        loop cannot run at once."""
        body_len = end - start
        if reps < 1 or body_len < 1 or start > end:
            return False
        plan = self._plan(start, end, k)
        if plan is None or (entry and not plan[-1]):
            return False
        if plan[0] == "flat":
            _, steps, delta, mult, _ = plan
            if self.cycles + reps * (body_len + 1) > max_cycles:
                return False
            if not self._run_plan((steps, delta), reps * mult):
                return False
            self.cycles += reps * (body_len + 1)
        elif not self._run_nest(plan[1], reps, max_cycles):
            return False
        self.lc[k] = self.cnt[k]
        self.pc = end + 1
        return True

    def _plan(self, start: int, end: int, counter: int):
        """Static checks of a loop body; None when it cannot run vectorised. The last item
        says whether no instruction of the body can fault whatever the pointers (opcode,
        registers, operands): a loop entered fresh runs at once only then (a pointer past
        the bank is checked on the addresses)."""
        key = (self._words, start, end, counter)
        if key in self._plan_cache:
            return self._plan_cache[key]
        body = self.prog[start:end]
        plan = None
        if all(i.name in ("NOP", "ADDP") or i.fmt == "data" for i in body):
            p = _period(body)                 # an unrolled body runs as its single copy
            flat = self._dataflow(body[:p])
            plan = None if flat is None else ("flat", *flat, len(body) // p)
        else:
            nest = self._nest_plan(start, end, counter)
            plan = None if nest is None else ("nest", nest)
        if plan is not None:
            no_fault = all(isa.fault_of(i, start + n, [0] * isa.N_PTR, isa.PTR_MASK + 1)
                           == isa.E_NONE for n, i in enumerate(body))
            plan = (*plan, no_fault)
        if len(self._plan_cache) > 1024:
            self._plan_cache = {}           # (a new dict: hazards remembered for old plans lapse)
            self._hazards = {}
        self._plan_cache[key] = plan
        return plan

    @staticmethod
    def _dataflow(body):
        steps = []                  # (ins, srcs, bank offsets) per data instruction
        off = [0] * isa.N_PTR       # pointer offsets from the iteration's start
        g_written: set[int] = set()
        acc_use: dict[int, int] = {}
        for ins in body:
            if _moves_only(ins, off):
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
        folds = _fold_counts((ins, srcs) for ins, srcs, _, _ in steps)
        if folds is None or any(acc_use[idx] != 2 * n for idx, n in folds.items()):
            return None
        return steps, off

    def _hazard_cached(self, key, accesses) -> bool:
        """_hazard, remembered by plan (its identity: _plan_cache keeps the plans alive, and
        the two caches are dropped together), starting pointers and iteration counts, which
        fix every address."""
        hit = self._hazards.get(key)
        if hit is None:
            if len(self._hazards) > 4096:
                self._hazards.clear()
            hit = self._hazards[key] = _hazard(self.depth, accesses)
        return hit

    def _run_plan(self, plan, reps: int) -> bool:
        steps, delta = plan
        L = self.lanes
        r = np.arange(reps, dtype=np.int64)
        base = list(self.ptr)

        def addrs(p, o):
            return (base[p] + o + r * delta[p]) & isa.PTR_MASK

        # hazards: a column written in one iteration must not be touched in another
        addr_of = {}
        accesses = []
        for pos, (_, _, rd, wr) in enumerate(steps):
            for spec, is_w in ((rd, False), (wr, True)):
                if spec is not None:
                    a = addrs(*spec)
                    if int(a.max()) >= self.depth:
                        return False    # let stepping report the fault at its pc
                    addr_of[(pos, is_w)] = a
                    accesses.append((a, r, None, is_w))
        if self._hazard_cached((id(steps), tuple(base), reps), accesses):
            return False

        grf: dict[int, np.ndarray] = {}
        terms: dict[int, list] = {}
        for pos, (ins, srcs, rd, wr) in enumerate(steps):
            col = None
            if rd is not None:
                col = self.bank[addr_of[(pos, False)]]
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
                    term = _fold_term(ins, val([o for o in srcs if o != d][0]), None)
                else:
                    term = _fold_term(ins, val(ins.a), val(ins.b))
                terms.setdefault(d.index, []).append(np.broadcast_to(term, (reps, L)))
                continue
            y = fp.apply(ins.name, *[val(o) for o in srcs], dtype=ins.dtype)
            if d.kind == isa.K_GRF:
                grf[d.index] = y
            else:
                self.bank[addr_of[(pos, True)]] = np.broadcast_to(y, (reps, L))
                self.col_writes += reps
        for idx, ts in terms.items():
            # the order the unit adds them: iteration by iteration, instruction by instruction
            seq = np.stack(ts, axis=1).reshape(reps * len(ts), L)
            seq = np.concatenate([self.acc[idx][None, :], seq]).view(np.float32)
            with np.errstate(all="ignore"):
                total = np.add.accumulate(seq, axis=0, dtype=np.float32)[-1]
            self.acc[idx] = fp.canon(total)
        for i, v in grf.items():
            self.grf[i] = np.broadcast_to(v, (reps, L))[-1]
        for p in range(isa.N_PTR):
            self.ptr[p] = (self.ptr[p] + reps * delta[p]) & isa.PTR_MASK
        return True

    # ---- a loop around one inner loop, at once -------------------------------------------------
    def _nest_plan(self, start: int, end: int, counter: int):
        """Static checks of an outer loop body made of a prologue, one inner counted loop and
        an epilogue (all straight-line); None when the nest cannot run vectorised. Each
        register source is tagged with where its value comes from: 'local' (written earlier
        in the same segment and iteration), 'pre' (the prologue of the same outer iteration),
        'in' (in the epilogue: the last inner iteration, or an accumulator's fold), 'state'
        (a register the nest never writes), 'fold' (the accumulator of a fold)."""
        prog = self.prog
        loops = [j for j in range(start, end) if prog[j].name == "LOOP"]
        if len(loops) != 1:
            return None
        j = loops[0]
        t, k2 = prog[j].target, prog[j].counter
        if k2 == counter or not start <= t < j:
            return None
        mult = (j - t) // _period(prog[t:j])      # an unrolled inner body: its single copy
        ranges = (("pre", start, t), ("in", t, t + (j - t) // mult), ("post", j + 1, end))
        for _, a, b in ranges:
            if not all(i.name in ("NOP", "ADDP") or i.fmt == "data" for i in prog[a:b]):
                return None
        written = {name: {_reg(i.d) for i in prog[a:b] if i.fmt == "data"} - {None}
                   for name, a, b in ranges}
        anywhere = written["pre"] | written["in"] | written["post"]
        # accumulators written by the inner loop: only the fold patterns, used nowhere else in
        # the inner body, and set by the prologue of the same outer iteration
        acc_use: dict[int, int] = {}
        pairs = []
        for i in prog[ranges[1][1]:ranges[1][2]]:
            if i.fmt != "data":
                continue
            srcs = [getattr(i, s) for s in i.used() if s != "d"]
            for o in [i.d, *srcs]:
                if o.kind == isa.K_ACC:
                    acc_use[o.index] = acc_use.get(o.index, 0) + 1
            pairs.append((i, srcs))
        folds = _fold_counts(pairs)
        if folds is None or any(acc_use[idx] != 2 * n or ("A", idx) not in written["pre"]
                                for idx, n in folds.items()):
            return None
        segs = []
        for name, a, b in ranges:
            off = [0] * isa.N_PTR
            local: set = set()
            steps = []
            for i in prog[a:b]:
                if _moves_only(i, off):
                    continue
                srcs = [getattr(i, s) for s in i.used() if s != "d"]
                fold = i.d.index if name == "in" and i.d.kind == isa.K_ACC else None
                tags = []
                for o in srcs:
                    r = _reg(o)
                    if r is None:
                        tag = None
                    elif fold is not None and o == i.d:
                        tag = "fold"
                    elif r in local:
                        tag = "local"
                    elif name == "pre":
                        if r in anywhere:
                            return None         # carried from the previous outer iteration
                        tag = "state"
                    elif name == "in":
                        if r in written["in"] or (r in written["post"] and r not in written["pre"]):
                            return None         # carried from the previous iteration
                        tag = "pre" if r in written["pre"] else "state"
                    elif r in written["in"]:
                        tag = "in"
                    elif r in written["pre"]:
                        tag = "pre"
                    elif r in written["post"]:
                        return None             # carried from the previous outer iteration
                    else:
                        tag = "state"
                    tags.append(tag)
                banks = [o.index for o in srcs if o.kind == isa.K_BANK]
                rd = (banks[0], off[banks[0]]) if banks else None
                wr = (i.d.index, off[i.d.index]) if i.d.kind == isa.K_BANK else None
                for p in {o.index for o in [i.d, *srcs] if o.kind == isa.K_BANK and o.inc}:
                    off[p] += 1
                steps.append((i, srcs, tuple(tags), rd, wr, fold))
                r = _reg(i.d)
                if r is not None:
                    local.add(r)
            segs.append((name, steps, off))
        final = {r: "post" if r in written["post"] else "in" if r in written["in"] else "pre"
                 for r in anywhere}
        return {"k2": k2, "segs": segs, "final": final, "folds": sorted(folds), "mult": mult,
                "lens": (t - start, j - t, end - j - 1)}

    def _run_nest(self, nest, R: int, max_cycles: int) -> bool:
        k2 = nest["k2"]
        if self.lc[k2] != self.cnt[k2]:
            return False
        n_loop = max(self.cnt[k2], 1)
        len_pre, len_in, len_post = nest["lens"]
        cycles = R * (len_pre + n_loop * (len_in + 1) + len_post + 1)
        if self.cycles + cycles > max_cycles:
            return False
        n = n_loop * nest["mult"]                   # iterations of the inner body's single copy
        L = self.lanes
        if R * n > 1 << 24:
            return False
        (_, pre, d_pre), (_, inner, d_in), (_, post, d_post) = nest["segs"]
        base = np.asarray(self.ptr, np.int64)
        d_pre, d_in, d_post = (np.asarray(d, np.int64) for d in (d_pre, d_in, d_post))
        D = d_pre + n * d_in + d_post
        o_idx = np.arange(R, dtype=np.int64)[:, None]
        i_idx = np.arange(n, dtype=np.int64)[None, :]
        seg_off = {"pre": lambda p: base[p],
                   "in": lambda p: base[p] + d_pre[p] + i_idx * d_in[p],
                   "post": lambda p: base[p] + d_pre[p] + n * d_in[p]}
        shapes = {"pre": (R, 1), "in": (R, n), "post": (R, 1)}
        o_key = {sg: np.broadcast_to(o_idx, sh) for sg, sh in shapes.items()}
        i_key = np.broadcast_to(i_idx, (R, n))

        # every bank access: its outer iteration, and its inner iteration inside the inner loop
        addr_of = {}
        accesses = []
        for seg, steps in (("pre", pre), ("in", inner), ("post", post)):
            for pos, (_, _, _, rd, wr, _) in enumerate(steps):
                for spec, is_w in ((rd, False), (wr, True)):
                    if spec is None:
                        continue
                    p, off = spec
                    a = np.broadcast_to((seg_off[seg](p) + off + o_idx * D[p]) & isa.PTR_MASK,
                                        shapes[seg])
                    if int(a.max()) >= self.depth:
                        return False        # let stepping report the fault at its pc
                    addr_of[(seg, pos, is_w)] = a
                    accesses.append((a, o_key[seg], i_key if seg == "in" else None, is_w))
        if self._hazard_cached((id(nest), tuple(self.ptr), R, n), accesses):
            return False

        env = {"pre": {}, "in": {}, "post": {}}
        terms: dict[int, list] = {}
        fold_res: dict[int, np.ndarray] = {}

        def state(r):
            return self.grf[r[1]] if r[0] == "G" else self.acc[r[1]]

        def last_inner(r):
            if r[0] == "A" and r[1] in fold_res:
                return fold_res[r[1]]
            return np.broadcast_to(env["in"][r], (R, n, L))[:, -1:, :]

        for seg, steps in (("pre", pre), ("in", inner), ("post", post)):
            if seg == "post":
                for idx in nest["folds"]:
                    # the order the unit adds them: iteration by iteration, instruction by
                    # instruction, starting from the prologue's value
                    seq = np.stack(terms[idx], axis=2).reshape(R, -1, L)
                    first = np.broadcast_to(env["pre"][("A", idx)], (R, 1, L))
                    seq = np.concatenate([first, seq], axis=1).view(np.float32)
                    with np.errstate(all="ignore"):
                        total = np.add.accumulate(seq, axis=1, dtype=np.float32)[:, -1:, :]
                    fold_res[idx] = fp.canon(total)
            shape = shapes[seg] + (L,)
            for pos, (ins, srcs, tags, rd, wr, fold) in enumerate(steps):
                col = None
                if rd is not None:
                    a = addr_of[(seg, pos, False)]
                    col = self.bank[a]
                    self.col_reads += a.size
                vals = []
                for o, tag in zip(srcs, tags):
                    if o.kind == isa.K_SRF:
                        vals.append(np.full(L, self.srf[o.index], U32))
                    elif o.kind == isa.K_BANK:
                        vals.append(col)
                    elif tag == "fold":
                        vals.append(None)
                    elif tag == "local":
                        vals.append(env[seg][_reg(o)])
                    elif tag == "pre":
                        vals.append(env["pre"][_reg(o)])
                    elif tag == "in":
                        vals.append(last_inner(_reg(o)))
                    else:
                        vals.append(state(_reg(o)))
                if fold is not None:
                    if ins.name == "ADD":
                        term = _fold_term(ins, [v for v in vals if v is not None][0], None)
                    else:
                        term = _fold_term(ins, vals[0], vals[1])
                    terms.setdefault(fold, []).append(np.broadcast_to(term, shape))
                    continue
                y = fp.apply(ins.name, *vals, dtype=ins.dtype)
                r = _reg(ins.d)
                if r is not None:
                    env[seg][r] = y
                else:
                    a = addr_of[(seg, pos, True)]
                    self.bank[a] = np.broadcast_to(y, shape)
                    self.col_writes += a.size
        for r, seg in nest["final"].items():
            v = last_inner(r) if seg == "in" else env[seg][r]
            v = np.broadcast_to(v, (R, 1, L))[-1, -1]
            if r[0] == "G":
                self.grf[r[1]] = v
            else:
                self.acc[r[1]] = v
        for p in range(isa.N_PTR):
            self.ptr[p] = int((base[p] + R * D[p]) & isa.PTR_MASK)
        self.cycles += cycles
        return True
