/* The timing table: when each command may issue, and what issuing it constrains, at the bank,
 * bank-group, rank and channel level (docs/memctl.md, "Timing constraints"). */
#include "internal.h"

static tick faw_ready(const mc_sim *sim, const rank_state *rk)
{
    return rk->faw[rk->faw_pos] + sim->cfg.tFAW; /* oldest of the last four ACTs */
}

tick mc_act_ready(const mc_sim *sim, const channel *c, int b)
{
    const bank *bk = &c->banks[b];
    const group *g = &c->groups[sim->bank_group[b]];
    const rank_state *rk = &c->ranks[sim->bank_rank[b]];
    tick t = MAXT(bk->next_act, g->next_act);
    t = MAXT(t, rk->next_act);
    t = MAXT(t, faw_ready(sim, rk));
    return MAXT(t, c->next_row);
}

tick mc_col_ready(const mc_sim *sim, const channel *c, int b, int dir)
{
    const bank *bk = &c->banks[b];
    const group *g = &c->groups[sim->bank_group[b]];
    const rank_state *rk = &c->ranks[sim->bank_rank[b]];
    tick t = dir == DIR_RD ? MAXT(bk->next_rd, MAXT(g->next_rd, rk->next_rd))
                           : MAXT(bk->next_wr, MAXT(g->next_wr, rk->next_wr));
    return MAXT(t, c->next_col);
}

/* the scheduler's copy of the bank and bank-group terms (channel.ready_at) */
static void bank_moved(const mc_sim *sim, channel *c, int b)
{
    const bank *bk = &c->banks[b];
    const group *g = &c->groups[sim->bank_group[b]];
    c->ready_at[CAND_RD][b] = MAXT(bk->next_rd, g->next_rd);
    c->ready_at[CAND_WR][b] = MAXT(bk->next_wr, g->next_wr);
    c->ready_at[CAND_ACT][b] = MAXT(bk->next_act, g->next_act);
    c->ready_at[CAND_PRE][b] = bk->next_pre;
}

/* fold bank b's terms into the PIM scope's maxima (channel.scope_next_act ...), if b is in the
 * scope (and the part has PIM units: mc_sim.scope_kept). Exact as long as each of b's terms did
 * not decrease since it was last folded in: the maximum over the scope of a term that grew is
 * the max of the old maximum and the new value */
static void scope_moved(const mc_sim *sim, channel *c, int b)
{
    if (!((sim->scope_kept >> b) & 1)) return;
    const bank *bk = &c->banks[b];
    c->scope_next_act = MAXT(c->scope_next_act, bk->next_act);
    c->scope_next_rd = MAXT(c->scope_next_rd, bk->next_rd);
    c->scope_next_wr = MAXT(c->scope_next_wr, bk->next_wr);
    c->scope_next_pre = MAXT(c->scope_next_pre, bk->next_pre);
    c->scope_closed_at = MAXT(c->scope_closed_at, bk->closed_at);
}

/* a bank-group term only grows: fold it into the scheduler's copies (one class, ready) of the
 * banks of group gi, which are banks gi * banks_per_group onwards (sim.c numbers them so) */
static inline void group_moved(const mc_sim *sim, tick *ready, int gi, tick term)
{
    const int n = sim->cfg.banks_per_group;
    tick *r = ready + gi * n;
    if (n == 4) { /* (both shipped parts) */
        r[0] = MAXT(r[0], term);
        r[1] = MAXT(r[1], term);
        r[2] = MAXT(r[2], term);
        r[3] = MAXT(r[3], term);
        return;
    }
    for (int i = 0; i < n; i++) r[i] = MAXT(r[i], term);
}

