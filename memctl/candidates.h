/* The inline half of candidates.c: each bank's FR-FCFS choice (mc_choose, kept up to date by
 * mc_update_choices) and the scan (mc_host_scan_keys), inlined into the scheduler's step, which
 * runs them several times per simulated request. candidates.c says how they work. */
#ifndef MEMCTL_CANDIDATES_H
#define MEMCTL_CANDIDATES_H

#include "internal.h"

/* a candidate's key: its age, then its bank (seq stays far below 2^58 in any run) */
static inline uint64_t mc_cand_key(const channel *c, int32_t slot, int b)
{
    return c->slots[slot].seq << 6 | (uint64_t)b;
}

static inline void mc_choose(const mc_sim *sim, channel *c, int bi)
{
    const int cap = sim->cfg.row_hit_cap;
    bank *bk = &c->banks[bi];
    const uint64_t bit = 1ull << bi;
    const int32_t open = bk->open_row;
    int32_t a = bk->head[DIR_RD], w = bk->head[DIR_WR];
    /* the bank's oldest request: by age (column_first), by entry into its command queue
     * (round_robin, as DRAMsim3's per-bank command queue) */
    const int by_entry = sim->cfg.arbitration == MC_ARB_ROUND_ROBIN;
    int32_t head = a < 0 ? w : (w < 0 ? a : ((by_entry ? c->slots[a].qseq < c->slots[w].qseq
                                                      : c->slots[a].seq < c->slots[w].seq) ? a : w));
    if (w >= 0 && bk->count[DIR_RD] + bk->count[DIR_WR] >= sim->cfg.bank_queue_depth)
        head = w; /* full: its writes go first, they hold the slots the reads behind need */
    c->col_mask[DIR_RD] &= ~bit;
    c->col_mask[DIR_WR] &= ~bit;
    c->act_mask &= ~bit;
    c->pre_mask &= ~bit;
    bk->col_slot[DIR_RD] = bk->col_slot[DIR_WR] = bk->col_prev[DIR_RD] = bk->col_prev[DIR_WR] = -1;
    bk->other_cmd = -1;
    bk->other_slot = head;
    if (head < 0 || ((c->refb_mask >> bi) & 1)) return; /* (its per-bank refresh first) */
    if (open < 0) {
        bk->other_cmd = MC_CMD_ACT;
        c->act_mask |= bit;
        c->ready_key[CAND_ACT][bi] = mc_cand_key(c, head, bi);
        return;
    }
    int any_hit = 0;
    for (int d = 0; d < 2; d++) {
        int32_t p = -1, h = bk->head[d];
        while (h >= 0 && c->slots[h].row != open) {
            p = h;
            h = c->slots[h].next;
        }
        if (h >= 0 && d == DIR_WR && mc_older_read(c, bk->head[DIR_RD], &c->slots[h])) h = -1;
        if (h >= 0 && !(cap > 0 && bk->hits >= cap && h != head)) {
            bk->col_slot[d] = h;
            bk->col_prev[d] = p;
            c->col_mask[d] |= bit;
            c->ready_key[d][bi] = mc_cand_key(c, h, bi);
            any_hit = 1;
        }
    }
    if (!any_hit) {
        bk->other_cmd = MC_CMD_PRE;
        c->pre_mask |= bit;
        c->ready_key[CAND_PRE][bi] = mc_cand_key(c, head, bi);
    }
}

/* recompute the choices of the banks that changed */
static inline void mc_update_choices(const mc_sim *sim, channel *c)
{
    uint64_t m = c->dirty_mask & sim->host_banks;
    c->dirty_mask = 0;
    while (m) {
        int b = __builtin_ctzll(m);
        m &= m - 1;
        mc_choose(sim, c, b);
    }
}

/* rank and bus terms of the ready cycle, per class */
static inline tick mc_rank_rd(const channel *c, const rank_state *rk)
{
    return MAXT(rk->next_rd, c->next_col);
}
static inline tick mc_rank_wr(const channel *c, const rank_state *rk)
{
    return MAXT(rk->next_wr, c->next_col);
}
static inline tick mc_rank_act(const mc_sim *sim, const channel *c, const rank_state *rk)
{
    tick faw = rk->faw[rk->faw_pos] + sim->cfg.tFAW; /* oldest of the last four ACTs */
    return MAXT(MAXT(rk->next_act, faw), c->next_row);
}

