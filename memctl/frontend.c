/* The front end: offers trace records in order, up to issue_width requests per cycle once
 * their arrival cycle has passed, stopping at the first the controller refuses (a full
 * queue). Markers take effect at their place in the trace. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static int ensure_layer(mc_sim *sim, uint32_t id)
{
    if (id < sim->nlayers) return MC_OK;
    if (id >= sim->layers_cap) {
        uint64_t cap = sim->layers_cap ? sim->layers_cap : 64;
        while (cap <= id) cap *= 2;
        layer_span *p = realloc(sim->layers, cap * sizeof *p);
        if (!p) return mc_set_error(sim, MC_ERR_MEMORY, "out of memory for layer %u", id);
        sim->layers = p;
        sim->layers_cap = cap;
    }
    for (uint64_t i = sim->nlayers; i <= id; i++) {
        sim->layers[i].start = NEVER;
        sim->layers[i].end = 0;
        sim->layers[i].requests = 0;
    }
    sim->nlayers = (uint64_t)id + 1;
    return MC_OK;
}

static int apply_param(mc_sim *sim, const mc_record *r, uint64_t index)
{
    tick v = (tick)r->value;
    switch (r->param) {
    case MC_P_HIGH_WATERMARK: sim->hwm[MC_HOST] = sim->hwm[MC_PIM] = (int)r->value; break;
    case MC_P_HOST_HWM: sim->hwm[MC_HOST] = (int)r->value; break;
    case MC_P_PIM_HWM: sim->hwm[MC_PIM] = (int)r->value; break;
    case MC_P_EPOCH_CAP: sim->epoch_cap = v > 0 ? v : NEVER; break;
    case MC_P_MIN_EPOCH: sim->min_epoch = v; break;
    case MC_P_LOW_WATERMARK: sim->lwm[MC_HOST] = sim->lwm[MC_PIM] = (int)r->value; break;
    case MC_P_HOST_LWM: sim->lwm[MC_HOST] = (int)r->value; break;
    case MC_P_PIM_LWM: sim->lwm[MC_PIM] = (int)r->value; break;
    default:
        return mc_set_error(sim, MC_ERR_TRACE, "record %llu: unknown policy parameter id %u",
                            (unsigned long long)index, (unsigned)r->param);
    }
    for (int c = 0; c < sim->nch; c++) {
        sim->ch[c].next_event = MINT(sim->ch[c].next_event, sim->now);
        sim->ch[c].scan_valid = 0;
    }
    return MC_OK;
}

/* a host read of an address with a write still queued gets the written data at once */
static int forward_read(const channel *c, int b, uint64_t addr)
{
    for (int32_t h = c->banks[b].head[DIR_WR]; h >= 0; h = c->slots[h].next)
        if (c->slots[h].addr == addr) return 1;
    for (int32_t h = c->txq_head[DIR_WR][b]; h >= 0; h = c->slots[h].next)
        if (c->slots[h].addr == addr) return 1;
    return 0;
}