void mc_issue_act(mc_sim *sim, channel *c, int b, int32_t row, tick t)
{
    const mc_config *k = &sim->cfg;
    bank *bk = &c->banks[b];
    group *g = &c->groups[sim->bank_group[b]];
    rank_state *rk = &c->ranks[sim->bank_rank[b]];
    bk->open_row = row;
    bk->hits = 0;
    c->dirty_mask |= 1ull << b;
    bk->next_act = MAXT(bk->next_act, t + k->tRC);
    bk->next_rd = MAXT(bk->next_rd, t + k->tRCDRD);
    bk->next_wr = MAXT(bk->next_wr, t + k->tRCDWR);
    bk->next_pre = MAXT(bk->next_pre, t + k->tRAS);
    g->next_act = MAXT(g->next_act, t + k->tRRD_L);
    group_moved(sim, c->ready_at[CAND_ACT], sim->bank_group[b], g->next_act);
    bank_moved(sim, c, b);
    rk->next_act = MAXT(rk->next_act, t + k->tRRD_S);
    rk->faw[rk->faw_pos] = t;
    rk->faw_pos = (rk->faw_pos + 1) & 3;
    c->open_mask |= 1ull << b;
    rk->acts++;
    mc_rank_opened(rk, t);
    scope_moved(sim, c, b);
}

void mc_issue_pre(mc_sim *sim, channel *c, int b, tick t)
{
    bank *bk = &c->banks[b];
    if (bk->open_row >= 0) mc_rank_closed(&c->ranks[sim->bank_rank[b]], t);
    bk->open_row = -1;
    bk->hits = 0;
    c->dirty_mask |= 1ull << b;
    bk->next_act = MAXT(bk->next_act, t + sim->cfg.tRP);
    /* closed_at is assigned, not maxed. It never decreases in practice (the bank was opened by
     * an ACT at or after its closed_at, and t is later still), but should it, the scope's max
     * is recomputed rather than assumed */
    int lowered = t + sim->cfg.tRP < bk->closed_at;
    bk->closed_at = t + sim->cfg.tRP;
    c->open_mask &= ~(1ull << b);
    /* of the scheduler's copies only the ACT term moved (bank_moved would give the others
     * their values again) */
    c->ready_at[CAND_ACT][b] = MAXT(bk->next_act, c->groups[sim->bank_group[b]].next_act);
    scope_moved(sim, c, b);
    if (lowered && ((sim->scope_kept >> b) & 1)) {
        tick m = 0;
        for (uint64_t s = sim->pim_scope; s; s &= s - 1)
            m = MAXT(m, c->banks[__builtin_ctzll(s)].closed_at);
        c->scope_closed_at = m;
    }
}

void mc_issue_col(mc_sim *sim, channel *c, int b, int dir, tick t)
{
    const mc_config *k = &sim->cfg;
    const int B = k->burst;
    bank *bk = &c->banks[b];
    const int gi = sim->bank_group[b], ri = sim->bank_rank[b];
    group *g = &c->groups[gi];
    rank_state *own = &c->ranks[ri];
    bk->hits++;
    c->dirty_mask |= 1ull << b;
    if (dir == DIR_RD) own->reads++;
    else own->writes++;
    if (dir == DIR_RD) {
        const tick rd_to_wr = t + ((tick)k->CL + B - k->CWL + k->tRTRS); /* 64-bit sums */
        bk->next_pre = MAXT(bk->next_pre, t + k->tRTP);
        for (int r = 0; r < k->ranks; r++) { /* the other ranks (tRTRS) */
            if (r == ri) continue;
            rank_state *rk = &c->ranks[r];
            rk->next_rd = MAXT(rk->next_rd, t + B + k->tRTRS);
            rk->next_wr = MAXT(rk->next_wr, rd_to_wr);
        }
        own->next_rd = MAXT(own->next_rd, t + MAXT(B, k->tCCD_S));
        own->next_wr = MAXT(own->next_wr, rd_to_wr);
        g->next_rd = MAXT(g->next_rd, t + MAXT(B, k->tCCD_L));
        /* fold the group's term into its banks' copies (b's own RD / WR terms did not move); a
         * RD moved only the group's next_rd */
        group_moved(sim, c->ready_at[CAND_RD], gi, g->next_rd);
    } else {
        const tick wr_to_rd_o = t + MAXT(0, (tick)k->CWL + B + k->tRTRS - k->CL);
        bk->next_pre = MAXT(bk->next_pre, t + k->CWL + B + k->tWR);
        for (int r = 0; r < k->ranks; r++) {
            if (r == ri) continue;
            rank_state *rk = &c->ranks[r];
            rk->next_wr = MAXT(rk->next_wr, t + B + k->tRTRS);
            rk->next_rd = MAXT(rk->next_rd, wr_to_rd_o);
        }
        own->next_wr = MAXT(own->next_wr, t + MAXT(B, k->tCCD_S));
        own->next_rd = MAXT(own->next_rd, t + k->CWL + B + k->tWTR_S);
        g->next_wr = MAXT(g->next_wr, t + MAXT(B, k->tCCD_L));
        g->next_rd = MAXT(g->next_rd, t + k->CWL + B + k->tWTR_L);
        group_moved(sim, c->ready_at[CAND_RD], gi, g->next_rd);
        group_moved(sim, c->ready_at[CAND_WR], gi, g->next_wr);
    }
    c->ready_at[CAND_PRE][b] = bk->next_pre;
    scope_moved(sim, c, b);
}