/* the earliest cycle bank b's candidates can issue (NEVER: none, or its rank refreshes) */
static inline tick mc_bank_wake(const mc_sim *sim, const channel *c, int b)
{
    const rank_state *rk = &c->ranks[sim->bank_rank[b]];
    if (rk->refresh_pending) return NEVER;
    const bank *bk = &c->banks[b];
    tick w = NEVER;
    if (bk->col_slot[DIR_RD] >= 0) w = MINT(w, MAXT(c->ready_at[CAND_RD][b], mc_rank_rd(c, rk)));
    if (bk->col_slot[DIR_WR] >= 0) w = MINT(w, MAXT(c->ready_at[CAND_WR][b], mc_rank_wr(c, rk)));
    if (bk->other_cmd == MC_CMD_ACT)
        w = MINT(w, MAXT(c->ready_at[CAND_ACT][b], mc_rank_act(sim, c, rk)));
    if (bk->other_cmd == MC_CMD_PRE) w = MINT(w, MAXT(c->ready_at[CAND_PRE][b], c->next_row));
    return w;
}

/* The oldest candidate of class cls among the banks of m that can issue at t, with the rank
 * and bus term `level`, as its key (UINT64_MAX: none); the others' ready cycles go into *wake.
 * (gcc branches on readiness however it is written; written so, the loop takes the fewest
 * instructions.) */
static inline __attribute__((always_inline)) uint64_t
mc_scan(const channel *c, int cls, uint64_t m, tick level, tick t, tick *wake)
{
    if (!m) return UINT64_MAX;
    const tick *ready_at = c->ready_at[cls];
    if (level > t) { /* none can: the earliest is the later of level and the earliest bank */
        if (*wake <= level) return UINT64_MAX; /* (then that is no earlier than *wake) */
        tick lo = NEVER;
        while (m) {
            unsigned b = (unsigned)__builtin_ctzll(m);
            m &= m - 1;
            if (ready_at[b] <= level) { /* then the earliest is level itself */
                lo = level;
                break;
            }
            lo = MINT(lo, ready_at[b]);
        }
        if (lo < NEVER) *wake = MINT(*wake, MAXT(lo, level));
        return UINT64_MAX;
    }
    const uint64_t *key = c->ready_key[cls];
    uint64_t best = UINT64_MAX;
    tick w = *wake;
    while (m) { /* level <= t: ready at t iff the bank terms are; else ready at them */
        unsigned b = (unsigned)__builtin_ctzll(m);
        m &= m - 1;
        tick ready = ready_at[b];
        if (ready > t) w = MINT(w, ready);
        else best = MINT(best, key[b]);
    }
    *wake = w;
    return best;
}

/* the older of *best and key (class cls) */
static inline void mc_keep_older(uint64_t *best, int *best_cls, uint64_t key, int cls)
{
    if (key < *best) {
        *best = key;
        *best_cls = cls;
    }
}

static inline mc_pick mc_pick_of(uint64_t key, int cls)
{
    mc_pick p = {UINT64_MAX, -1, -1};
    if (key != UINT64_MAX) {
        p.seq = key >> 6;
        p.bank = (int)(key & 63);
        p.cls = cls;
    }
    return p;
}

/* The scan: the oldest column and row candidates that can issue at t, as their keys and
 * classes (*kc, *kr UINT64_MAX: none; closed page: *kr UINT64_MAX and *cr CAND_IDLE with the
 * idle bank's index in *idle); the ready cycles of the others go into *wake */
static inline __attribute__((always_inline)) void
mc_host_scan_keys(const mc_sim *sim, channel *c, tick t, int want, uint64_t *kc_out, int *cc_out,
                  uint64_t *kr_out, int *cr_out, int *idle_out, tick *wake)
{
    uint64_t kc = UINT64_MAX, kr = UINT64_MAX;
    int cc = -1, cr = -1, idle_bank = -1;
    tick w = *wake;
    for (int r = 0; r < sim->cfg.ranks; r++) {
        const rank_state *rk = &c->ranks[r];
        if (rk->refresh_pending) continue;
        uint64_t in_rank = sim->rank_banks[r];
        if (want & WANT_ROW) {
            mc_keep_older(&kr, &cr,
                          mc_scan(c, CAND_PRE, c->pre_mask & in_rank, c->next_row, t, &w),
                          CAND_PRE);
            /* activates: when the rank's own terms (tRRD_S, tFAW) hold them back, its level is
             * the wake-up for all of them (a lower bound of each one's ready cycle) */
            uint64_t acts = c->act_mask & in_rank;
            if (acts) {
                tick level = mc_rank_act(sim, c, rk);
                if (level > t) w = MINT(w, level);
                else mc_keep_older(&kr, &cr, mc_scan(c, CAND_ACT, acts, level, t, &w), CAND_ACT);
            }
        }
        /* (the column classes after the row classes: when their rank and bus term holds them
         * back, a wake-up the row classes found lets them skip their loop more often) */
        if (want & WANT_COL) {
            mc_keep_older(&kc, &cc,
                          mc_scan(c, CAND_RD, c->col_mask[DIR_RD] & in_rank, mc_rank_rd(c, rk), t,
                                  &w),
                          CAND_RD);
            mc_keep_older(&kc, &cc,
                          mc_scan(c, CAND_WR, c->col_mask[DIR_WR] & in_rank, mc_rank_wr(c, rk), t,
                                  &w),
                          CAND_WR);
        }
    }
    if (sim->cfg.closed_page && (want & WANT_ROW)) { /* close rows nothing queued wants */
        uint64_t idle = c->open_mask & sim->host_banks;
        while (idle) {
            int b = __builtin_ctzll(idle);
            idle &= idle - 1;
            const bank *bk = &c->banks[b];
            if (bk->col_slot[0] >= 0 || bk->col_slot[1] >= 0 || bk->other_cmd >= 0 ||
                c->ranks[sim->bank_rank[b]].refresh_pending)
                continue;
            tick ready = MAXT(bk->next_pre, c->next_row);
            if (ready > t) w = MINT(w, ready);
            else if (kr == UINT64_MAX && idle_bank < 0) { /* the lowest bank, if nothing else */
                idle_bank = b;
                cr = CAND_IDLE;
            }
        }
    }
    *kc_out = kc;
    *cc_out = cc;
    *kr_out = kr;
    *cr_out = cr;
    *idle_out = idle_bank;
    *wake = w;
}

