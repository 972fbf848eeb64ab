/* The per-channel scheduler: refresh, hand-over of access authority, and FR-FCFS (ready row
 * hits first, then the oldest request) with a cap on consecutive row hits. One command per
 * channel per cycle. When nothing can issue, the channel sleeps until the earliest cycle at
 * which something could (no per-cycle work while idle). */
#include "candidates.h"

typedef struct cand {
    int cmd;          /* MC_CMD_* or -1 */
    int bank;
    int32_t slot, prev;
    uint64_t seq;
    int col;          /* a column command: preferred (first ready) */
} cand;

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

static void wake_at(tick *wake, tick when) { if (when < *wake) *wake = when; }

int mc_precharge_for_refresh(mc_sim *sim, channel *c, int b, tick t, tick *wake)
{
    const bank *bk = &c->banks[b];
    if (bk->open_row < 0) return -1;
    const tick ready = MAXT(bk->next_pre, c->next_row);
    if (ready > t) {
        wake_at(wake, ready);
        return 0;
    }
    mc_issue_pre(sim, c, b, t);
    mc_log_cmd(sim, c, b, MC_CMD_PRE, MC_BY_CTRL, -1, -1, t);
    return 1;
}

/* the host's best candidate as a command: a row hit if one can issue, else the oldest ACT /
 * PRE (or, closed page, the PRE of an idle row) */
static void host_best(const channel *c, const mc_pick *col, const mc_pick *row, cand *best)
{
    const mc_pick *p = col->bank >= 0 ? col : row;
    if (p->bank < 0) return;
    const bank *bk = &c->banks[p->bank];
    best->bank = p->bank;
    best->seq = p->seq;
    best->prev = -1;
    best->col = p->cls == CAND_RD || p->cls == CAND_WR;
    switch (p->cls) {
    case CAND_RD:
    case CAND_WR:
        best->cmd = p->cls == CAND_RD ? MC_CMD_RD : MC_CMD_WR;
        best->slot = bk->col_slot[p->cls];
        best->prev = bk->col_prev[p->cls];
        break;
    case CAND_ACT:
    case CAND_PRE:
        best->cmd = bk->other_cmd;
        best->slot = bk->other_slot;
        break;
    default: /* CAND_IDLE */
        best->cmd = MC_CMD_PRE;
        best->slot = -1;
        best->seq = UINT64_MAX;
        break;
    }
}

/* the same for the scan's keys (mc_host_scan_keys): the candidate of key (class cls), or the
 * PRE of the idle bank `idle` (cls CAND_IDLE) */
static inline void host_cand(const channel *c, uint64_t key, int cls, int idle, cand *best)
{
    if (cls == CAND_IDLE) {
        best->cmd = MC_CMD_PRE;
        best->bank = idle;
        best->slot = best->prev = -1;
        best->seq = UINT64_MAX;
        best->col = 0;
        return;
    }
    const int b = (int)(key & 63);
    const bank *bk = &c->banks[b];
    best->bank = b;
    best->seq = key >> 6;
    if (cls == CAND_RD || cls == CAND_WR) {
        best->cmd = cls == CAND_RD ? MC_CMD_RD : MC_CMD_WR;
        best->slot = bk->col_slot[cls];
        best->prev = bk->col_prev[cls];
        best->col = 1;
    } else {
        best->cmd = bk->other_cmd;
        best->slot = bk->other_slot;
        best->prev = -1;
        best->col = 0;
    }
}

static void complete(mc_sim *sim, channel *c, int32_t slot, tick done, tick t)
{
    req *r = &c->slots[slot];
    if (r->requestor == c->owner) c->epoch_served++;
    c->stuck_rounds = 0;
    c->served_at = t;
    mc_record_latency(sim, c, r, done, t);
    if (r->op == MC_READ && done > sim->last_read_done) sim->last_read_done = done;
    mc_release_slot(sim, c, slot, done, t);
}

/* The controller closes the PIM scope's open row (before a refresh, or to leave PIM mode):
 * 1 if the PIM_PRE issued at t, 0 if it must wait (wake set). Only with a row open. */
static int close_pim_row(mc_sim *sim, channel *c, tick t, tick *wake)
{
    tick ready = mc_scope_ready(sim, c, MC_CMD_PIM_PRE);
    if (ready > t) {
        wake_at(wake, ready);
        return 0;
    }
    mc_issue_pim(sim, c, MC_CMD_PIM_PRE, -1, t);
    mc_log_cmd(sim, c, -1, MC_CMD_PIM_PRE, MC_BY_CTRL, -1, -1, t);
    return 1;
}