void mc_issue_ref(mc_sim *sim, channel *c, int r, tick t)
{
    const mc_config *k = &sim->cfg;
    for (int b = 0; b < sim->nbanks; b++) {
        if (sim->bank_rank[b] != r) continue;
        bank *bk = &c->banks[b];
        bk->next_act = MAXT(bk->next_act, t + k->tRFC);
        bk->closed_at = MAXT(bk->closed_at, t + k->tRFC);
        bank_moved(sim, c, b);
        scope_moved(sim, c, b);
    }
    rank_state *rk = &c->ranks[r];
    rk->refs++;
    rk->refresh_pending = 0;
    rk->refresh_due += k->tREFI;
    c->refreshing--;
    c->refresh_next = NEVER;
    for (int i = 0; i < k->ranks; i++) c->refresh_next = MINT(c->refresh_next, c->ranks[i].refresh_due);
}

/* The n refreshes of rank r due from its refresh_due on, each at its due cycle, in one step:
 * what n calls of mc_issue_ref at those cycles leave (each only raises the banks' terms to its
 * cycle + tRFC, so the last one decides). Only for a rank whose banks are closed by then and
 * whose channel is idle (sim.c, skip_idle_refreshes). */
void mc_skip_refreshes(mc_sim *sim, channel *c, int r, uint64_t n)
{
    const mc_config *k = &sim->cfg;
    rank_state *rk = &c->ranks[r];
    const tick last = rk->refresh_due + (tick)(n - 1) * k->tREFI;
    for (int b = 0; b < sim->nbanks; b++) {
        if (sim->bank_rank[b] != r) continue;
        bank *bk = &c->banks[b];
        bk->next_act = MAXT(bk->next_act, last + k->tRFC);
        bk->closed_at = MAXT(bk->closed_at, last + k->tRFC);
        bank_moved(sim, c, b);
        scope_moved(sim, c, b);
    }
    rk->refresh_due = last + k->tREFI;
    rk->refs += n;
    c->refresh_next = NEVER;
    for (int i = 0; i < k->ranks; i++) c->refresh_next = MINT(c->refresh_next, c->ranks[i].refresh_due);
}

/* All-bank (PIM) commands act on every bank of the PIM scope in lockstep: each waits for the
 * latest bank of the scope (the channel's scope_* maxima) and for the bus. */
tick mc_scope_ready(const mc_sim *sim, const channel *c, int cmd)
{
    (void)sim;
    tick t;
    switch (cmd) {
    case MC_CMD_PIM_ACT: t = MAXT(c->next_row, c->scope_next_act); break;
    case MC_CMD_PIM_RD: t = MAXT(MAXT(c->next_col, c->scope_next_rd), c->pim_next_col); break;
    case MC_CMD_PIM_WR: t = MAXT(MAXT(c->next_col, c->scope_next_wr), c->pim_next_col); break;
    case MC_CMD_PIM_PRE: t = MAXT(c->next_row, c->scope_next_pre); break;
    default: t = MAXT(c->next_row, c->scope_closed_at); break; /* PIM_ENTER / PIM_EXIT / REF */
    }
    return MAXT(t, c->mode_ready);
}

