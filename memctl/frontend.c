/* The front end: offers trace records in order, up to issue_width requests per cycle once
 * their arrival cycle has passed, stopping at the first the controller refuses (a full
 * queue). Markers take effect at their place in the trace. */
#define _DEFAULT_SOURCE /* madvise */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "internal.h"

int64_t mc_layer_index(const mc_sim *sim, uint32_t layer) { return idmap_get(&sim->layer_map, layer); }

/* the index of layer `id` in sim->layers, added on first use (ids may be sparse) */
static int layer_index(mc_sim *sim, uint32_t id, uint32_t *out)
{
    int64_t k = idmap_get(&sim->layer_map, id);
    if (k >= 0) {
        *out = (uint32_t)k;
        return MC_OK;
    }
    if (sim->nlayers >= LAYER_ID0)
        return mc_set_error(sim, MC_ERR_TRACE, "more than %u layers", (unsigned)LAYER_ID0);
    if (sim->nlayers == sim->layers_cap) {
        uint64_t cap = sim->layers_cap ? 2 * sim->layers_cap : 64;
        layer_span *p = realloc(sim->layers, cap * sizeof *p);
        if (!p) return mc_set_error(sim, MC_ERR_MEMORY, "out of memory for layer %u", id);
        sim->layers = p;
        sim->layers_cap = cap;
    }
    layer_span *ls = &sim->layers[sim->nlayers];
    ls->id = id;
    ls->start = NEVER;
    ls->end = 0;
    ls->requests = 0;
    memset(ls->by, 0, sizeof ls->by);
    if (idmap_put(&sim->layer_map, id, sim->nlayers))
        return mc_set_error(sim, MC_ERR_MEMORY, "out of memory for layer %u", id);
    *out = (uint32_t)sim->nlayers++;
    return MC_OK;
}

