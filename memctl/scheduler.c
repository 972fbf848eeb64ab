/* The per-channel scheduler: refresh, hand-over of access authority, and FR-FCFS (ready row
 * hits first, then the oldest request) with a cap on consecutive row hits. One command per
 * channel per cycle. When nothing can issue, the channel sleeps until the earliest cycle at
 * which something could (no per-cycle work while idle). */
#include "internal.h"

typedef struct cand {
    int cmd;          /* MC_CMD_* or -1 */
    int bank;
    int32_t slot, prev;
    uint64_t seq;
    int col;          /* a column command: preferred (first ready) */
} cand;

/* rank and bus terms of readiness, computed once per scan (at most 8 ranks) */
typedef struct levels {
    tick act[8], rd[8], wr[8];
    int refreshing[8];
} levels;

static void better(cand *best, int cmd, int b, int32_t slot, int32_t prev, uint64_t seq, int col)
{
    if (best->cmd < 0 || (col && !best->col) || (col == best->col && seq < best->seq)) {
        best->cmd = cmd;
        best->bank = b;
        best->slot = slot;
        best->prev = prev;
        best->seq = seq;
        best->col = col;
    }
}

int mc_can_serve(const mc_sim *sim, const channel *c, int requestor, tick t)
{
    if (sim->policy->partition_banks) return 1;
    return c->owner == requestor && !c->switching && c->mode == (requestor == MC_PIM) &&
           c->mode_ready <= t;
}

static void wake_at(tick *wake, tick when) { if (when < *wake) *wake = when; }

static void complete(mc_sim *sim, channel *c, int32_t slot, tick done, tick t)
{
    req *r = &c->slots[slot];
    if (r->requestor == c->owner) c->epoch_served++;
    mc_record_latency(sim, c, r, done, t);
    if (r->op == MC_READ && done > sim->last_read_done) sim->last_read_done = done;
    mc_release_slot(sim, c, slot, done, t);
}

/* ---- refresh ---------------------------------------------------------------------- */

static int rank_refreshing(const mc_sim *sim, const channel *c, int b)
{
    return c->ranks[sim->bank_rank[b]].refresh_pending;
}

/* Returns 1 if a refresh-related command issued at t. */
static int step_refresh(mc_sim *sim, channel *c, tick t, tick *wake)
{
    const mc_config *k = &sim->cfg;
    int any = 0;
    for (int r = 0; r < k->ranks; r++) {
        rank_state *rk = &c->ranks[r];
        if (!rk->refresh_pending && t >= rk->refresh_due) {
            rk->refresh_pending = 1;
            c->scan_valid = 0;
        }
        if (!rk->refresh_pending) {
            wake_at(wake, rk->refresh_due);
            continue;
        }
        any = 1;
    }
    if (!any) return 0;
    /* close the PIM scope first (it spans every rank) */
    if (c->pim_row >= 0) {
        tick ready = mc_scope_ready(sim, c, MC_CMD_PIM_PRE);
        if (ready <= t) {
            mc_issue_pim(sim, c, MC_CMD_PIM_PRE, -1, t);
            mc_log_cmd(sim, c, -1, MC_CMD_PIM_PRE, MC_BY_CTRL, -1, -1, t);
            return 1;
        }
        wake_at(wake, ready);
        return 0;
    }
    for (int r = 0; r < k->ranks; r++) {
        rank_state *rk = &c->ranks[r];
        if (!rk->refresh_pending) continue;
        tick closed = c->next_row;
        int open = 0;
        for (int b = 0; b < sim->nbanks; b++) {
            if (sim->bank_rank[b] != r) continue;
            bank *bk = &c->banks[b];
            if (bk->open_row >= 0) {
                open = 1;
                tick ready = MAXT(bk->next_pre, c->next_row);
                if (ready <= t) {
                    mc_issue_pre(sim, c, b, t);
                    mc_log_cmd(sim, c, b, MC_CMD_PRE, MC_BY_CTRL, -1, -1, t);
                    return 1;
                }
                wake_at(wake, ready);
            } else {
                closed = MAXT(closed, bk->closed_at);
            }
        }
        if (open) continue;
        closed = MAXT(closed, c->mode_ready);
        if (closed <= t) {
            mc_issue_ref(sim, c, r, t);
            mc_log_cmd(sim, c, -(r + 2), MC_CMD_REF, MC_BY_CTRL, -1, -1, t);
            sim->refreshes++;
            return 1;
        }
        wake_at(wake, closed);
    }
    return 0;
}