/* Issue an all-bank command: every bank of the scope takes the same terms, so the scope's maxima
 * take them too (PIM_PRE assigns closed_at in every bank: the maximum is that value). */
void mc_issue_pim(mc_sim *sim, channel *c, int cmd, int32_t row, tick t)
{
    const mc_config *k = &sim->cfg;
    uint64_t m = sim->pim_scope;
    if (cmd == MC_CMD_PIM_RD || cmd == MC_CMD_PIM_WR) {
        /* only next_pre moves (and ready_at's copy of it). The banks' host choices depend on
         * open_row, hits and the queues, none of which a PIM column command changes, so they
         * are not marked dirty */
        tick pre = t + (cmd == MC_CMD_PIM_RD ? (tick)k->tRTP : (tick)k->CWL + k->burst + k->tWR);
        while (m) {
            int b = __builtin_ctzll(m);
            m &= m - 1;
            bank *bk = &c->banks[b];
            rank_state *rk = &c->ranks[sim->bank_rank[b]];
            if (cmd == MC_CMD_PIM_RD) rk->pim_reads++;
            else rk->pim_writes++;
            bk->next_pre = MAXT(bk->next_pre, pre);
            c->ready_at[CAND_PRE][b] = bk->next_pre;
        }
        c->scope_next_pre = MAXT(c->scope_next_pre, pre);
        c->pim_next_col = t + k->pim_column_cycles;
        return;
    }
    while (m) {
        int b = __builtin_ctzll(m);
        m &= m - 1;
        bank *bk = &c->banks[b];
        c->dirty_mask |= 1ull << b;
        switch (cmd) {
        case MC_CMD_PIM_ACT:
            if (bk->open_row < 0) mc_rank_opened(&c->ranks[sim->bank_rank[b]], t);
            c->ranks[sim->bank_rank[b]].pim_acts++;
            bk->open_row = row;
            bk->hits = 0;
            bk->next_act = MAXT(bk->next_act, t + k->tRC);
            bk->next_rd = MAXT(bk->next_rd, t + k->tRCDRD);
            bk->next_wr = MAXT(bk->next_wr, t + k->tRCDWR);
            bk->next_pre = MAXT(bk->next_pre, t + k->tRAS);
            c->open_mask |= 1ull << b;
            break;
        case MC_CMD_PIM_PRE:
            if (bk->open_row >= 0) mc_rank_closed(&c->ranks[sim->bank_rank[b]], t);
            bk->open_row = -1;
            bk->next_act = MAXT(bk->next_act, t + k->tRP);
            bk->closed_at = t + k->tRP;
            c->open_mask &= ~(1ull << b);
            break;
        default: break;
        }
        bank_moved(sim, c, b);
    }
    if (cmd == MC_CMD_PIM_ACT) {
        c->pim_row = row;
        c->scope_next_act = MAXT(c->scope_next_act, t + k->tRC);
        c->scope_next_rd = MAXT(c->scope_next_rd, t + k->tRCDRD);
        c->scope_next_wr = MAXT(c->scope_next_wr, t + k->tRCDWR);
        c->scope_next_pre = MAXT(c->scope_next_pre, t + k->tRAS);
    }
    if (cmd == MC_CMD_PIM_PRE) {
        c->pim_row = -1;
        c->scope_next_act = MAXT(c->scope_next_act, t + k->tRP);
        c->scope_closed_at = t + k->tRP;
    }
}

/* A per-bank refresh of bank b (refresh.c) at t, ending at `done` (t + tRFCb): the bank can
 * activate, and counts as closed, from then on; the rank's other banks can activate from
 * t + tRREFD. */
void mc_refb_terms(mc_sim *sim, channel *c, int b, tick t, tick done)
{
    bank *bk = &c->banks[b];
    rank_state *rk = &c->ranks[sim->bank_rank[b]];
    rk->next_act = MAXT(rk->next_act, t + sim->cfg.tRREFD);
    bk->next_act = MAXT(bk->next_act, done);
    bk->closed_at = MAXT(bk->closed_at, done);
    bank_moved(sim, c, b);
    scope_moved(sim, c, b);
}