static int apply_param(mc_sim *sim, const mc_record *r, uint64_t index)
{
    tick v = (tick)r->value;
    if (r->param != MC_P_EPOCH_CAP && r->param != MC_P_MIN_EPOCH &&
        r->param != MC_P_HOST_EPOCH_CAP && r->value > INT_MAX)
        return mc_set_error(sim, MC_ERR_TRACE, "record %llu: policy parameter id %u: watermark "
                            "%lu out of range 0..%d", (unsigned long long)index,
                            (unsigned)r->param, (unsigned long)r->value, INT_MAX);
    switch (r->param) {
    case MC_P_HIGH_WATERMARK: sim->hwm[MC_HOST] = sim->hwm[MC_PIM] = (int)r->value; break;
    case MC_P_HOST_HWM: sim->hwm[MC_HOST] = (int)r->value; break;
    case MC_P_PIM_HWM: sim->hwm[MC_PIM] = (int)r->value; break;
    case MC_P_EPOCH_CAP: sim->epoch_cap = v > 0 ? v : NEVER; break;
    case MC_P_MIN_EPOCH: sim->min_epoch = v; break;
    case MC_P_HOST_EPOCH_CAP: sim->host_epoch_cap = v; break;
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
    /* events waiting for this request (pending_events holds their indices) */
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

/* event `id`, added on first use (ids may be sparse: an event costs the same whatever its
 * id); its index in sim->events in *index; NULL: out of memory */
static event *get_event(mc_sim *sim, uint32_t id, uint64_t *index)
{
    int64_t k = idmap_get(&sim->event_map, id);
    if (k < 0) {
        if (sim->nevents == sim->events_cap) {
            uint64_t cap = sim->events_cap ? 2 * sim->events_cap : 256;
            event *p = realloc(sim->events, cap * sizeof *p);
            if (!p) return NULL;
            sim->events = p;
            sim->events_cap = cap;
        }
        event *e = &sim->events[sim->nevents];
        memset(e, 0, sizeof *e);
        e->id = id;
        e->reached = e->fired = NEVER;
        if (idmap_put(&sim->event_map, id, sim->nevents)) return NULL;
        k = (int64_t)sim->nevents++;
    }
    if (index) *index = (uint64_t)k;
    return &sim->events[k];
}

/* SIGNAL: the event fires once every request the requestor offered before it completed */
static int signal_event(mc_sim *sim, const mc_record *r, uint64_t pos, int who, tick t)
{
    uint64_t index;
    event *e = get_event(sim, r->value, &index);
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
    sim->pending_events[sim->npending++] = index;
    for (int c = 0; c < sim->nch; c++) /* queued writes it waits for must drain */
        sim->ch[c].next_event = MINT(sim->ch[c].next_event, t);
    return MC_OK;
}

void mc_event(const mc_sim *sim, uint32_t id, uint64_t *reached, uint64_t *fired)
{
    if (!reached || !fired) return;
    *reached = *fired = UINT64_MAX;
    if (!sim) return;
    int64_t k = idmap_get(&sim->event_map, id);
    if (k < 0) return;
    const event *e = &sim->events[k];
    if (e->reached < NEVER) *reached = (uint64_t)e->reached;
    if (e->fired < NEVER) *fired = (uint64_t)e->fired;
}

uint64_t mc_event_count(const mc_sim *sim) { return sim ? sim->nevents : 0; }

uint64_t mc_event_ids(const mc_sim *sim, uint32_t *ids, uint64_t max)
{
    if (!sim || (!ids && max)) return 0;
    uint64_t n = sim->nevents < max ? sim->nevents : max;
    for (uint64_t k = 0; k < n; k++) ids[k] = sim->events[k].id;
    return n;
}

uint64_t mc_lowest_cursor(const mc_sim *sim)
{
    uint64_t lo = sim->cur[0].pos;
    for (int k = 1; k < sim->cursors; k++) lo = MINT(lo, sim->cur[k].pos);
    return lo;
}

/* Records the front end may take in now. The cursors may drift apart by at most `window`
 * records, so what is held stays bounded whatever the mix of requestors (one that never
 * issues, one that ends early): the leading cursor waits for the lagging one to move
 * (back-pressure). Unless the lagging cursor waits for an event not signalled yet: only the
 * leading cursor can reach its SIGNAL, so it reads on. */
uint64_t mc_feed_room(const mc_sim *sim)
{
    uint64_t held = sim->rings[0].hi - mc_lowest_cursor(sim);
    if (held < sim->window) return sim->window - held;
    for (int k = 0; k < sim->cursors; k++) {
        const cursor *cu = &sim->cur[k];
        if (cu->waiting && cu->pos < sim->rings[0].hi) {
            int64_t e = idmap_get(&sim->event_map, sim->rings[0].rec[cu->pos & sim->rings[0].mask].value);
            if (e < 0 || !sim->events[e].signaled) return sim->window;
        }
    }
    return 0;
}

/* n records' worth of memory for the ring; from 2 MiB on aligned to 2 MiB and marked for
 * transparent huge pages: a ring of a million records is 24 MiB, whose first touch in 4 KiB
 * pages costs 6,000 page faults (about 10% of a whole `pimrt memsim` run on a stream trace) */
static mc_record *ring_alloc(uint64_t n)
{
    const size_t huge = (size_t)2 << 20;
    size_t bytes = (size_t)n * sizeof(mc_record);
    if (bytes < huge) return malloc(bytes);
    bytes = (bytes + huge - 1) / huge * huge; /* (aligned_alloc: a multiple of the alignment) */
    mc_record *p = aligned_alloc(huge, bytes);
#ifdef MADV_HUGEPAGE
    if (p) madvise(p, bytes, MADV_HUGEPAGE); /* a hint: nothing to do if it is not taken */
#endif
    return p;
}

/* the lowest position of a cursor reading ring `side` (0: every cursor's, unless split) */
static uint64_t ring_low(const mc_sim *sim, int side)
{
    return sim->split ? sim->cur[side].pos : mc_lowest_cursor(sim);
}

/* records held in every ring */
static uint64_t held_now(const mc_sim *sim)
{
    uint64_t held = 0;
    for (int k = 0; k < (sim->split ? MC_NUM_REQ : 1); k++) held += sim->rings[k].hi - ring_low(sim, k);
    return held;
}

/* append n records to those ring `side` holds (it grows to what it holds, in powers of two) */
int mc_ring_push(mc_sim *sim, int side, const mc_record *recs, uint64_t n)
{
    mc_ring *rg = &sim->rings[side];
    uint64_t lo = ring_low(sim, side);
    uint64_t need = rg->hi - lo + n;
    uint64_t cap = rg->rec ? rg->mask + 1 : 0;
    if (need > cap) {
        uint64_t nc = cap ? cap : 1024;
        while (nc < need) nc *= 2;
        mc_record *p = ring_alloc(nc);
        if (!p)
            return mc_set_error(sim, MC_ERR_MEMORY, "out of memory holding %llu trace records",
                                (unsigned long long)need);
        for (uint64_t i = lo; i < rg->hi; i++) p[i & (nc - 1)] = rg->rec[i & rg->mask];
        free(rg->rec);
        rg->rec = p;
        rg->mask = nc - 1;
        cap = nc;
    }
    uint64_t at = rg->hi & rg->mask;
    uint64_t first = MINT(n, cap - at);
    if (first) memcpy(&rg->rec[at], recs, first * sizeof *recs);
    if (n > first) memcpy(rg->rec, recs + first, (n - first) * sizeof *recs);
    rg->hi += n;
    uint64_t held = held_now(sim);
    if (held > sim->held_peak) sim->held_peak = held;
    return MC_OK;
}

int mc_ring_copy(const mc_sim *sim, int side, mc_ring *to)
{
    const mc_ring *rg = &sim->rings[side];
    *to = *rg;
    if (!rg->rec) return 0;
    to->rec = ring_alloc(rg->mask + 1);
    if (!to->rec) return -1;
    for (uint64_t i = ring_low(sim, side); i < rg->hi; i++) /* the records still held */
        to->rec[i & rg->mask] = rg->rec[i & rg->mask];
    return 0;
}

void mc_held(const mc_sim *sim, uint64_t *held, uint64_t *peak, uint64_t *capacity)
{
    if (!sim || !held || !peak || !capacity) return;
    *held = held_now(sim);
    *peak = sim->held_peak;
    *capacity = 0;
    for (int k = 0; k < MC_NUM_REQ; k++) *capacity += sim->rings[k].rec ? sim->rings[k].mask + 1 : 0;
}

void mc_set_window(mc_sim *sim, uint64_t records)
{
    if (sim) sim->window = records ? records : MC_DEFAULT_WINDOW;
}

/* A barrier is passed by every cursor together, once all have reached it and all work
 * before it has completed. */
static int pass_barrier(mc_sim *sim, cursor *cu, tick t)
{
    if (!cu->barrier) {
        cu->barrier = 1;
        start_waiting(sim, t);
    }
    for (int k = 0; k < sim->cursors; k++)
        if (!sim->cur[k].barrier || sim->cur[k].shared != cu->shared) { /* (the same marker) */
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
        if (o != cu) { /* past its barrier record; one that took its turn at t already acts
                        * at t + 1 (said so, not left to the event loop: a step resumed at t
                        * with more records must not give it a second turn) */
            o->pos++;
            o->shared++;
            o->next = o < cu ? t + 1 : t;
        }
    }
    sim->fe_barrier = 0;
    return 1;
}

static int step_cursor(mc_sim *sim, int k, tick t)
{
    const mc_config *cf = &sim->cfg;
    cursor *cu = &sim->cur[k];
    if (cu->cycle != t) {
        cu->cycle = t;
        cu->offers = 0;
    }
    const mc_ring *rg = mc_ring_of(sim, k);
    while (cu->pos < rg->hi) {
        const mc_record *r = &rg->rec[cu->pos & rg->mask];
        switch (r->op) {
        case MC_LAYER: {
            int rc = layer_index(sim, r->value, &cu->layer);
            if (rc) return rc;
            break;
        }
        case MC_PARAM:
            if (cu->shared >= sim->param_upto) { /* the first cursor to reach it applies it */
                int rc = apply_param(sim, r, cu->pos);
                if (rc) return rc;
                sim->param_upto = cu->shared + 1;
            }
            break;
        case MC_BARRIER:
            if (t < cu->busy_until) { /* its computing first */
                cu->next = cu->busy_until;
                return MC_OK;
            }
            if (!pass_barrier(sim, cu, t)) return MC_OK;
            break;
        case MC_DELAY:
        case MC_SIGNAL:
        case MC_WAIT:
        case MC_COMPUTE: {
            if (r->requestor >= MC_NUM_REQ)
                return mc_set_error(sim, MC_ERR_TRACE, "record %llu: unknown requestor %u",
                                    (unsigned long long)cu->pos, (unsigned)r->requestor);
            if (sim->cursors == 2 && r->requestor != k) break; /* the other stream's */
            if (t < cu->busy_until) { /* the computing a COMPUTE started ends first */
                cu->next = cu->busy_until;
                return MC_OK;
            }
            if (r->op == MC_COMPUTE) {
                cu->busy_until = t + (tick)r->value;
            } else if (r->op == MC_DELAY) {
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
                event *e = get_event(sim, r->value, NULL);
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
        cu->shared += mc_shared_op(r->op);
        cu->pos++;
    }
    cu->next = mc_no_more(sim, k) ? NEVER : t; /* at the end of the records it has */
    return MC_OK;
}

/* The cursors act in order. Split, each cycle they act as they would with every record
 * there: a cursor that runs out of records ends the step, which resumes with that cursor
 * once its side has more, and a step that has ended is not taken again in its cycle (a
 * cursor another woke at t acts at t + 1, as without the wait for records). */
int mc_frontend_step(mc_sim *sim, tick t)
{
    int k = sim->split && sim->fe_at == t ? sim->fe_from : 0;
    for (; k < sim->cursors; k++) {
        if (sim->cur[k].next > t) continue;
        int rc = step_cursor(sim, k, t);
        if (rc) return rc;
        if (sim->split && mc_at_end(sim, k) && !sim->side_end[k]) break;
    }
    sim->fe_at = t;
    sim->fe_from = k;
    return MC_OK;
}