/* ---- hand-over of access authority (serial, authority) ---------------------------- */

static int step_switch(mc_sim *sim, channel *c, tick t, tick *wake)
{
    if (c->mode == 0) { /* host -> PIM: precharge all, then enter PIM mode */
        uint64_t m = c->open_mask;
        while (m) {
            int b = __builtin_ctzll(m);
            m &= m - 1;
            tick ready = MAXT(c->banks[b].next_pre, c->next_row);
            if (ready <= t) {
                mc_issue_pre(sim, c, b, t);
                mc_log_cmd(sim, c, b, MC_CMD_PRE, MC_BY_CTRL, -1, -1, t);
                return 1;
            }
            wake_at(wake, ready);
        }
        if (c->open_mask) return 0;
        tick ready = mc_scope_ready(sim, c, MC_CMD_PIM_ENTER);
        if (ready > t) {
            wake_at(wake, ready);
            return 0;
        }
        mc_log_cmd(sim, c, -1, MC_CMD_PIM_ENTER, MC_BY_CTRL, -1, -1, t);
        mc_account(sim, c, t);
        c->mode = 1;
        c->owner = MC_PIM;
    } else { /* PIM -> host: close the PIM row, leave PIM mode */
        if (c->pim_row >= 0) {
            tick ready = mc_scope_ready(sim, c, MC_CMD_PIM_PRE);
            if (ready <= t) {
                mc_issue_pim(sim, c, MC_CMD_PIM_PRE, -1, t);
                mc_log_cmd(sim, c, -1, MC_CMD_PIM_PRE, MC_BY_CTRL, -1, -1, t);
                return 1;
            }
            wake_at(wake, ready);
            return 0;
        }
        tick ready = mc_scope_ready(sim, c, MC_CMD_PIM_EXIT);
        if (ready > t) {
            wake_at(wake, ready);
            return 0;
        }
        mc_log_cmd(sim, c, -1, MC_CMD_PIM_EXIT, MC_BY_CTRL, -1, -1, t);
        mc_account(sim, c, t);
        c->mode = 0;
        c->owner = MC_HOST;
    }
    c->switching = 0;
    c->mode_ready = t + sim->cfg.mode_switch_cycles;
    c->epoch_start = c->mode_ready;
    c->epoch_served = 0;
    c->mode_switches++;
    c->epochs++;
    mc_account(sim, c, t);
    return 1;
}

/* ---- candidates -------------------------------------------------------------------- */

/* Write draining (as DRAMsim3): reads move from the read queue to the banks' command queues;
 * once the write buffer reaches the high watermark, or holds more than the low watermark
 * while the command queues are empty, the whole buffer moves, and reads wait until it has.
 * Writes below the low watermark also drain once nothing else may come: at the end of the
 * trace, at a barrier, while an event waits for them, or while the PIM waits for the channel. */
static int command_queues_empty(const channel *c) { return !(c->pending_mask[0] | c->pending_mask[1]); }

static void update_drain(const mc_sim *sim, channel *c)
{
    if (c->drain_left > 0) return;
    int w = c->txq_count[DIR_WR];
    if (w == 0) return;
    int waiting = (sim->fe_done || sim->fe_barrier || sim->npending ||
                   c->qcount[MC_PIM][0] + c->qcount[MC_PIM][1] > 0) &&
                  c->qcount[MC_HOST][DIR_RD] == 0;
    if (w >= sim->cfg.write_high || (command_queues_empty(c) && (w > sim->cfg.write_low || waiting)))
        c->drain_left = w;
}

static void rank_levels(const mc_sim *sim, const channel *c, levels *lv);
static void choose_dirty(const mc_sim *sim, channel *c);
static int older_read(const channel *c, int32_t h, const req *w);
static void bank_candidates(const mc_sim *sim, channel *c, const levels *lv, int b, tick t,
                            cand *best, tick *wake);