static int enqueue(mc_sim *sim, const mc_record *rec, uint64_t index, uint32_t layer, tick t)
{
    const mc_config *k = &sim->cfg;
    const int dir = rec->op == MC_WRITE;
    const int who = rec->requestor;
    int ci, b;
    int32_t row, col;
    if (sim->refused_index == index + 1 && sim->refused_addr == rec->addr &&
        sim->refused_who == who) { /* offered again: decoded already */
        ci = sim->refused_ch;
        b = sim->refused_bank;
        row = sim->refused_row;
        col = sim->refused_col;
    } else {
        if (rec->addr >= sim->capacity) {
            mc_set_error(sim, MC_ERR_TRACE,
                         "record %llu: address 0x%llx is beyond the capacity (0x%llx bytes)",
                         (unsigned long long)index, (unsigned long long)rec->addr,
                         (unsigned long long)sim->capacity);
            return -1;
        }
        int64_t f[MC_F_COUNT];
        mc_decode_fields(sim, rec->addr, f);
        ci = (int)(f[MC_F_CHANNEL] * k->pseudo_channels + f[MC_F_PCH]);
        b = (int)((f[MC_F_RANK] * k->bankgroups + f[MC_F_BANKGROUP]) * k->banks_per_group +
                  f[MC_F_BANK]);
        if (who == MC_HOST && !((sim->host_banks >> b) & 1))
            b = sim->host_bank_list[b % sim->host_bank_count]; /* bank_partition: fold into host banks */
        row = (int32_t)f[MC_F_ROW];
        col = (int32_t)f[MC_F_COLUMN];
    }
    channel *c = &sim->ch[ci];
    if (who == MC_HOST && !dir && forward_read(c, b, rec->addr)) {
        req tmp = {0};
        tmp.arrival = t;
        tmp.index = index;
        tmp.addr = rec->addr;
        tmp.layer = layer;
        tmp.op = MC_READ;
        tmp.requestor = MC_HOST;
        tmp.cls = CLS_HIT;
        mc_record_latency(sim, c, &tmp, t + 1, -1);
        if (t + 1 > sim->last_read_done) sim->last_read_done = t + 1;
        if (t + 1 > sim->last_done_by[MC_HOST]) sim->last_done_by[MC_HOST] = t + 1;
        return 1;
    }
    int full = who == MC_HOST ? c->txq_count[dir] >= sim->host_qd
                              : c->qcount[MC_PIM][dir] >= k->queue_depth;
    if (full || c->free_head < 0) {
        sim->refused_index = index + 1;
        sim->refused_addr = rec->addr;
        sim->refused_who = who;
        sim->refused_ch = ci;
        sim->refused_bank = b;
        sim->refused_row = row;
        sim->refused_col = col;
        return 0;
    }
    int32_t s = c->free_head;
    req *q = &c->slots[s];
    c->free_head = q->next;
    q->arrival = t;
    q->index = index;
    q->seq = sim->seq++;
    q->addr = rec->addr;
    q->layer = layer;
    q->row = row;
    q->col = col;
    q->bank = (uint16_t)b;
    q->op = (uint8_t)rec->op;
    q->requestor = (uint8_t)who;
    q->cls = CLS_HIT;
    q->next = -1;
    if (who == MC_HOST) { /* into the transaction queue; the scheduler moves it to its bank */
        if (c->txq_tail[dir][b] >= 0) c->slots[c->txq_tail[dir][b]].next = s;
        else c->txq_head[dir][b] = s;
        c->txq_tail[dir][b] = s;
        c->txq_count[dir]++;
        c->txq_nb[dir][b]++;
        c->txq_banks[dir] |= 1ull << b;
    } else {
        if (c->pim_tail >= 0) c->slots[c->pim_tail].next = s; else c->pim_head = s;
        c->scan_valid = 0; /* a new PIM head can be a candidate */
        c->pim_tail = s;
        c->pim_count++;
    }
    c->qcount[who][dir]++;
    sim->outstanding++;
    sim->outstanding_by[who]++;
    if (dir && t > sim->last_write_accept) sim->last_write_accept = t;
    mc_account(sim, c, t);
    c->next_event = MINT(c->next_event, t);
    return 1;
}

static int barrier_clear(const mc_sim *sim, tick t) { return sim->outstanding == 0 && t >= sim->last_done; }

static tick barrier_wake(const mc_sim *sim, tick t)
{
    return sim->outstanding ? NEVER : MAXT(t + 1, sim->last_done);
}

/* the front end starts waiting for all outstanding work: channels holding a few writes
 * must drain them now */
static void start_waiting(mc_sim *sim, tick t)
{
    if (!sim->fe_barrier)
        for (int c = 0; c < sim->nch; c++) sim->ch[c].next_event = MINT(sim->ch[c].next_event, t);
    sim->fe_barrier = 1;
}

static void wake_all(mc_sim *sim, tick when)
{
    for (int k = 0; k < sim->cursors; k++) sim->cur[k].next = MINT(sim->cur[k].next, when);
}

void mc_release_slot(mc_sim *sim, channel *c, int32_t slot, tick done, tick t)
{
    const req *r = &c->slots[slot];
    int who = r->requestor;
    uint64_t index = r->index;
    c->slots[slot].next = c->free_head;
    c->free_head = slot;
    sim->outstanding--;
    sim->outstanding_by[who]--;
    if (done > sim->last_done_by[who]) sim->last_done_by[who] = done;
    /* events waiting for this request */
    for (uint64_t i = 0; i < sim->npending;) {
        event *e = &sim->events[sim->pending_events[i]];
        if (e->requestor == who && index < e->pos) {
            if (done > e->max_done) e->max_done = done;
            if (--e->pending == 0) {
                e->fired = MAXT(e->max_done, e->reached);
                sim->pending_events[i] = sim->pending_events[--sim->npending];
                wake_all(sim, MAXT(t + 1, e->fired));
                continue;
            }
        }
        i++;
    }
    for (int k = 0; k < sim->cursors; k++) {
        cursor *cu = &sim->cur[k];
        if (cu->blocked) {
            cu->blocked = 0;
            cu->next = MINT(cu->next, t + 1);
        }
        if (sim->fe_barrier && sim->outstanding == 0) cu->next = MINT(cu->next, MAXT(t + 1, sim->last_done));
    }
}