/* ---- the watchdog ------------------------------------------------------------------- */

/* work the scheduler must serve now: requests in the banks' command queues or the PIM's
 * queue, reads in the read queue, or a write drain under way (writes below the low watermark
 * may legitimately wait in the write buffer while the front end is in a DELAY) */
static int has_due_work(const mc_sim *sim, const channel *c)
{
    if ((c->pending_mask[0] | c->pending_mask[1]) || c->pim_count > 0 ||
        c->txq_count[DIR_RD] > 0 || c->drain_left > 0)
        return 1;
    /* writes the front end waits for: it found this channel's queue full (the last refusal) */
    if (c->txq_count[DIR_WR] > 0 && sim->refused_index && sim->refused_ch == c->index)
        for (int k = 0; k < sim->cursors; k++)
            if (sim->cur[k].blocked) return 1;
    return 0;
}

#define WATCHDOG_INTERVALS 16 /* refresh intervals (every rank refreshed once each) */
#define WATCHDOG_SWITCHES 64  /* hand-overs of authority */

/* A refresh or a hand-over happened at t. Every part that check_config accepts serves a
 * request within a couple of refresh intervals, and every epoch serves one: so many of them
 * with work waiting and nothing served is a livelock, reported instead of looping forever. */
static void watchdog(mc_sim *sim, channel *c, tick t)
{
    if (!has_due_work(sim, c)) {
        c->stuck_rounds = 0;
        return;
    }
    const mc_config *k = &sim->cfg;
    uint64_t limit = (uint64_t)WATCHDOG_INTERVALS * (uint64_t)k->ranks + WATCHDOG_SWITCHES;
    if (++c->stuck_rounds <= limit) return;
    mc_set_error(sim, MC_ERR_STUCK,
                 "livelock: channel %d served no request from cycle %lld to %lld (%llu refreshes "
                 "and hand-overs) while %d host and %d PIM requests wait; its state: %s mode, "
                 "authority with the %s%s, %d rank(s) refreshing, open-row mask 0x%llx, PIM row "
                 "%d (tREFI %d, tRFC %d, ranks %d, epoch cap %lld)",
                 c->index, (long long)c->served_at, (long long)t,
                 (unsigned long long)c->stuck_rounds,
                 c->qcount[MC_HOST][0] + c->qcount[MC_HOST][1],
                 c->qcount[MC_PIM][0] + c->qcount[MC_PIM][1], c->mode ? "PIM" : "normal",
                 c->owner == MC_PIM ? "PIM" : "host", c->switching ? " (handing over)" : "",
                 c->refreshing, (unsigned long long)c->open_mask, (int)c->pim_row, k->tREFI,
                 k->tRFC, k->ranks, (long long)sim->epoch_cap);
}

/* ---- refresh ---------------------------------------------------------------------- */

