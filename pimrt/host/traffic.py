"""Implicit-GEMM DRAM traffic of one host kernel: the tile footprints and the L2 filter.

Everything here is vectorised numpy over blocks of tile rows; see docs/host_model.md for the
model. Internals of :class:`pimrt.host.work.HostWork`.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Iterator

import numpy as np

from pimrt.errors import ConfigError
from pimrt.host.gemm import ConvGeom

#: one DRAM request of the host stream
REQUEST_DTYPE = np.dtype([("addr", np.uint64), ("op", np.uint8)], align=True)
READ, WRITE = 0, 1

#: rough number of line touches generated per block (memory / speed trade-off)
BLOCK_TOUCHES = 1 << 20

#: with more time units than this holding both A and B misses, _merge computes positions
_SCATTER_MIN_UNITS = 8

#: tensor roles each phase needs: role -> (A, B or out operand)
PHASE_ROLES = {
    "forward": ("input", "weight", "output"),
    "backward_data": ("grad_output", "weight", "grad_input"),
    "backward_weight": ("grad_output", "input", "grad_weight"),
}


@dataclasses.dataclass(frozen=True)
class Placement:
    """A tensor in memory: NCHW contiguous from byte ``base``, ``es`` bytes an element."""

    role: str
    base: int
    shape: tuple[int, ...]
    es: int
    line_bytes: int

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.es

    @property
    def first_line(self) -> int:
        return self.base // self.line_bytes

    @property
    def nlines(self) -> int:
        return (self.base + self.nbytes - 1) // self.line_bytes - self.first_line + 1


def expected_shapes(g: ConvGeom) -> dict[str, tuple[tuple[int, ...], ...]]:
    """Accepted shapes per role (linear: 2-D or as 1x1 NCHW)."""
    x, y, w = g.input_shape, g.output_shape, g.weight_shape
    if g.kind == "linear":
        return {"input": (x, x[:2]), "grad_input": (x, x[:2]), "output": (y, y[:2]),
                "grad_output": (y, y[:2]), "weight": (w, w[:2]), "grad_weight": (w, w[:2])}
    return {"input": (x,), "grad_input": (x,), "output": (y,), "grad_output": (y,),
            "weight": (w,), "grad_weight": (w,)}


def make_placements(g: ConvGeom, phase: str, tensors, line_bytes: int) -> dict[str, Placement]:
    if not isinstance(line_bytes, int) or line_bytes <= 0:
        raise ConfigError(f"request_bytes must be a positive integer, found {line_bytes!r}")
    shapes = expected_shapes(g)
    out = {}
    for role in PHASE_ROLES[phase]:
        if role not in tensors:
            raise ConfigError(f"layer {g.name!r} {phase}: tensors has no {role!r} placement "
                              f"(needs {', '.join(PHASE_ROLES[phase])})")
        try:
            base, shape, es = tensors[role]
            base, es, shape = int(base), int(es), tuple(int(s) for s in shape)
        except (TypeError, ValueError):
            raise ConfigError(f"layer {g.name!r}: tensors[{role!r}] must be "
                              f"(base_addr, shape, dtype_bytes), found {tensors[role]!r}") from None
        if base < 0 or es <= 0:
            raise ConfigError(f"layer {g.name!r}: tensors[{role!r}]: base must be >= 0 and "
                              f"dtype bytes > 0, found {base}, {es}")
        if shape not in shapes[role]:
            raise ConfigError(f"layer {g.name!r}: tensors[{role!r}] has shape {shape}, "
                              f"expected {shapes[role][0]}")
        full = shapes[role][0]
        out[role] = Placement(role, base, full, es, line_bytes)
    return out


# ---------------------------------------------------------------------------------------------
# ragged helpers
def _local(cnt: np.ndarray) -> np.ndarray:
    """For counts c_i: concatenated arange(c_i)."""
    total = int(cnt.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    return np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(cnt) - cnt, cnt)


def _pairs(p0, p1, hw):
    """Split pixel tiles [p0, p1) of an (N, H, W) grid into (tile, image, q0, q1) pieces."""
    n0 = p0 // hw
    cnt = (p1 - 1) // hw - n0 + 1
    tile = np.repeat(np.arange(len(p0), dtype=np.int64), cnt)
    n = n0[tile] + _local(cnt)
    q0 = np.maximum(p0[tile] - n * hw, 0)
    q1 = np.minimum(p1[tile] - n * hw, hw)
    return tile, n, q0, q1


@dataclasses.dataclass(frozen=True)
class Mapping:
    """How the rows/cols of a driving pixel grid (Hg, Wg) map to a target tensor (Ht, Wt).

    ``identity``: the same pixels. ``conv``: target = conv input of a driving output pixel
    (rows ho*s - p + t*d). ``tconv``: target = conv output feeding a driving input pixel."""

    mode: str
    hg: int
    wg: int
    kh: int = 1
    kw: int = 1
    sh: int = 1
    sw: int = 1
    ph: int = 0
    pw: int = 0
    dh: int = 1
    dw: int = 1


def _needed(mode, ht, a, b, k, s, p, d):
    """Bool (len(a), ht): target rows needed by driving rows a..b (inclusive)."""
    h = np.arange(ht, dtype=np.int64)
    mask = np.zeros((len(a), ht), bool)
    a = a[:, None]
    b = b[:, None]
    for t in range(k):
        if mode == "conv":
            x = h + p - t * d
            ok = (x % s == 0)
            ho = x // s
            mask |= ok & (ho >= a) & (ho <= b)
        else:
            x = h * s - p + t * d
            mask |= (x >= a) & (x <= b)
    return mask


def _col_span(m: Mapping, wt: int):
    if m.mode == "identity":
        return 0, wt - 1
    mask = _needed(m.mode, wt, np.array([0]), np.array([m.wg - 1]), m.kw, m.sw, m.pw, m.dw)[0]
    idx = np.flatnonzero(mask)
    if len(idx) == 0:
        return None
    return int(idx[0]), int(idx[-1])


def footprint(t: Placement, m: Mapping, p0, p1, c0, c1, bytes_only: bool = False):
    """Byte ranges of tensor ``t`` read/written by tiles of driving pixels [p0, p1) and target
    channels [c0, c1), in address order per tile (image, channel, row run).

    Returns (start, end, tile) arrays, or with ``bytes_only`` the bytes per tile."""
    nimg, cch, ht, wt = t.shape
    hw = m.hg * m.wg
    p0 = np.asarray(p0, np.int64)
    p1 = np.asarray(p1, np.int64)
    c0 = np.asarray(c0, np.int64)
    c1 = np.asarray(c1, np.int64)
    tile, n, q0, q1 = _pairs(p0, p1, hw)
    nch = (c1 - c0)[tile]
    if m.mode == "identity":
        if bytes_only:
            return np.bincount(tile, (q1 - q0) * nch * t.es, minlength=len(p0))
        sp = np.repeat(np.arange(len(tile), dtype=np.int64), nch)
        ch = c0[tile][sp] + _local(nch)
        plane = n[sp] * cch + ch
        start = t.base + (plane * (ht * wt) + q0[sp]) * t.es
        end = t.base + (plane * (ht * wt) + q1[sp]) * t.es
        return start, end, tile[sp]
    span = _col_span(m, wt)
    if span is None:
        z = np.zeros(0, np.int64)
        return np.zeros(len(p0)) if bytes_only else (z, z, z)
    w_lo, w_hi = span
    a = q0 // m.wg
    b = (q1 - 1) // m.wg
    mask = _needed(m.mode, ht, a, b, m.kh, m.sh, m.ph, m.dh)
    if bytes_only:
        per = mask.sum(1) * (w_hi - w_lo + 1) * t.es * nch
        return np.bincount(tile, per, minlength=len(p0))
    if w_lo == 0 and w_hi == wt - 1:          # whole rows: merge consecutive rows into runs
        prev = np.zeros_like(mask)
        prev[:, 1:] = mask[:, :-1]
        nxt = np.zeros_like(mask)
        nxt[:, :-1] = mask[:, 1:]
        rp, r0 = np.nonzero(mask & ~prev)
        _, r1 = np.nonzero(mask & ~nxt)
    else:
        rp, r0 = np.nonzero(mask)
        r1 = r0
    nruns = np.bincount(rp, minlength=len(tile)).astype(np.int64)
    roff = np.cumsum(nruns) - nruns
    per = nch * nruns
    sp = np.repeat(np.arange(len(tile), dtype=np.int64), per)
    loc = _local(per)
    nr = nruns[sp]
    ch = c0[tile][sp] + loc // nr
    run = roff[sp] + loc % nr
    plane = n[sp] * cch + ch
    start = t.base + ((plane * ht + r0[run]) * wt + w_lo) * t.es
    end = t.base + ((plane * ht + r1[run]) * wt + w_hi + 1) * t.es
    return start, end, tile[sp]


def ranges_to_lines(start, end, owner, lb: int, boundary: bool = False):
    """Lines (request units) covering byte ranges; consecutive duplicates of one owner are
    dropped (ranges come in address order per owner). With ``boundary`` also a bool per line:
    True for a range's first or last line when the range does not start or end on a line
    boundary (only those lines can be shared with another range of a tensor that ranges
    partition)."""
    f = start // lb
    last = (end - 1) // lb
    cnt = last - f + 1
    total = int(cnt.sum())
    cs = np.cumsum(cnt)
    lines = np.arange(total, dtype=np.int64) + np.repeat(f - (cs - cnt), cnt)
    own = np.repeat(owner, cnt)
    keep = None
    aligned = not ((start % lb).any() or (end % lb).any())
    if total > 1 and not aligned:
        keep = np.empty(total, bool)
        keep[0] = True
        np.not_equal(lines[1:], lines[:-1], out=keep[1:])
        if not keep.all():
            keep[1:] |= own[1:] != own[:-1]
            lines, own = lines[keep], own[keep]
        else:
            keep = None
    if not boundary:
        return lines, own
    bnd = np.zeros(total, bool)
    if aligned:
        return lines, own, bnd
    nz = cnt > 0
    bnd[(cs - cnt)[nz & (start % lb != 0)]] = True
    bnd[(cs - 1)[nz & (end % lb != 0)]] = True
    if keep is not None:
        bnd = bnd[keep]
    return lines, own, bnd


# ---------------------------------------------------------------------------------------------
class _Role:
    """L2 state of one tensor: the last time (CTA or row index) each of its lines was touched."""

    def __init__(self, t: Placement, slots: int = 1):
        self.t = t
        self.slots = slots
        self.last = np.full(t.nlines, -1, np.int32)

    def misses(self, lines, time, thr_of, unique: bool = True):
        """Bool per touch: a miss when the line's previous touch is older than
        ``min(thr_of(time), first time of its wave)`` (CTAs of one wave of ``slots`` run
        together and share what they fetch). Touches come in issue order (``time``
        non-decreasing); ``unique``: no line twice within one time unit. Updates the state."""
        n = len(lines)
        miss = np.zeros(n, bool)
        if n == 0:
            return miss
        rel = lines - self.t.first_line
        cut = np.flatnonzero(time[1:] != time[:-1]) + 1
        starts = np.r_[0, cut]
        ends = np.r_[cut, n]
        units = time[starts]
        thr = np.minimum(thr_of(units), (units // self.slots) * self.slots)
        last = self.last
        for a, b, u, th in zip(starts.tolist(), ends.tolist(), units.tolist(), thr.tolist()):
            sl = rel[a:b]
            if unique:
                miss[a:b] = last[sl] < th
            else:
                _, first = np.unique(sl, return_index=True)
                m = np.zeros(b - a, bool)
                m[first] = last[sl[first]] < th
                miss[a:b] = m
            last[sl] = u
        return miss


def _first_touches(role: "_Role", lines):
    """Bool per touch: True for the first touch ever of its line (state updated)."""
    n = len(lines)
    if n == 0:
        return np.zeros(0, bool)
    rel = lines - role.t.first_line
    order = np.argsort(rel, kind="stable")
    sl = rel[order]
    first = np.empty(n, bool)
    first[0] = True
    np.not_equal(sl[1:], sl[:-1], out=first[1:])
    miss = np.empty(n, bool)
    miss[order] = first & (role.last[sl] < 0)
    role.last[sl] = 0
    return miss


def _out_misses(role: "_Role", lines, bnd):
    """Output lines: each written once per work. Lines inside a range belong to it alone;
    only boundary lines can repeat."""
    miss = np.ones(len(lines), bool)
    idx = np.flatnonzero(bnd)
    if len(idx):
        miss[idx] = _first_touches(role, lines[idx])
    return miss


def _interleave(a, b):
    """A and B merged evenly: A rank r after the B elements with (s+.5)/nb < (r+.5)/na."""
    na, nb = len(a), len(b)
    out = np.empty(na + nb, a.dtype)
    r = np.arange(na, dtype=np.int64)
    pa = r + np.clip(-((na - (2 * r + 1) * nb) // (2 * na)), 0, nb)
    mask = np.ones(na + nb, bool)
    mask[pa] = False
    out[pa] = a
    out[mask] = b
    return out


@dataclasses.dataclass
class Plan:
    """Tile decomposition and the L2 decisions of one work (see docs/host_model.md)."""

    rows: int                 # tile rows (forward/dgrad: m-tiles; wgrad: waves x K chunks)
    ctas_per_row: int         # forward/dgrad: n-tiles; wgrad: 1 (time unit is the row)
    a_row_bytes: int          # largest A block of a row (or chunk: A + B for wgrad)
    b_all_bytes: int
    b_tile_bytes: int
    b_resident: bool
    a_rows_kept: int          # k: A blocks of the last k rows stay in L2 (0: none, per CTA)
    waves: int = 1


class StreamBuilder:
    """Generates the filtered request stream of one work, block by block."""

    def __init__(self, g: ConvGeom, phase: str, lo: int, hi: int, part, tensors,
                 request_bytes: int, accumulate: bool):
        self.g, self.phase, self.lo, self.hi = g, phase, lo, hi
        self.part = part
        self.lb = request_bytes
        self.acc = accumulate
        self.pl = make_placements(g, phase, tensors, request_bytes)
        self.cap = part.l2_usable_bytes
        if phase == "backward_weight":
            self._setup_wgrad()
        else:
            self._setup_mn()

    # -- forward / backward_data --------------------------------------------------------------
    def _setup_mn(self):
        g, p = self.g, self.part
        tm, tn = p.tile_m, p.tile_n
        if self.phase == "forward":
            a_t, b_t, o_t = (self.pl[r] for r in PHASE_ROLES["forward"])
            self.hg, self.wg = g.ho, g.wo
            self.amap = Mapping("conv", g.ho, g.wo, g.kh, g.kw, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw)
            n0, n1 = self.lo, self.hi                        # output channels
        else:
            a_t, b_t, o_t = (self.pl[r] for r in PHASE_ROLES["backward_data"])
            self.hg, self.wg = g.h, g.w
            self.amap = Mapping("tconv", g.h, g.w, g.kh, g.kw, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw)
            n0, n1 = g.fed_channels(self.lo, self.hi)        # dX channels
        self.a_t, self.b_t, self.o_t = a_t, b_t, o_t
        self.omap = Mapping("identity", self.hg, self.wg)
        self.m_total = g.n * self.hg * self.wg
        self.tm, self.tn = tm, tn
        self.Tm = -(-self.m_total // tm)
        self.Tn = -(-(n1 - n0) // tn)
        j = np.arange(self.Tn, dtype=np.int64)
        self.nc0 = n0 + j * tn
        self.nc1 = np.minimum(self.nc0 + tn, n1)
        # A channels of each CTA column j and of a whole row
        if self.phase == "forward":
            if g.groups == 1:
                self.ac0 = np.zeros(self.Tn, np.int64)
                self.ac1 = np.full(self.Tn, g.cin, np.int64)
            else:
                self.ac0 = (self.nc0 // g.cout_g) * g.cin_g
                self.ac1 = ((self.nc1 - 1) // g.cout_g + 1) * g.cin_g
            row_c = g.fed_channels(self.lo, self.hi)
        else:
            if g.groups == 1:
                self.ac0 = np.full(self.Tn, self.lo, np.int64)
                self.ac1 = np.full(self.Tn, self.hi, np.int64)
            else:
                self.ac0 = np.maximum((self.nc0 // g.cin_g) * g.cout_g, self.lo)
                self.ac1 = np.minimum(((self.nc1 - 1) // g.cin_g + 1) * g.cout_g, self.hi)
            row_c = (self.lo, self.hi)
        self.a_shared = g.groups == 1 or self.Tn == 1   # same A block for every CTA of a row
        # B (weight) ranges per CTA column: row independent
        self.b_ranges = [self._weight_ranges(int(jj)) for jj in range(self.Tn)]
        b_tile = max(int((e - s).sum()) for s, e in self.b_ranges)
        rowb = g.cin_g * g.taps * b_t.es
        b_all = (self.hi - self.lo) * rowb
        # A block bytes per row (exact count of needed rows x column span x channels)
        i = np.arange(self.Tm, dtype=np.int64)
        p0 = i * tm
        p1 = np.minimum(p0 + tm, self.m_total)
        a_rows = footprint(a_t, self.amap, p0, p1, np.full(self.Tm, row_c[0]),
                           np.full(self.Tm, row_c[1]), bytes_only=True)
        a_max = int(a_rows.max()) if len(a_rows) else 0
        b_res = b_all + 2 * a_max <= self.cap
        keep = b_all if b_res else b_tile
        if a_max == 0:
            k = self.Tm
        else:
            k = max(0, min(self.Tm, (self.cap - keep) // a_max))
        self.plan = Plan(self.Tm, self.Tn, a_max, b_all, b_tile, b_res, int(k))

    def _weight_ranges(self, j: int):
        g, w = self.g, self.b_t
        rowb = g.cin_g * g.taps * w.es
        c0, c1 = int(self.nc0[j]), int(self.nc1[j])
        if self.phase == "forward":                      # W[c0:c1] rows, contiguous
            return np.array([w.base + c0 * rowb]), np.array([w.base + c1 * rowb])
        co = np.arange(int(self.ac0[j]), int(self.ac1[j]), dtype=np.int64)   # dY channels
        gs = (co // g.cout_g) * g.cin_g                  # first input channel of co's group
        l0 = np.maximum(c0, gs) - gs
        l1 = np.minimum(c1, gs + g.cin_g) - gs
        ok = l1 > l0
        co, l0, l1 = co[ok], l0[ok], l1[ok]
        seg = g.taps * w.es
        return w.base + co * rowb + l0 * seg, w.base + co * rowb + l1 * seg

    def _blocks_mn(self) -> Iterator[tuple[int, int]]:
        per_row = (self.plan.a_row_bytes * (1 if self.a_shared and self.plan.a_rows_kept
                                            else self.Tn)
                   + self.plan.b_tile_bytes * self.Tn * (0 if self.plan.b_resident else 1)
                   + self.tm * (self.nc1[-1] - self.nc0[0]) * self.o_t.es) / self.lb + 1
        step = max(1, int(BLOCK_TOUCHES // per_row))
        for i0 in range(0, self.Tm, step):
            yield i0, min(self.Tm, i0 + step)

    def _gen_mn(self, i0: int, i1: int):
        pl, Tn, lb = self.plan, self.Tn, self.lb
        rows = np.arange(i0, i1, dtype=np.int64)
        k = pl.a_rows_kept
        # --- A: per row (shared by the row's CTAs and kept) or per CTA
        if self.a_shared and k >= 1:
            ti = rows
            tj = np.zeros(len(rows), np.int64)
        else:
            ti = np.repeat(rows, Tn)
            tj = np.tile(np.arange(Tn, dtype=np.int64), len(rows))
        p0 = ti * self.tm
        p1 = np.minimum(p0 + self.tm, self.m_total)
        s, e, own = footprint(self.a_t, self.amap, p0, p1, self.ac0[tj], self.ac1[tj])
        a_lines, a_cta = ranges_to_lines(s, e, (ti * Tn + tj)[own], lb)
        if k >= 1:
            thr_a = lambda c: np.maximum(c // Tn - k + 1, 0) * Tn      # noqa: E731
        else:
            thr_a = lambda c: c                                        # noqa: E731
        a_miss = self.state["A"].misses(a_lines, a_cta, thr_a)
        a_lines, a_cta = a_lines[a_miss], a_cta[a_miss]
        # --- B: weights per CTA (only the first row when they stay in L2)
        b_rows = rows if not pl.b_resident else rows[rows == 0]
        if len(b_rows):
            b_lines = np.concatenate([self.b_lines[j] for _ in b_rows for j in range(Tn)])
            b_cta = np.repeat((b_rows[:, None] * Tn + np.arange(Tn)).ravel(),
                              np.tile(self.b_count, len(b_rows)))
            thr_b = (lambda c: np.zeros_like(c)) if pl.b_resident else (lambda c: c)
            b_miss = self.state["B"].misses(b_lines, b_cta, thr_b)
            b_lines, b_cta = b_lines[b_miss], b_cta[b_miss]
        else:
            b_lines = b_cta = np.zeros(0, np.int64)
        # --- output tiles: every CTA, each line written once per work
        ti = np.repeat(rows, Tn)
        tj = np.tile(np.arange(Tn, dtype=np.int64), len(rows))
        p0 = ti * self.tm
        p1 = np.minimum(p0 + self.tm, self.m_total)
        s, e, own = footprint(self.o_t, self.omap, p0, p1, self.nc0[tj], self.nc1[tj])
        o_lines, o_cta, bnd = ranges_to_lines(s, e, (ti * Tn + tj)[own], lb, boundary=True)
        o_miss = _out_misses(self.state["O"], o_lines, bnd)
        if not o_miss.all():
            o_lines, o_cta = o_lines[o_miss], o_cta[o_miss]
        u0 = i0 * Tn
        units = [a_cta - u0, b_cta - u0, o_cta - u0]
        del a_cta, b_cta, o_cta, a_miss, o_miss, bnd
        out, offs = self._merge(a_lines, units[0], b_lines, units[1], o_lines, units[2],
                                (i1 - i0) * Tn, (rows - i0) * Tn)
        del a_lines, b_lines, o_lines      # (the block's arrays freed as soon as done with)
        return self._wave_order(out, offs, units, u0, (i1 - i0) * Tn, (rows - i0) * Tn)

    def _wave_order(self, out, offs, units, u0: int, nunits: int, row_units):
        """The CTAs of one wave (``slots`` consecutive CTAs) run at once: their loads are
        issued interleaved, each CTA's in its own order at the pace of its K loop, then their
        output reads and writes. ``out`` is in CTA order (each CTA: loads, output reads,
        output writes, as _merge lays it out); returns it in that concurrent order and the
        offsets of the rows, each moved to the start of its wave."""
        slots = self.part.slots
        if len(out) == 0 or slots <= 1:
            return out, offs
        a_u, b_u, o_u = units
        nl = (np.bincount(a_u, minlength=nunits) + np.bincount(b_u, minlength=nunits))
        no = np.bincount(o_u, minlength=nunits)
        units.clear()                       # (the caller's list: freed now, not on return)
        del a_u, b_u, o_u
        nr = no if self.acc else np.zeros_like(no)
        tot = nl + nr + no
        start = np.cumsum(tot) - tot
        u = np.repeat(np.arange(nunits, dtype=np.int64), tot)
        local = np.arange(len(out), dtype=np.int64) - np.repeat(start, tot)
        # each element's part of its CTA (0 loads, 1 output reads, 2 output writes), where
        # that part starts in the CTA and its size (per-CTA values repeated, not gathered)
        nl_u, nlr_u = np.repeat(nl, tot), np.repeat(nl + nr, tot)
        loads, reads = local < nl_u, local < nlr_u
        part = np.where(loads, 0, np.where(reads, 1, 2))
        base = np.where(loads, 0, np.where(reads, nl_u, nlr_u))
        size = np.where(loads, nl_u, np.where(reads, np.repeat(nr, tot), np.repeat(no, tot)))
        del nl_u, nlr_u, loads, reads       # (each array freed once done with: a block's peak)
        # a CTA's contiguous runs stay whole (each an A row segment or a weight block: one
        # burst of line fills); the runs of a wave's CTAs alternate by K-loop progress
        addr = out["addr"].astype(np.int64)
        new_run = np.ones(len(out), bool)
        new_run[1:] = (addr[1:] != addr[:-1] + self.lb) | (u[1:] != u[:-1]) \
            | (part[1:] != part[:-1])
        del addr
        run_start = np.maximum.accumulate(np.where(new_run, np.arange(len(out)), 0))
        del new_run
        frac = (local[run_start] - base[run_start] + 0.5) / np.maximum(size, 1)
        del run_start, local, base, size
        wave = (u0 + u) // slots
        del u
        key = (wave - wave[0]) * 3.0 + part + frac * 0.999
        del part, frac
        order = np.argsort(key, kind="stable")
        del key
        # a row's offset: where its wave starts in the new order
        wave_of_row = (u0 + np.asarray(row_units, np.int64)) // slots
        first_of_wave = np.searchsorted((wave - wave[0])[order] * 1, wave_of_row - wave[0])
        return out[order], first_of_wave

    # -- backward_weight ----------------------------------------------------------------------
    def _setup_wgrad(self):
        g, p = self.g, self.part
        a_t, b_t, o_t = (self.pl[r] for r in PHASE_ROLES["backward_weight"])
        self.a_t, self.b_t, self.o_t = a_t, b_t, o_t
        self.tm, self.tn = p.tile_m, p.tile_n
        ncols = g.cin_g * g.taps
        Ti = -(-(self.hi - self.lo) // self.tm)
        Tj = -(-ncols // self.tn)
        tiles = Ti * Tj
        slots = p.slots
        self.waves = -(-tiles // slots)
        # per wave: dW tiles, dY channels, X channels
        self.wave_info = []
        for w in range(self.waves):
            c = np.arange(w * slots, min(tiles, (w + 1) * slots), dtype=np.int64)
            ti, tj = c // Tj, c % Tj
            co0 = self.lo + int(ti.min()) * self.tm
            co1 = min(self.hi, self.lo + (int(ti.max()) + 1) * self.tm)
            if ti.min() == ti.max():
                col0, col1 = int(tj.min()) * self.tn, min(ncols, (int(tj.max()) + 1) * self.tn)
            else:
                col0, col1 = 0, ncols
            l0, l1 = col0 // g.taps, -(-col1 // g.taps)
            x0 = (co0 // g.cout_g) * g.cin_g + l0
            x1 = ((co1 - 1) // g.cout_g) * g.cin_g + l1
            # dW ranges of the wave's tiles: per (tile, row)
            rows_per = np.minimum(self.lo + (ti + 1) * self.tm, self.hi) - (self.lo + ti * self.tm)
            tile_of = np.repeat(np.arange(len(c)), rows_per)
            co = self.lo + ti[tile_of] * self.tm + _local(rows_per)
            j0 = tj[tile_of] * self.tn
            j1 = np.minimum(j0 + self.tn, ncols)
            rowb = ncols * o_t.es
            ws = o_t.base + co * rowb + j0 * o_t.es
            we = o_t.base + co * rowb + j1 * o_t.es
            self.wave_info.append(((co0, co1), (x0, x1), (ws, we)))
        self.m_total = g.n * g.ho * g.wo
        self.P = -(-self.m_total // self.tm)          # K chunks (tile_m output pixels) per wave
        self.amap = Mapping("identity", g.ho, g.wo)
        self.bmap = Mapping("conv", g.ho, g.wo, g.kh, g.kw, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw)
        i = np.arange(self.P, dtype=np.int64)
        p0 = i * self.tm
        p1 = np.minimum(p0 + self.tm, self.m_total)
        chunk = 0
        for (co0, co1), (x0, x1), _ in self.wave_info:
            a = footprint(a_t, self.amap, p0, p1, np.full(self.P, co0), np.full(self.P, co1),
                          bytes_only=True)
            b = footprint(b_t, self.bmap, p0, p1, np.full(self.P, x0), np.full(self.P, x1),
                          bytes_only=True)
            chunk = max(chunk, int((a + b).max()))
        rows = self.waves * self.P
        k = rows if chunk == 0 else max(1, min(rows, self.cap // chunk))
        self.Tn = 1
        self.plan = Plan(rows, 1, chunk, 0, 0, False, int(k), self.waves)

    def _blocks_wgrad(self):
        per_row = self.plan.a_row_bytes / self.lb + 1
        step = max(1, int(BLOCK_TOUCHES // per_row))
        for w in range(self.waves):
            for c0 in range(0, self.P, step):
                yield w, c0, min(self.P, c0 + step)

    def _gen_wgrad(self, w: int, c0: int, c1: int):
        lb = self.lb
        k = self.plan.a_rows_kept
        (co0, co1), (x0, x1), (ws, we) = self.wave_info[w]
        ch = np.arange(c0, c1, dtype=np.int64)
        r = w * self.P + ch                               # global row (time) index
        p0 = ch * self.tm
        p1 = np.minimum(p0 + self.tm, self.m_total)
        n = len(ch)
        thr = lambda rr: np.maximum(rr - k + 1, 0)       # noqa: E731
        s, e, own = footprint(self.a_t, self.amap, p0, p1, np.full(n, co0), np.full(n, co1))
        a_lines, a_r = ranges_to_lines(s, e, r[own], lb)
        miss = self.state["A"].misses(a_lines, a_r, thr)
        a_lines, a_r = a_lines[miss], a_r[miss]
        s, e, own = footprint(self.b_t, self.bmap, p0, p1, np.full(n, x0), np.full(n, x1))
        b_lines, b_r = ranges_to_lines(s, e, r[own], lb)
        miss = self.state["B"].misses(b_lines, b_r, thr)
        b_lines, b_r = b_lines[miss], b_r[miss]
        if c1 == self.P:                                  # end of the wave: write its dW tiles
            o_lines, _, bnd = ranges_to_lines(ws, we, np.zeros(len(ws), np.int64), lb,
                                              boundary=True)
            o_lines = o_lines[_out_misses(self.state["O"], o_lines, bnd)]
            o_r = np.full(len(o_lines), r[-1], np.int64)
        else:
            o_lines = o_r = np.zeros(0, np.int64)
        r0 = int(r[0])
        return self._merge(a_lines, a_r - r0, b_lines, b_r - r0, o_lines, o_r - r0, n,
                           np.arange(n, dtype=np.int64))

    # -- common -------------------------------------------------------------------------------
    def _merge(self, a_lines, a_u, b_lines, b_u, o_lines, o_u, nunits, row_units):
        """Issue order: per time unit (CTA or row of the block, 0-based), its A and B misses
        interleaved evenly (as the K loop loads both), then output reads (accumulate), then
        output writes. Returns (requests, offsets of the rows starting at ``row_units``)."""
        na = np.bincount(a_u, minlength=nunits).astype(np.int64)
        nb = np.bincount(b_u, minlength=nunits).astype(np.int64)
        no = np.bincount(o_u, minlength=nunits).astype(np.int64)
        nr = no if self.acc else np.zeros_like(no)
        tot = na + nb + nr + no
        off = np.cumsum(tot) - tot
        ea, eb, eo = np.cumsum(na), np.cumsum(nb), np.cumsum(no)
        sa, sb, so = ea - na, eb - nb, eo - no
        both = (na > 0) & (nb > 0)
        ab = None
        if both.sum() > _SCATTER_MIN_UNITS:
            return self._merge_scatter(a_lines, a_u, b_lines, b_u, o_lines, o_u, na, nb, nr, no,
                                       off, sa, sb, so, both), \
                off[row_units] if len(row_units) else np.zeros(0, np.int64)
        if both.any():
            ab = {}
            for u in np.flatnonzero(both).tolist():
                ab[u] = _interleave(a_lines[sa[u]:ea[u]], b_lines[sb[u]:eb[u]])
        # segment table: per unit (role, start, end) for A, B, reads, writes; role codes
        # 0 A, 1 B, 2 out (read), 3 out (write), 4 interleaved A+B
        U = nunits
        role = np.empty((U, 4), np.int64)
        s0 = np.empty((U, 4), np.int64)
        s1 = np.empty((U, 4), np.int64)
        role[:, 0], s0[:, 0], s1[:, 0] = 0, sa, np.where(both, sa, ea)
        role[:, 1], s0[:, 1], s1[:, 1] = 1, sb, np.where(both, sb, eb)
        role[:, 2], s0[:, 2], s1[:, 2] = 2, so, np.where(nr > 0, eo, so)
        role[:, 3], s0[:, 3], s1[:, 3] = 3, so, eo
        role, s0, s1 = role.ravel(), s0.ravel(), s1.ravel()
        ne = s1 > s0
        role, s0, s1 = role[ne], s0[ne], s1[ne]
        # coalesce consecutive segments of one role that continue each other
        if len(role) > 1:
            cont = (role[1:] == role[:-1]) & (s0[1:] == s1[:-1])
            first = np.r_[True, ~cont]
            last_idx = np.r_[np.flatnonzero(first)[1:] - 1, len(role) - 1]
            role, s0, s1 = role[first], s0[first], s1[last_idx]
        srcs = (a_lines, b_lines, o_lines, o_lines)
        pieces = []
        ops = []
        lens = []
        # interleaved units go where their (empty) A/B segments were: insert by position
        if ab:
            # rebuild with per-unit handling for the units with both A and B
            pieces, lens, ops = self._pieces_with_ab(ab, U, na, nb, nr, no, sa, sb, so, ea, eb,
                                                     eo, both, a_lines, b_lines, o_lines)
        else:
            for r_, a_, b_ in zip(role.tolist(), s0.tolist(), s1.tolist()):
                pieces.append(srcs[r_][a_:b_])
                lens.append(b_ - a_)
                ops.append(WRITE if r_ == 3 else READ)
        lines = np.concatenate(pieces) if pieces else np.zeros(0, np.int64)
        out = np.empty(len(lines), REQUEST_DTYPE)
        sh = self.lb.bit_length() - 1
        out["addr"] = (lines << sh) if 1 << sh == self.lb else lines * self.lb
        out["op"] = np.repeat(np.array(ops, np.uint8), lens)
        return out, off[row_units] if len(row_units) else np.zeros(0, np.int64)

    def _merge_scatter(self, a_lines, a_u, b_lines, b_u, o_lines, o_u, na, nb, nr, no, off, sa,
                       sb, so, both):
        """The same order as the segment merge, by computing each element's position."""
        pos_a = np.arange(len(a_u), dtype=np.int64) + (off - sa)[a_u]
        pos_b = np.arange(len(b_u), dtype=np.int64) + (off + na - sb)[b_u]
        ia = np.flatnonzero(both[a_u])
        u = a_u[ia]
        r = ia - sa[u]
        pos_a[ia] += np.clip(-((na[u] - (2 * r + 1) * nb[u]) // (2 * na[u])), 0, nb[u])
        ib = np.flatnonzero(both[b_u])
        u = b_u[ib]
        r = ib - sb[u]
        ca = np.clip(((2 * r + 1) * na[u] - nb[u]) // (2 * nb[u]) + 1, 0, na[u])
        pos_b[ib] += ca - na[u]
        total = int((na + nb + nr + no).sum())
        lines = np.empty(total, np.int64)
        op = np.zeros(total, np.uint8)
        lines[pos_a] = a_lines
        lines[pos_b] = b_lines
        pos_o = np.arange(len(o_u), dtype=np.int64) + (off + na + nb - so)[o_u]
        if self.acc:
            lines[pos_o] = o_lines
            pos_o += no[o_u]
        lines[pos_o] = o_lines
        op[pos_o] = WRITE
        out = np.empty(total, REQUEST_DTYPE)
        sh = self.lb.bit_length() - 1
        out["addr"] = (lines << sh) if 1 << sh == self.lb else lines * self.lb
        out["op"] = op
        return out

    def _pieces_with_ab(self, ab, U, na, nb, nr, no, sa, sb, so, ea, eb, eo, both,
                        a_lines, b_lines, o_lines):
        pieces, lens, ops = [], [], []

        def add(x, op):
            if len(x):
                pieces.append(x)
                lens.append(len(x))
                ops.append(op)
        for u in range(U):
            if both[u]:
                add(ab[u], READ)
            else:
                add(a_lines[sa[u]:ea[u]], READ)
                add(b_lines[sb[u]:eb[u]], READ)
            if nr[u]:
                add(o_lines[so[u]:eo[u]], READ)
            add(o_lines[so[u]:eo[u]], WRITE)
        return pieces, lens, ops

    def generate(self):
        """Yields (requests, row_offsets) per block: row_offsets are the positions in the
        block's requests where each of its rows starts."""
        wg = self.phase == "backward_weight"
        slots = 1 if wg else self.part.slots
        self.state = {"A": _Role(self.a_t, slots), "B": _Role(self.b_t, slots),
                      "O": _Role(self.o_t, slots)}
        if wg:
            for w, c0, c1 in self._blocks_wgrad():
                yield self._gen_wgrad(w, c0, c1)
        else:
            self.b_lines = [ranges_to_lines(s, e, np.zeros(len(s), np.int64), self.lb)[0]
                            for s, e in self.b_ranges]
            self.b_count = np.array([len(x) for x in self.b_lines], np.int64)
            for i0, i1 in self._blocks_mn():
                yield self._gen_mn(i0, i1)