static event *get_event(mc_sim *sim, uint32_t id)
{
    if (id >= sim->nevents) {
        if (id >= sim->events_cap) {
            uint64_t cap = sim->events_cap ? sim->events_cap : 256;
            while (cap <= id) cap *= 2;
            event *p = realloc(sim->events, cap * sizeof *p);
            if (!p) return NULL;
            sim->events = p;
            sim->events_cap = cap;
        }
        for (uint64_t i = sim->nevents; i <= id; i++) {
            memset(&sim->events[i], 0, sizeof sim->events[i]);
            sim->events[i].reached = sim->events[i].fired = NEVER;
        }
        sim->nevents = (uint64_t)id + 1;
    }
    return &sim->events[id];
}

/* SIGNAL: the event fires once every request the requestor offered before it completed */
static int signal_event(mc_sim *sim, const mc_record *r, uint64_t pos, int who, tick t)
{
    event *e = get_event(sim, r->value);
    if (!e) return mc_set_error(sim, MC_ERR_MEMORY, "out of memory for event %u", r->value);
    if (e->signaled)
        return mc_set_error(sim, MC_ERR_TRACE, "record %llu: event %u signaled twice",
                            (unsigned long long)pos, r->value);
    e->signaled = 1;
    e->pos = pos;
    e->requestor = who;
    e->reached = t;
    e->max_done = MAXT(t, sim->last_done_by[who]);
    e->pending = sim->outstanding_by[who];
    if (e->pending == 0) {
        e->fired = e->max_done;
        wake_all(sim, MAXT(t + 1, e->fired));
        return MC_OK;
    }
    if (sim->npending == sim->pending_cap) {
        uint64_t cap = sim->pending_cap ? sim->pending_cap * 2 : 64;
        uint64_t *p = realloc(sim->pending_events, cap * sizeof *p);
        if (!p) return mc_set_error(sim, MC_ERR_MEMORY, "out of memory for events");
        sim->pending_events = p;
        sim->pending_cap = cap;
    }
    sim->pending_events[sim->npending++] = r->value;
    for (int c = 0; c < sim->nch; c++) /* queued writes it waits for must drain */
        sim->ch[c].next_event = MINT(sim->ch[c].next_event, t);
    return MC_OK;
}

void mc_event(const mc_sim *sim, uint32_t id, uint64_t *reached, uint64_t *fired)
{
    *reached = *fired = UINT64_MAX;
    if (id >= sim->nevents) return;
    const event *e = &sim->events[id];
    if (e->reached < NEVER) *reached = (uint64_t)e->reached;
    if (e->fired < NEVER) *fired = (uint64_t)e->fired;
}

uint64_t mc_event_count(const mc_sim *sim) { return sim->nevents; }

/* A barrier is passed by every cursor together, once all have reached it and all work
 * before it has completed. */
static int pass_barrier(mc_sim *sim, cursor *cu, tick t)
{
    if (!cu->barrier) {
        cu->barrier = 1;
        start_waiting(sim, t);
    }
    for (int k = 0; k < sim->cursors; k++)
        if (!sim->cur[k].barrier || sim->cur[k].pos != cu->pos) {
            cu->next = NEVER; /* woken when the other cursor arrives */
            return 0;
        }
    if (!barrier_clear(sim, t)) {
        cu->next = barrier_wake(sim, t);
        return 0;
    }
    for (int k = 0; k < sim->cursors; k++) {
        cursor *o = &sim->cur[k];
        o->barrier = 0;
        if (o != cu) {
            o->pos++;
            o->next = t;
        }
    }
    sim->fe_barrier = 0;
    return 1;
}