static int move_dir(const mc_sim *sim, channel *c, int dir)
{
    int limit = sim->cfg.bank_queue_depth;
    if (!(c->txq_banks[dir] & ~c->full_mask)) return 0; /* every waiting bank is full */
    int32_t prev = -1;
    for (int32_t h = c->txq_head[dir]; h >= 0; prev = h, h = c->slots[h].next) {
        req *q = &c->slots[h];
        bank *bk = &c->banks[q->bank];
        if (limit > 0 && bk->count[0] + bk->count[1] >= limit) continue;
        if (dir == DIR_WR && older_read(c, c->txq_head[DIR_RD], q)) continue;
        int32_t next = q->next;
        if (prev < 0) c->txq_head[dir] = next; else c->slots[prev].next = next;
        if (c->txq_tail[dir] == h) c->txq_tail[dir] = prev;
        c->txq_count[dir]--;
        q->next = -1;
        if (bk->tail[dir] >= 0) c->slots[bk->tail[dir]].next = h; else bk->head[dir] = h;
        bk->tail[dir] = h;
        bk->count[dir]++;
        if (--c->txq_nb[dir][q->bank] == 0) c->txq_banks[dir] &= ~(1ull << q->bank);
        if (limit > 0 && bk->count[0] + bk->count[1] >= limit) c->full_mask |= 1ull << q->bank;
        c->dirty_mask |= 1ull << q->bank;
        c->pending_mask[dir] |= 1ull << q->bank;
        if (dir == DIR_WR) c->drain_left--;
        if (c->scan_valid) { /* only this bank changed since the last scan */
            cand none = {-1, -1, -1, -1, 0, 0};
            tick w = NEVER;
            levels lv;
            choose_dirty(sim, c);
            rank_levels(sim, c, &lv);
            bank_candidates(sim, c, &lv, q->bank, -1, &none, &w);
            c->scan_ready = MINT(c->scan_ready, w);
        }
        return 1;
    }
    return 0;
}

/* Move one transaction (the oldest whose bank's command queue has room) per cycle. A write
 * waiting for an earlier read of its address lets reads move meanwhile. */
static int move_transaction(const mc_sim *sim, channel *c)
{
    update_drain(sim, c);
    if (c->drain_left > 0) return move_dir(sim, c, DIR_WR) || move_dir(sim, c, DIR_RD);
    return move_dir(sim, c, DIR_RD);
}

/* is a read of w's address older than w in the list starting at h? (writes never overtake
 * earlier reads of their address: write-after-read order) */
static int older_read(const channel *c, int32_t h, const req *w)
{
    for (; h >= 0; h = c->slots[h].next)
        if (c->slots[h].addr == w->addr && c->slots[h].seq < w->seq) return 1;
    return 0;
}

static void choose(const mc_sim *sim, channel *c, int bi)
{
    const int cap = sim->cfg.row_hit_cap;
    bank *bk = &c->banks[bi];
    uint64_t bit = 1ull << bi;
    int32_t a = bk->head[0], b = bk->head[1];
    int32_t head = a < 0 ? b : (b < 0 ? a : (c->slots[a].seq < c->slots[b].seq ? a : b));
    int any_hit = 0;
    for (int d = 0; d < 2; d++) {
        bk->col_slot[d] = bk->col_prev[d] = -1;
        c->col_mask[d] &= ~bit;
        if (bk->open_row < 0) continue;
        int32_t p = -1, h = bk->head[d];
        while (h >= 0 && c->slots[h].row != bk->open_row) {
            p = h;
            h = c->slots[h].next;
        }
        if (h >= 0 && d == DIR_WR && older_read(c, bk->head[DIR_RD], &c->slots[h])) h = -1;
        if (h >= 0 && !(cap > 0 && bk->hits >= cap && h != head)) {
            bk->col_slot[d] = h;
            bk->col_prev[d] = p;
            c->col_mask[d] |= bit;
            any_hit = 1;
        }
    }
    bk->other_cmd = -1;
    bk->other_slot = head;
    c->act_mask &= ~bit;
    c->pre_mask &= ~bit;
    if (head >= 0 && !any_hit) {
        bk->other_cmd = bk->open_row >= 0 ? MC_CMD_PRE : MC_CMD_ACT;
        if (bk->open_row >= 0) c->pre_mask |= bit; else c->act_mask |= bit;
    }
}

static void choose_dirty(const mc_sim *sim, channel *c)
{
    uint64_t m = c->dirty_mask & sim->host_banks;
    c->dirty_mask = 0;
    while (m) {
        int b = __builtin_ctzll(m);
        m &= m - 1;
        choose(sim, c, b);
    }
}

