/* Per-bank refresh (refresh = "bank", mc_config.refresh 2; HBM2's REFSB, DDR5's REFsb).
 *
 * Each rank refreshes one bank every tREFI / (banks of a rank) cycles (rounded down, so every
 * bank is refreshed at least once every tREFI), in the order bank group first: position p of
 * the rank's order is bank group p % bankgroups, bank (p / bankgroups) % banks_per_group.
 * Ranks are staggered over that interval. A bank's refresh falls due (its bit in refb_mask,
 * one more in channel.refreshing), the controller closes the PIM's open row if the bank is in
 * the PIM scope, precharges the bank if it has a row open, then refreshes it once it is
 * closed: the REFB blocks only that bank, for tRFCb (its next ACT, and the all-bank commands
 * of a scope that holds it, wait for t + tRFCb), and holds the rank's next ACT and REFB to
 * another bank back tRREFD (JESD235). Meanwhile the scheduler serves the other banks (a bank
 * of refb_mask has no host candidate: candidates.h, mc_choose; marking it dirty when its
 * refresh falls due and when it is done recomputes its choice); the PIM issues nothing while
 * any refresh is pending (scheduler.c, pim_candidate), so all-bank commands come after it.
 *
 * rank_state.refresh_due is here the cycle the rank's next bank falls due (it advances when
 * the bank is marked, not when it is refreshed), refb_pos that bank's position. */
#include "internal.h"

static void wake_at(tick *wake, tick when) { if (when < *wake) *wake = when; }

tick mc_refb_interval(const mc_config *k)
{
    return (tick)k->tREFI / ((tick)k->bankgroups * k->banks_per_group);
}

/* the channel's bank index of position pos in rank r's refresh order */
static int bank_at(const mc_config *k, int r, int pos)
{
    int bg = pos % k->bankgroups, ba = (pos / k->bankgroups) % k->banks_per_group;
    return (r * k->bankgroups + bg) * k->banks_per_group + ba;
}

static void next_due(const mc_sim *sim, channel *c)
{
    c->refresh_next = NEVER;
    for (int i = 0; i < sim->cfg.ranks; i++)
        c->refresh_next = MINT(c->refresh_next, c->ranks[i].refresh_due);
}

void mc_refb_init(const mc_sim *sim, channel *c)
{
    const mc_config *k = &sim->cfg;
    const tick every = mc_refb_interval(k);
    for (int r = 0; r < k->ranks; r++) { /* ranks staggered over one interval */
        c->ranks[r].refresh_due = every * (r + 1) / k->ranks;
        c->ranks[r].refb_pos = 0;
    }
    next_due(sim, c);
}

/* Mark every bank whose refresh fell due by t; 1 if any is pending. */
static int mark_due(mc_sim *sim, channel *c, tick t, tick *wake)
{
    const mc_config *k = &sim->cfg;
    const int nb = k->bankgroups * k->banks_per_group;
    const tick every = mc_refb_interval(k);
    if (t >= c->refresh_next) {
        for (int r = 0; r < k->ranks; r++) {
            rank_state *rk = &c->ranks[r];
            while (t >= rk->refresh_due) {
                int b = bank_at(k, r, rk->refb_pos);
                if (!((c->refb_mask >> b) & 1)) { /* (one still pending is not doubled) */
                    c->refb_mask |= 1ull << b;
                    c->dirty_mask |= 1ull << b; /* its choice: none until refreshed */
                    c->refreshing++;
                }
                rk->refb_pos = (rk->refb_pos + 1) % nb;
                rk->refresh_due += every;
            }
        }
        next_due(sim, c);
        c->scan_valid = 0;
    }
    wake_at(wake, c->refresh_next);
    return c->refb_mask != 0;
}