static int step_cursor(mc_sim *sim, int k, const mc_record *recs, uint64_t n, tick t)
{
    const mc_config *cf = &sim->cfg;
    cursor *cu = &sim->cur[k];
    if (cu->cycle != t) {
        cu->cycle = t;
        cu->offers = 0;
    }
    while (cu->pos < sim->base + n) {
        const mc_record *r = &recs[cu->pos - sim->base];
        switch (r->op) {
        case MC_LAYER: {
            int rc = ensure_layer(sim, r->value);
            if (rc) return rc;
            cu->layer = r->value;
            break;
        }
        case MC_PARAM:
            if (cu->pos >= sim->param_upto) {
                int rc = apply_param(sim, r, cu->pos);
                if (rc) return rc;
                sim->param_upto = cu->pos + 1;
            }
            break;
        case MC_BARRIER:
            if (!pass_barrier(sim, cu, t)) return MC_OK;
            break;
        case MC_DELAY:
        case MC_SIGNAL:
        case MC_WAIT: {
            if (r->requestor >= MC_NUM_REQ)
                return mc_set_error(sim, MC_ERR_TRACE, "record %llu: unknown requestor %u",
                                    (unsigned long long)cu->pos, (unsigned)r->requestor);
            if (sim->cursors == 2 && r->requestor != k) break; /* the other stream's */
            if (r->op == MC_DELAY) {
                if (!cu->delay_until) cu->delay_until = t + (tick)r->value;
                if (t < cu->delay_until) {
                    cu->next = cu->delay_until;
                    return MC_OK;
                }
                cu->delay_until = 0;
            } else if (r->op == MC_SIGNAL) {
                int rc = signal_event(sim, r, cu->pos, r->requestor, t);
                if (rc) return rc;
            } else {
                event *e = get_event(sim, r->value);
                if (!e) return mc_set_error(sim, MC_ERR_MEMORY, "out of memory for events");
                if (e->fired >= NEVER || t < e->fired) {
                    cu->next = e->fired < NEVER ? e->fired : NEVER; /* woken when it fires */
                    cu->waiting = 1;
                    return MC_OK;
                }
                cu->waiting = 0;
            }
            break;
        }
        case MC_READ:
        case MC_WRITE: {
            if (r->requestor >= MC_NUM_REQ)
                return mc_set_error(sim, MC_ERR_TRACE, "record %llu: unknown requestor %u",
                                    (unsigned long long)cu->pos, (unsigned)r->requestor);
            if (sim->cursors == 2 && r->requestor != k) break; /* the other cursor's */
            if ((tick)r->cycle > t) {
                cu->next = (tick)r->cycle;
                return MC_OK;
            }
            if (cu->offers >= (uint64_t)cf->issue_width) {
                cu->next = t + 1;
                return MC_OK;
            }
            if (r->requestor == MC_PIM && !cf->pim_enabled)
                return mc_set_error(sim, MC_ERR_TRACE,
                                    "record %llu: a PIM request, but the part has no [pim] units",
                                    (unsigned long long)cu->pos);
            if (sim->policy->barrier_on_switch && sim->fe_last_req >= 0 &&
                r->requestor != sim->fe_last_req) {
                if (!barrier_clear(sim, t)) { /* serial: the other side's phase must finish */
                    start_waiting(sim, t);
                    cu->next = barrier_wake(sim, t);
                    return MC_OK;
                }
                sim->fe_barrier = 0;
            }
            int ok = enqueue(sim, r, cu->pos, cu->layer, t);
            if (ok < 0) return MC_ERR_TRACE;
            if (!ok) {
                cu->blocked = 1;
                cu->next = NEVER;
                return MC_OK;
            }
            sim->fe_last_req = r->requestor;
            cu->offers++;
            sim->requests++;
            break;
        }
        default:
            return mc_set_error(sim, MC_ERR_TRACE, "record %llu: unknown op %u",
                                (unsigned long long)cu->pos, (unsigned)r->op);
        }
        cu->pos++;
    }
    cu->next = sim->fe_done ? NEVER : t; /* at the end of the records it has */
    return MC_OK;
}

int mc_frontend_step(mc_sim *sim, const mc_record *recs, uint64_t n, tick t)
{
    for (int k = 0; k < sim->cursors; k++) {
        if (sim->cur[k].next > t) continue;
        int rc = step_cursor(sim, k, recs, n, t);
        if (rc) return rc;
    }
    return MC_OK;
}