/* ---- round-robin arbitration (MC_ARB_ROUND_ROBIN) ----------------------------------- */

/* The banks of m whose candidate of class cls can issue at t, with the rank and bus term
 * `level`; the others' ready cycles go into *wake (as mc_scan) */
static inline __attribute__((always_inline)) uint64_t
mc_scan_ready(const channel *c, int cls, uint64_t m, tick level, tick t, tick *wake)
{
    if (!m) return 0;
    const tick *ready_at = c->ready_at[cls];
    if (level > t) {
        if (*wake <= level) return 0;
        tick lo = NEVER;
        while (m) {
            unsigned b = (unsigned)__builtin_ctzll(m);
            m &= m - 1;
            if (ready_at[b] <= level) {
                lo = level;
                break;
            }
            lo = MINT(lo, ready_at[b]);
        }
        if (lo < NEVER) *wake = MINT(*wake, MAXT(lo, level));
        return 0;
    }
    /* without branches on readiness, which no predictor guesses well: r - (t + 1) as unsigned
     * is below 2^62 for a bank that cannot issue at t (r > t; all terms are below NEVER) and at
     * least 2^63 for one that can (r <= t, t < 2^62), so its top bit says ready, and the least
     * of them gives the earliest of the others */
    uint64_t ready = 0, least = UINT64_MAX;
    const uint64_t from = (uint64_t)t + 1;
    while (m) {
        unsigned b = (unsigned)__builtin_ctzll(m);
        m &= m - 1;
        uint64_t x = (uint64_t)ready_at[b] - from;
        ready |= (x >> 63) << b;
        least = x < least ? x : least;
    }
    if (least >> 63 == 0) *wake = MINT(*wake, (tick)(least + from));
    return ready;
}

/* The banks whose candidate can issue at t, per class (*ready[CAND_RD .. CAND_PRE]); the ready
 * cycles of the others go into *wake. (No closed-page idle rows: mc_host_scan_keys finds those.) */
static inline __attribute__((always_inline)) void
mc_host_scan_ready(const mc_sim *sim, const channel *c, tick t, uint64_t ready[CAND_CLASSES],
                   tick *wake)
{
    tick w = *wake;
    ready[0] = ready[1] = ready[2] = ready[3] = 0;
    for (int r = 0; r < sim->cfg.ranks; r++) {
        const rank_state *rk = &c->ranks[r];
        if (rk->refresh_pending) continue;
        uint64_t in_rank = sim->rank_banks[r];
        ready[CAND_PRE] |= mc_scan_ready(c, CAND_PRE, c->pre_mask & in_rank, c->next_row, t, &w);
        uint64_t acts = c->act_mask & in_rank;
        if (acts) {
            tick level = mc_rank_act(sim, c, rk);
            if (level > t) w = MINT(w, level);
            else ready[CAND_ACT] |= mc_scan_ready(c, CAND_ACT, acts, level, t, &w);
        }
        ready[CAND_RD] |= mc_scan_ready(c, CAND_RD, c->col_mask[DIR_RD] & in_rank,
                                        mc_rank_rd(c, rk), t, &w);
        ready[CAND_WR] |= mc_scan_ready(c, CAND_WR, c->col_mask[DIR_WR] & in_rank,
                                        mc_rank_wr(c, rk), t, &w);
    }
    *wake = w;
}

/* the first bank of m (not 0) in turn from bank `from` (0..64) on, wrapping round */
static inline int mc_first_in_turn(uint64_t m, int from)
{
    uint64_t after = from < 64 ? m & (~0ull << from) : 0;
    return __builtin_ctzll(after ? after : m);
}

#endif