/* Readiness of a bank's candidates: bank and bank-group terms per bank, the rank and bus
 * terms computed once per scan (lvl). */

static void rank_levels(const mc_sim *sim, const channel *c, levels *lv)
{
    for (int r = 0; r < sim->cfg.ranks && r < 8; r++) {
        const rank_state *rk = &c->ranks[r];
        tick faw = rk->faw[rk->faw_pos] + sim->cfg.tFAW;
        lv->act[r] = MAXT(MAXT(rk->next_act, faw), c->next_row);
        lv->rd[r] = MAXT(rk->next_rd, c->next_col);
        lv->wr[r] = MAXT(rk->next_wr, c->next_col);
        lv->refreshing[r] = rk->refresh_pending;
    }
}

static void bank_candidates(const mc_sim *sim, channel *c, const levels *lv, int b, tick t,
                            cand *best, tick *wake)
{
    int r = sim->bank_rank[b];
    if (lv->refreshing[r]) return;
    bank *bk = &c->banks[b];
    const group *g = &c->groups[sim->bank_group[b]];
    int32_t h = bk->col_slot[DIR_RD];
    if (h >= 0) {
        tick ready = MAXT(MAXT(bk->next_rd, g->next_rd), lv->rd[r]);
        if (ready <= t) better(best, MC_CMD_RD, b, h, bk->col_prev[DIR_RD], c->slots[h].seq, 1);
        else if (ready < *wake) *wake = ready;
    }
    h = bk->col_slot[DIR_WR];
    if (h >= 0) {
        tick ready = MAXT(MAXT(bk->next_wr, g->next_wr), lv->wr[r]);
        if (ready <= t) better(best, MC_CMD_WR, b, h, bk->col_prev[DIR_WR], c->slots[h].seq, 1);
        else if (ready < *wake) *wake = ready;
    }
    if (bk->other_cmd >= 0) {
        tick ready = bk->other_cmd == MC_CMD_ACT ? MAXT(MAXT(bk->next_act, g->next_act), lv->act[r])
                                                  : MAXT(bk->next_pre, c->next_row);
        if (ready <= t)
            better(best, bk->other_cmd, b, bk->other_slot, -1, c->slots[bk->other_slot].seq, 0);
        else if (ready < *wake) *wake = ready;
    }
}

enum { WANT_COL = 1, WANT_ROW = 2 };

static void host_candidates(const mc_sim *sim, channel *c, tick t, cand *best, tick *wake,
                            int want)
{
    levels lv;
    choose_dirty(sim, c);
    rank_levels(sim, c, &lv);
    /* column commands and precharges: few banks at a time */
    uint64_t m = ((want & WANT_COL) ? c->col_mask[0] | c->col_mask[1] : 0) |
                 ((want & WANT_ROW) ? c->pre_mask : 0);
    while (m) {
        int b = __builtin_ctzll(m);
        m &= m - 1;
        bank_candidates(sim, c, &lv, b, t, best, wake);
    }
    /* activates: a rank whose own constraints (tRRD_S, tFAW, refresh) hold them back is
     * skipped whole; its level is a lower bound of every one of its banks' ready cycle */
    const int per_rank = sim->cfg.bankgroups * sim->cfg.banks_per_group;
    for (int r = 0; r < sim->cfg.ranks && (want & WANT_ROW); r++) {
        uint64_t rank_bits = per_rank == 64 ? ~0ull : ((1ull << per_rank) - 1) << (r * per_rank);
        uint64_t acts = c->act_mask & rank_bits;
        if (!acts || lv.refreshing[r]) continue;
        if (lv.act[r] > t) {
            if (lv.act[r] < *wake) *wake = lv.act[r];
            continue;
        }
        while (acts) {
            int b = __builtin_ctzll(acts);
            acts &= acts - 1;
            bank_candidates(sim, c, &lv, b, t, best, wake);
        }
    }
    if (sim->cfg.closed_page && (want & WANT_ROW)) { /* close rows nothing queued wants */
        uint64_t idle = c->open_mask & sim->host_banks;
        while (idle) {
            int b = __builtin_ctzll(idle);
            idle &= idle - 1;
            bank *bk = &c->banks[b];
            if (bk->col_slot[0] >= 0 || bk->col_slot[1] >= 0 || bk->other_cmd >= 0 ||
                rank_refreshing(sim, c, b))
                continue;
            tick ready = MAXT(bk->next_pre, c->next_row);
            if (ready <= t) better(best, MC_CMD_PRE, b, -1, -1, UINT64_MAX, 0);
            else wake_at(wake, ready);
        }
    }
}