/* Returns 1 if a refresh-related command issued at t. */
static int step_refresh(mc_sim *sim, channel *c, tick t, tick *wake)
{
    const mc_config *k = &sim->cfg;
    if (!c->refreshing && t < c->refresh_next) { /* the common case: no rank is due */
        wake_at(wake, c->refresh_next);
        return 0;
    }
    int any = 0;
    for (int r = 0; r < k->ranks; r++) {
        rank_state *rk = &c->ranks[r];
        if (!rk->refresh_pending && t >= rk->refresh_due) {
            rk->refresh_pending = 1;
            c->refreshing++;
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
    if (c->pim_row >= 0) return close_pim_row(sim, c, t, wake);
    for (int r = 0; r < k->ranks; r++) {
        rank_state *rk = &c->ranks[r];
        if (!rk->refresh_pending) continue;
        tick closed = c->next_row;
        int open = 0;
        for (int b = 0; b < sim->nbanks; b++) {
            if (sim->bank_rank[b] != r) continue;
            const int p = mc_precharge_for_refresh(sim, c, b, t, wake);
            if (p > 0) return 1;
            if (p == 0) open = 1;
            else closed = MAXT(closed, c->banks[b].closed_at);
        }
        if (open) continue;
        closed = MAXT(closed, c->mode_ready);
        if (closed <= t) {
            mc_issue_ref(sim, c, r, t);
            mc_log_cmd(sim, c, -(r + 2), MC_CMD_REF, MC_BY_CTRL, -1, -1, t);
            sim->refreshes++;
            watchdog(sim, c, t);
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
        if (c->pim_row >= 0) return close_pim_row(sim, c, t, wake);
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
    watchdog(sim, c, t);
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

/* Move the oldest transaction of the queue whose bank's command queue has room (full_mask: the
 * banks whose command queue holds bank_queue_depth). It is the oldest of the first movable
 * entries of those banks' FIFOs: for reads the FIFO's head; a write waiting for an earlier
 * read of its address (in the same bank's FIFO) lets later writes of the bank go first. */
static inline __attribute__((always_inline)) int
move_dir(const mc_sim *sim, channel *c, int dir)
{
    uint64_t m = c->txq_banks[dir] & ~c->full_mask;
    int32_t h = -1, prev = -1;
    while (m) {
        int b = __builtin_ctzll(m);
        m &= m - 1;
        int32_t p = -1, e = c->txq_head[dir][b];
        if (dir == DIR_WR)
            while (e >= 0 && mc_older_read(c, c->txq_head[DIR_RD][b], &c->slots[e])) {
                p = e;
                e = c->slots[e].next;
            }
        if (e >= 0 && (h < 0 || c->slots[e].seq < c->slots[h].seq)) {
            h = e;
            prev = p;
        }
    }
    if (h < 0) return 0;
    req *q = &c->slots[h];
    const int b = q->bank;
    bank *bk = &c->banks[b];
    if (prev < 0) c->txq_head[dir][b] = q->next; else c->slots[prev].next = q->next;
    if (c->txq_tail[dir][b] == h) c->txq_tail[dir][b] = prev;
    c->txq_count[dir]--;
    q->next = -1;
    q->qseq = c->qseq_next++;
    /* The bank's choice (candidates.c, choose) stays as it was when q joins the end of a list
     * that is not empty (the oldest request stays) and is either no row hit and no read that a
     * queued write could wait for (write-after-read), or a row hit behind the direction's chosen
     * one (the first hit stays; a younger read holds no write back, a younger write no read). */
    const int same = bk->count[dir] > 0 &&
                     (bk->open_row < 0 ||
                      (q->row != bk->open_row ? dir == DIR_WR || bk->count[DIR_WR] == 0
                                              : bk->col_slot[dir] >= 0));
    if (bk->tail[dir] >= 0) c->slots[bk->tail[dir]].next = h; else bk->head[dir] = h;
    bk->tail[dir] = h;
    bk->count[dir]++;
    if (--c->txq_nb[dir][b] == 0) c->txq_banks[dir] &= ~(1ull << b);
    if (bk->count[0] + bk->count[1] >= sim->cfg.bank_queue_depth) {
        c->full_mask |= 1ull << b;
        if (bk->count[DIR_WR]) c->dirty_mask |= 1ull << b; /* its writes go first now */
    }
    if (!same) c->dirty_mask |= 1ull << b;
    c->pending_mask[dir] |= 1ull << b;
    if (dir == DIR_WR) c->drain_left--;
    if (c->scan_valid) { /* only this bank changed since the last scan */
        mc_update_choices(sim, c);
        c->scan_ready = MINT(c->scan_ready, mc_bank_wake(sim, c, b));
    }
    return 1;
}

/* Move one transaction (the oldest whose bank's command queue has room) per cycle. A write
 * waiting for an earlier read of its address lets reads move meanwhile. */
static int move_transaction(const mc_sim *sim, channel *c)
{
    update_drain(sim, c);
    if (c->drain_left > 0) return move_dir(sim, c, DIR_WR) || move_dir(sim, c, DIR_RD);
    return move_dir(sim, c, DIR_RD);
}

static void pim_candidate(const mc_sim *sim, channel *c, tick t, cand *best, tick *wake)
{
    if (c->pim_count == 0 || c->refreshing) return;
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

static inline __attribute__((always_inline)) void
unlink_host(channel *c, int b, int dir, int32_t slot, int32_t prev)
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

static inline __attribute__((always_inline)) void
issue(mc_sim *sim, channel *c, const cand *k, tick t)
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

/* bank b just issued a column command (second pass): add its row command, if it now has one
 * that can issue at t, to the host's best row command of the first pass */
static void row_after_column(const mc_sim *sim, const channel *c, int b, tick t, mc_pick *row)
{
    const bank *bk = &c->banks[b];
    if (bk->other_cmd == MC_CMD_PRE) { /* (never an ACT: the bank is open) */
        uint64_t seq = c->ready_key[CAND_PRE][b] >> 6;
        if (MAXT(c->ready_at[CAND_PRE][b], c->next_row) <= t && seq < row->seq) {
            row->seq = seq;
            row->bank = b;
            row->cls = CAND_PRE;
        }
    } else if (sim->cfg.closed_page && bk->other_cmd < 0 && bk->col_slot[0] < 0 &&
               bk->col_slot[1] < 0 && MAXT(bk->next_pre, c->next_row) <= t &&
               (row->bank < 0 || (row->cls == CAND_IDLE && b < row->bank))) {
        row->bank = b; /* its row is idle now: the lowest such bank, if nothing else */
        row->cls = CAND_IDLE;
    }
}

/* The arbitration's choice issued at t (1); or, none found, the scan kept as valid until w,
 * the first cycle one of its commands could issue (0). */
static inline int issue_best(mc_sim *sim, channel *c, const cand *best, tick t, tick w)
{
    if (best->cmd < 0) {
        c->scan_valid = 1;
        c->scan_ready = w;
        return 0;
    }
    issue(sim, c, best, t);
    return 1;
}

/* FR-FCFS over the requestors allowed to use the channel now: a row hit that can issue, else
 * the oldest command that can; with a dual command bus, then one of the other kind. */
static int frfcfs(mc_sim *sim, channel *c, tick t, tick *wake)
{
    /* mc_can_serve, knowing what schedule() checked: no switch under way, mode_ready <= t */
    const int part = sim->partition_banks;
    const int host = part || (c->owner == MC_HOST && c->mode == 0);
    const int pim = c->pim_count > 0 && (part || (c->owner == MC_PIM && c->mode == 1));
    const int host_work = (c->pending_mask[0] | c->pending_mask[1]) || sim->cfg.closed_page;
    uint64_t kc = UINT64_MAX, kr = UINT64_MAX;
    int cc = -1, cr = -1, idle = -1;
    cand best = {-1, -1, -1, -1, 0, 0};
    tick w = NEVER;
    if (host && host_work) { /* a row hit if one can issue, else the oldest ACT / PRE */
        mc_update_choices(sim, c);
        mc_host_scan_keys(sim, c, t, WANT_COL | WANT_ROW, &kc, &cc, &kr, &cr, &idle, &w);
        if (kc != UINT64_MAX) host_cand(c, kc, cc, -1, &best);
        else if (kr != UINT64_MAX || idle >= 0) host_cand(c, kr, cr, idle, &best);
    }
    if (pim) pim_candidate(sim, c, t, &best, &w);
    wake_at(wake, w);
    if (!issue_best(sim, c, &best, t, w)) return 0;
    if (!sim->cfg.dual_command_bus) return 1;
    /* second pass: the other kind of command. Its wake-up cycle does not matter (the channel
     * steps again next cycle). */
    cand second = {-1, -1, -1, -1, 0, 0};
    const int host_more = host && ((c->pending_mask[0] | c->pending_mask[1]) || sim->cfg.closed_page);
    if (best.bank >= 0 && best.col) {
        /* a host column command: of the row commands the first pass saw, none changed (only
         * the column bus and bank b moved), and b may have one now */
        if (host_more) {
            mc_update_choices(sim, c);
            mc_pick row = mc_pick_of(kr, cr);
            if (idle >= 0) {
                row.bank = idle;
                row.cls = CAND_IDLE;
            }
            row_after_column(sim, c, best.bank, t, &row);
            mc_pick none = {UINT64_MAX, -1, -1};
            host_best(c, &none, &row, &second);
        }
    } else if (best.bank < 0) { /* a PIM command: look again */
        if (host_more) {
            mc_pick col2 = {UINT64_MAX, -1, -1}, row2 = {UINT64_MAX, -1, -1};
            tick w2 = NEVER;
            mc_host_scan(sim, c, t, best.col ? WANT_ROW : WANT_COL, &col2, &row2, &w2);
            host_best(c, &col2, &row2, &second);
        }
    }
    /* (after a host ACT / PRE no host column command can issue in this cycle: none could
     * before it, and the bank it went to can read only tRCD later) */
    tick w2 = NEVER;
    if (pim) pim_candidate(sim, c, t, &second, &w2);
    if (second.cmd >= 0) issue(sim, c, &second, t);
    return 1;
}

/* the host candidate of bank b, found ready by the round-robin scan (ready: its masks): the
 * older of its ready row hits, else its ACT or PRE */
static void bank_cand(const channel *c, int b, const uint64_t ready[CAND_CLASSES], cand *best)
{
    const uint64_t bit = 1ull << b;
    int cls;
    if (ready[CAND_RD] & bit)
        cls = (ready[CAND_WR] & bit) &&
                      c->slots[c->banks[b].col_slot[DIR_WR]].qseq <
                          c->slots[c->banks[b].col_slot[DIR_RD]].qseq
                  ? CAND_WR
                  : CAND_RD;
    else if (ready[CAND_WR] & bit)
        cls = CAND_WR;
    else
        cls = ready[CAND_ACT] & bit ? CAND_ACT : CAND_PRE;
    host_cand(c, c->ready_key[cls][b], cls, -1, best);
}

/* Host commands issued at t from banks b1 and b2 (-1: none), found by a scan at t whose ready
 * banks were `ready` and whose other candidates can issue no earlier than w. If no other bank
 * was ready, the scan stays valid: no candidate can issue before the earliest of w (the terms of
 * the banks it saw waiting only grew since) and the wake-up of b1's and b2's new candidates.
 * The next step then sleeps until then instead of scanning once more (the same commands and
 * cycles: that scan would find nothing ready). */
static inline void keep_scan_after_issue(const mc_sim *sim, channel *c, tick t,
                                         const uint64_t ready[CAND_CLASSES], tick w, int b1,
                                         int b2)
{
    uint64_t others = (ready[CAND_RD] | ready[CAND_WR] | ready[CAND_ACT] | ready[CAND_PRE]) &
                      ~(1ull << b1);
    if (b2 >= 0) others &= ~(1ull << b2);
    if (others) return;
    mc_update_choices(sim, c);
    w = MINT(w, mc_bank_wake(sim, c, b1));
    if (b2 >= 0) w = MINT(w, mc_bank_wake(sim, c, b2));
    c->scan_valid = 1;
    c->scan_ready = MAXT(w, t + 1);
}

/* Round-robin arbitration (DRAMsim3's): the banks take turns, from c->rr_next (the one after
 * the bank that last issued) on; the first whose command can issue gives it, a row command
 * (ACT, PRE) as readily as a column one. With a dual command bus the turn goes on from that
 * bank, and the first bank with a command that could issue but for the bus gives the second
 * command if it is of the other kind, none if not (its turn is taken all the same). */
static int round_robin(mc_sim *sim, channel *c, tick t, tick *wake)
{
    const int part = sim->partition_banks;
    const int host = part || (c->owner == MC_HOST && c->mode == 0);
    const int pim = c->pim_count > 0 && (part || (c->owner == MC_PIM && c->mode == 1));
    const int host_work = (c->pending_mask[0] | c->pending_mask[1]) || sim->cfg.closed_page;
    uint64_t ready[CAND_CLASSES] = {0, 0, 0, 0};
    cand best = {-1, -1, -1, -1, 0, 0};
    tick w = NEVER;
    if (host && host_work) {
        mc_update_choices(sim, c);
        mc_host_scan_ready(sim, c, t, ready, &w);
        uint64_t any = ready[CAND_RD] | ready[CAND_WR] | ready[CAND_ACT] | ready[CAND_PRE];
        if (any) {
            bank_cand(c, mc_first_in_turn(any, c->rr_next), ready, &best);
        } else if (sim->cfg.closed_page) { /* close a row nothing queued wants */
            uint64_t kc, kr;
            int cc, cr, idle = -1;
            mc_host_scan_keys(sim, c, t, WANT_ROW, &kc, &cc, &kr, &cr, &idle, &w);
            if (idle >= 0) host_cand(c, kr, CAND_IDLE, idle, &best);
        }
    }
    if (pim) pim_candidate(sim, c, t, &best, &w);
    wake_at(wake, w);
    if (!issue_best(sim, c, &best, t, w)) return 0;
    if (best.bank >= 0) c->rr_next = best.bank + 1;
    if (!sim->cfg.dual_command_bus) return 1;
    cand second = {-1, -1, -1, -1, 0, 0};
    const int host_more = host && ((c->pending_mask[0] | c->pending_mask[1]) || sim->cfg.closed_page);
    if (host_more) {
        mc_update_choices(sim, c); /* (only the bank that issued changed) */
        uint64_t rows, cols;
        if (best.bank >= 0) { /* of the first scan's ready banks, those that still could */
            const uint64_t bit = 1ull << best.bank;
            rows = (ready[CAND_ACT] | ready[CAND_PRE]) & ~bit;
            cols = 0; /* after a column command the others wait for the burst */
            if (!best.col) {
                cols = (ready[CAND_RD] | ready[CAND_WR]) & ~bit;
                if (best.cmd == MC_CMD_ACT) /* tRRD holds the rank's other activates */
                    rows &= ~(ready[CAND_ACT] & sim->rank_banks[sim->bank_rank[best.bank]]);
            }
        } else { /* after a PIM command: look again, for the other kind */
            tick w2 = NEVER;
            mc_host_scan_ready(sim, c, t, ready, &w2);
            rows = best.col ? ready[CAND_ACT] | ready[CAND_PRE] : 0;
            cols = best.col ? 0 : ready[CAND_RD] | ready[CAND_WR];
        }
        if (rows | cols) {
            int b = mc_first_in_turn(rows | cols, best.bank >= 0 ? best.bank + 1 : c->rr_next);
            c->rr_next = b + 1;
            if (best.col ? (rows >> b & 1) : (cols >> b & 1)) bank_cand(c, b, ready, &second);
        } else if (best.bank >= 0 && best.col) { /* the bank that read or wrote may close now */
            mc_pick row = {UINT64_MAX, -1, -1}, none = {UINT64_MAX, -1, -1};
            row_after_column(sim, c, best.bank, t, &row);
            host_best(c, &none, &row, &second);
        }
    }
    tick w2 = NEVER;
    if (pim) pim_candidate(sim, c, t, &second, &w2);
    if (second.cmd >= 0) {
        issue(sim, c, &second, t);
        if (second.bank >= 0) c->rr_next = second.bank + 1;
    }
    if (best.bank >= 0 && !pim && !sim->cfg.closed_page)
        keep_scan_after_issue(sim, c, t, ready, w, best.bank, second.cmd >= 0 ? second.bank : -1);
    return 1;
}

/* Refresh first, then a pending hand-over of authority, then FR-FCFS over the requestors
 * allowed to use the channel now. Returns 1 if a command issued at t. */
static int schedule(mc_sim *sim, channel *c, tick t, tick *wake)
{
    if (sim->cfg.refresh == 2 ? mc_refb_step(sim, c, t, wake)
                              : sim->cfg.refresh && step_refresh(sim, c, t, wake)) {
        c->scan_valid = 0;
        return 1;
    }
    if (!sim->partition_banks) {
        if (!c->switching) {
            tick w = NEVER; /* (authority never passes to a side with nothing queued) */
            if (c->qcount[1 - c->owner][0] + c->qcount[1 - c->owner][1] > 0 &&
                sim->policy->hand_over(sim, c, t, &w)) {
                c->switching = 1;
                mc_account(sim, c, t);
            }
            wake_at(wake, w);
        }
        if (c->switching) {
            if (c->refreshing) return 0;
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
    if (sim->cfg.arbitration == MC_ARB_COLUMN_FIRST) return frfcfs(sim, c, t, wake);
    return round_robin(sim, c, t, wake);
}

/* Nothing can issue at t and nothing the last scan saw has changed: no refresh due, no
 * hand-over possible (the other side has nothing queued), no mode switch under way. */
static int quiet(const mc_sim *sim, const channel *c, tick t, tick *wake)
{
    if (!c->scan_valid || c->scan_ready <= t || c->switching || c->mode_ready > t) return 0;
    if (!sim->partition_banks &&
        c->qcount[1 - c->owner][0] + c->qcount[1 - c->owner][1] > 0)
        return 0;
    tick w = c->scan_ready;
    if (sim->cfg.refresh) {
        if (c->refreshing || c->refresh_next <= t) return 0;
        w = MINT(w, c->refresh_next);
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

/* ---- for per-bank refresh (refresh.c) ------------------------------------------------ */

int mc_close_pim_row(mc_sim *sim, channel *c, tick t, tick *wake)
{
    return close_pim_row(sim, c, t, wake);
}

void mc_watchdog(mc_sim *sim, channel *c, tick t) { watchdog(sim, c, t); }