/* Returns 1 if a refresh-related command issued at t (the scheduler's hook, scheduler.c). */
int mc_refb_step(mc_sim *sim, channel *c, tick t, tick *wake)
{
    if (!c->refreshing && t < c->refresh_next) {
        wake_at(wake, c->refresh_next);
        return 0;
    }
    if (!mark_due(sim, c, t, wake)) return 0;
    const mc_config *k = &sim->cfg;
    if (c->pim_row >= 0 && (c->refb_mask & sim->pim_scope))
        return mc_close_pim_row(sim, c, t, wake);
    uint64_t m = c->refb_mask;
    while (m) {
        int b = __builtin_ctzll(m);
        m &= m - 1;
        const int p = mc_precharge_for_refresh(sim, c, b, t, wake);
        if (p > 0) return 1;
        if (p == 0) continue;
        bank *bk = &c->banks[b];
        int r = sim->bank_rank[b];
        tick ready = MAXT(MAXT(c->next_row, bk->closed_at), c->mode_ready);
        ready = MAXT(ready, c->ranks[r].refb_ok);
        if (ready > t) {
            wake_at(wake, ready);
            continue;
        }
        mc_refb_terms(sim, c, b, t, t + k->tRFCb);
        c->ranks[r].refb_ok = t + k->tRREFD;
        c->refb_mask &= ~(1ull << b);
        c->dirty_mask |= 1ull << b;
        c->refreshing--;
        c->ranks[r].refbs++;
        mc_log_cmd(sim, c, b, MC_CMD_REFB, MC_BY_CTRL, -1, -1, t);
        sim->refreshes++;
        /* the livelock watchdog counts refresh intervals: one per round of the rank's banks */
        if (bank_at(k, r, 0) == b) mc_watchdog(sim, c, t);
        return 1;
    }
    return 0;
}

/* For sim.c's idle-gap skip: every rank's next refreshes would issue each at its due cycle:
 * none pending, dues apart from the other ranks' (one command per cycle), banks closed. */
int mc_refb_skip_ok(const mc_sim *sim, const channel *c, tick t)
{
    const mc_config *k = &sim->cfg;
    const tick every = mc_refb_interval(k);
    if (c->refb_mask) return 0;
    for (int r = 0; r < k->ranks; r++) {
        const rank_state *rk = &c->ranks[r];
        if (rk->refresh_due <= t || rk->refb_ok > rk->refresh_due) return 0;
        for (int q = 0; q < k->ranks; q++)
            if (q != r && c->ranks[q].refresh_due % every == rk->refresh_due % every) return 0;
        for (int b = 0; b < sim->nbanks; b++)
            if (sim->bank_rank[b] == r && c->banks[b].closed_at > rk->refresh_due) return 0;
    }
    return 1;
}

/* The refreshes due before stop, each issued at its due cycle, in one step: what simulating
 * them leaves (each bank's last one decides its terms). Returns how many. */
uint64_t mc_refb_skip(mc_sim *sim, channel *c, tick stop)
{
    const mc_config *k = &sim->cfg;
    const int nb = k->bankgroups * k->banks_per_group;
    const tick every = mc_refb_interval(k);
    uint64_t skipped = 0;
    for (int r = 0; r < k->ranks; r++) {
        rank_state *rk = &c->ranks[r];
        if (rk->refresh_due >= stop) continue;
        uint64_t n = (uint64_t)((stop - 1 - rk->refresh_due) / every) + 1; /* dues below stop */
        uint64_t first = n > (uint64_t)nb ? n - (uint64_t)nb : 0;
        for (uint64_t j = first; j < n; j++) {
            int pos = (int)(((uint64_t)rk->refb_pos + j) % (uint64_t)nb);
            tick at = rk->refresh_due + (tick)j * every;
            mc_refb_terms(sim, c, bank_at(k, r, pos), at, at + k->tRFCb);
            rk->refb_ok = at + k->tRREFD;
        }
        rk->refb_pos = (int)(((uint64_t)rk->refb_pos + n) % (uint64_t)nb);
        rk->refresh_due += (tick)n * every;
        rk->refbs += n;
        skipped += n;
    }
    next_due(sim, c);
    return skipped;
}