static void pim_candidate(const mc_sim *sim, channel *c, tick t, cand *best, tick *wake)
{
    if (c->pim_count == 0) return;
    for (int r = 0; r < sim->cfg.ranks; r++)
        if (c->ranks[r].refresh_pending) return;
    int32_t h = c->pim_head;
    const req *q = &c->slots[h];
    int cmd, col = 0;
    if (c->pim_row == q->row) {
        cmd = q->op == MC_READ ? MC_CMD_PIM_RD : MC_CMD_PIM_WR;
        col = 1;
    } else {
        cmd = c->pim_row >= 0 ? MC_CMD_PIM_PRE : MC_CMD_PIM_ACT;
    }
    tick ready = mc_scope_ready(sim, c, cmd);
    if (ready <= t) better(best, cmd, -1, h, -1, q->seq, col);
    else wake_at(wake, ready);
}

static void unlink_host(channel *c, int b, int dir, int32_t slot, int32_t prev)
{
    bank *bk = &c->banks[b];
    int32_t next = c->slots[slot].next;
    if (prev < 0) bk->head[dir] = next; else c->slots[prev].next = next;
    if (bk->tail[dir] == slot) bk->tail[dir] = prev;
    c->dirty_mask |= 1ull << b;
    c->full_mask &= ~(1ull << b);
    if (--bk->count[dir] == 0) c->pending_mask[dir] &= ~(1ull << b);
    c->qcount[MC_HOST][dir]--;
}

static void issue(mc_sim *sim, channel *c, const cand *k, tick t)
{
    const mc_config *cfg = &sim->cfg;
    req *q = k->slot >= 0 ? &c->slots[k->slot] : NULL;
    switch (k->cmd) {
    case MC_CMD_ACT:
        mc_issue_act(sim, c, k->bank, q->row, t);
        if (q->cls == CLS_HIT) q->cls = CLS_MISS;
        mc_log_cmd(sim, c, k->bank, MC_CMD_ACT, MC_BY_HOST, q->row, -1, t);
        break;
    case MC_CMD_PRE:
        mc_log_cmd(sim, c, k->bank, MC_CMD_PRE, MC_BY_HOST, c->banks[k->bank].open_row, -1, t);
        mc_issue_pre(sim, c, k->bank, t);
        if (q) q->cls = CLS_CONFLICT;
        break;
    case MC_CMD_RD:
    case MC_CMD_WR: {
        int dir = k->cmd == MC_CMD_WR;
        mc_issue_col(sim, c, k->bank, dir, t);
        mc_log_cmd(sim, c, k->bank, k->cmd, MC_BY_HOST, q->row, q->col, t);
        mc_account(sim, c, t);
        unlink_host(c, k->bank, dir, k->slot, k->prev);
        tick done = t + (dir ? cfg->CWL : cfg->CL) + cfg->burst;
        complete(sim, c, k->slot, done, t);
        break;
    }
    case MC_CMD_PIM_ACT:
        mc_issue_pim(sim, c, MC_CMD_PIM_ACT, q->row, t);
        if (q->cls == CLS_HIT) q->cls = CLS_MISS;
        mc_log_cmd(sim, c, -1, MC_CMD_PIM_ACT, MC_BY_PIM, q->row, -1, t);
        break;
    case MC_CMD_PIM_PRE:
        mc_log_cmd(sim, c, -1, MC_CMD_PIM_PRE, MC_BY_PIM, c->pim_row, -1, t);
        mc_issue_pim(sim, c, MC_CMD_PIM_PRE, -1, t);
        q->cls = CLS_CONFLICT;
        break;
    case MC_CMD_PIM_RD:
    case MC_CMD_PIM_WR: {
        int dir = k->cmd == MC_CMD_PIM_WR;
        mc_issue_pim(sim, c, k->cmd, q->row, t);
        mc_log_cmd(sim, c, -1, k->cmd, MC_BY_PIM, q->row, q->col, t);
        mc_account(sim, c, t);
        c->pim_head = q->next;
        if (c->pim_head < 0) c->pim_tail = -1;
        c->pim_count--;
        c->qcount[MC_PIM][dir]--;
        tick done = t + (dir ? cfg->CWL : cfg->CL) + cfg->burst;
        complete(sim, c, k->slot, done, t);
        break;
    }
    default: break;
    }
    c->scan_valid = 0;
    int column = k->cmd == MC_CMD_RD || k->cmd == MC_CMD_WR || k->cmd == MC_CMD_PIM_RD ||
                 k->cmd == MC_CMD_PIM_WR;
    if (!sim->cfg.dual_command_bus || column) c->next_col = t + 1;
    if (!sim->cfg.dual_command_bus || !column) c->next_row = t + 1;
}

/* Refresh first, then a pending hand-over of authority, then FR-FCFS over the requestors
 * allowed to use the channel now. Returns 1 if a command issued at t. */
static int schedule(mc_sim *sim, channel *c, tick t, tick *wake)
{
    if (sim->cfg.refresh && step_refresh(sim, c, t, wake)) {
        c->scan_valid = 0;
        return 1;
    }
    if (!sim->policy->partition_banks) {
        if (!c->switching) {
            tick w = NEVER;
            if (sim->policy->hand_over(sim, c, t, &w)) {
                c->switching = 1;
                mc_account(sim, c, t);
            }
            wake_at(wake, w);
        }
        if (c->switching) {
            for (int r = 0; r < sim->cfg.ranks; r++)
                if (c->ranks[r].refresh_pending) return 0;
            c->scan_valid = 0;
            return step_switch(sim, c, t, wake);
        }
    }
    if (c->mode_ready > t) {
        wake_at(wake, c->mode_ready);
        return 0;
    }
    if (c->scan_valid && c->scan_ready > t) { /* nothing changed that could issue now */
        wake_at(wake, c->scan_ready);
        return 0;
    }
    int issued = 0, want = WANT_COL | WANT_ROW;
    for (int pass = 0; pass < (sim->cfg.dual_command_bus ? 2 : 1); pass++) {
        cand best = {-1, -1, -1, -1, 0, 0};
        tick w = NEVER;
        if (mc_can_serve(sim, c, MC_HOST, t) && ((c->pending_mask[0] | c->pending_mask[1]) ||
                                                 sim->cfg.closed_page))
            host_candidates(sim, c, t, &best, &w, want);
        if (mc_can_serve(sim, c, MC_PIM, t)) pim_candidate(sim, c, t, &best, &w);
        wake_at(wake, w);
        if (best.cmd < 0) {
            if (!issued) {
                c->scan_valid = 1;
                c->scan_ready = w;
            }
            break;
        }
        issue(sim, c, &best, t);
        issued = 1;
        /* the second pass (dual command bus) looks only for the other kind of command */
        want = best.col ? WANT_ROW : WANT_COL;
    }
    return issued;
}

/* Nothing can issue at t and nothing the last scan saw has changed: no refresh due, no
 * hand-over possible (the other side has nothing queued), no mode switch under way. */
static int quiet(const mc_sim *sim, const channel *c, tick t, tick *wake)
{
    if (!c->scan_valid || c->scan_ready <= t || c->switching || c->mode_ready > t) return 0;
    if (!sim->policy->partition_banks &&
        c->qcount[1 - c->owner][0] + c->qcount[1 - c->owner][1] > 0)
        return 0;
    tick w = c->scan_ready;
    if (sim->cfg.refresh)
        for (int r = 0; r < sim->cfg.ranks; r++) {
            if (c->ranks[r].refresh_pending || c->ranks[r].refresh_due <= t) return 0;
            w = MINT(w, c->ranks[r].refresh_due);
        }
    *wake = w;
    return 1;
}

void mc_channel_step(mc_sim *sim, channel *c, tick t)
{
    tick wake = NEVER;
    if (t == c->mode_ready) mc_account(sim, c, t); /* blocked -> active when a switch is done */
    int busy = 0;
    if (quiet(sim, c, t, &wake)) {
        /* only the transaction queue may move */
    } else if (MINT(c->next_row, c->next_col) <= t) {
        busy = schedule(sim, c, t, &wake);
    } else {
        wake = MINT(c->next_row, c->next_col);
    }
    /* then one transaction moves to its bank's command queue (usable from the next cycle) */
    if (c->txq_count[0] + c->txq_count[1] > 0 && move_transaction(sim, c)) busy = 1;
    c->next_event = busy ? t + 1 : MAXT(wake, t + 1);
}
