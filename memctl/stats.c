/* Statistics per requestor and channel: counts, latency histogram, cycle accounting. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

int mc_set_error(mc_sim *sim, int code, const char *fmt, ...)
{
    if (code == MC_ERR_ARG && mc_failed(sim)) return code; /* keep what stopped it */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sim->err, sizeof sim->err, fmt, ap);
    va_end(ap);
    if (!sim->err[0]) snprintf(sim->err, sizeof sim->err, "error %d", code);
    if (!sim->err_code || sim->err_code == MC_ERR_ARG) sim->err_code = code;
    return code;
}

const char *mc_error(const mc_sim *sim) { return sim ? sim->err : "no simulator (NULL)"; }

/* a getter's bad argument: the message when there is a simulator to hold it */
static int bad_arg(const mc_sim *sim, const char *what)
{
    if (sim) mc_set_error((mc_sim *)sim, MC_ERR_ARG, "%s", what);
    return MC_ERR_ARG;
}

static int bad_index(const mc_sim *sim, int requestor, int channel, int any_channel)
{
    if (requestor < 0 || requestor >= MC_NUM_REQ) return 1;
    if (any_channel && channel == -1) return 0;
    return channel < 0 || channel >= sim->nch;
}

void mc_stats_init_channel(mc_sim *sim, channel *c)
{
    (void)sim;
    for (int r = 0; r < MC_NUM_REQ; r++) {
        c->rs[r].state = 0;
        c->rs[r].state_since = 0;
    }
}

static size_t hist_bin(uint64_t lat)
{
    if (lat < HIST_EXACT) return (size_t)lat;
    int lg = 63 - __builtin_clzll(lat);          /* >= 12 */
    uint64_t sub = (lat >> (lg - 4)) & (HIST_SUB - 1);
    size_t bin = HIST_EXACT + (size_t)(lg - 12) * HIST_SUB + (size_t)sub;
    return bin < HIST_BINS ? bin : HIST_BINS - 1;
}

static uint64_t bin_value(size_t bin)
{
    if (bin < HIST_EXACT) return bin;
    size_t lg = (bin - HIST_EXACT) / HIST_SUB + 12, sub = (bin - HIST_EXACT) % HIST_SUB;
    return (1ull << lg) + ((uint64_t)sub << (lg - 4));
}

/* room in st's histogram for bins up to `bin` (the new ones zero): 0, or -1 out of memory
 * (the run fails) */
static int grow_hist(mc_sim *sim, req_stats *st, size_t bin)
{
    size_t len = st->hist_len ? 2 * (size_t)st->hist_len : 1024;
    while (len <= bin) len *= 2;
    if (len > HIST_BINS) len = HIST_BINS;
    uint64_t *h = realloc(st->hist, len * sizeof *h);
    if (!h) {
        mc_set_error(sim, MC_ERR_MEMORY, "out of memory for a latency histogram");
        return -1;
    }
    memset(h + st->hist_len, 0, (len - st->hist_len) * sizeof *h);
    st->hist = h;
    st->hist_len = (uint32_t)len;
    return 0;
}

void mc_record_latency(mc_sim *sim, channel *c, const req *r, tick done, tick issue)
{
    req_stats *st = &c->rs[r->requestor];
    uint64_t lat = (uint64_t)(done - r->arrival);
    if (r->op == MC_READ) st->s.reads++; else st->s.writes++;
    st->s.latency_sum += lat;
    if (lat > st->s.latency_max) st->s.latency_max = lat;
    const size_t bin = hist_bin(lat);
    if (bin >= st->hist_len && grow_hist(sim, st, bin)) return;
    st->hist[bin]++;
    if (r->cls == CLS_HIT) st->s.row_hits++;
    else if (r->cls == CLS_MISS) st->s.row_misses++;
    else st->s.row_conflicts++;
    if (done > sim->last_done) sim->last_done = done;
    uint32_t li = r->layer;
    if (li == LAYER_ID0 && sim->nlayers) { /* before any LAYER record: layer 0, if any */
        int64_t k = mc_layer_index(sim, 0);
        if (k >= 0) li = (uint32_t)k;
    }
    if (li < sim->nlayers) {
        layer_span *ls = &sim->layers[li];
        if (r->arrival < ls->start) ls->start = r->arrival;
        if (done > ls->end) ls->end = done;
        ls->requests++;
        mc_layer_stats *b = &ls->by[r->requestor];
        if (r->op == MC_READ) b->reads++; else b->writes++;
        b->latency_sum += lat;
        if (r->cls == CLS_HIT) b->row_hits++;
        else if (r->cls == CLS_MISS) b->row_misses++;
        else b->row_conflicts++;
    }
    if (sim->cfg.keep_completions) {
        if (sim->comp_len == sim->comp_cap) {
            uint64_t cap = sim->comp_cap ? sim->comp_cap * 2 : 4096;
            uint64_t *a = realloc(sim->comp_index, cap * sizeof *a);
            if (a) sim->comp_index = a;
            uint64_t *b = realloc(sim->comp_cycle, cap * sizeof *b);
            if (b) sim->comp_cycle = b;
            uint64_t *d = realloc(sim->comp_issue, cap * sizeof *d);
            if (d) sim->comp_issue = d;
            uint64_t *e = realloc(sim->comp_arrival, cap * sizeof *e);
            if (e) sim->comp_arrival = e;
            if (!a || !b || !d || !e) {
                mc_set_error(sim, MC_ERR_MEMORY, "out of memory keeping completions");
                sim->cfg.keep_completions = 0;
                return;
            }
            sim->comp_cap = cap;
        }
        sim->comp_index[sim->comp_len] = r->index;
        sim->comp_issue[sim->comp_len] = issue < 0 ? UINT64_MAX : (uint64_t)issue;
        sim->comp_arrival[sim->comp_len] = (uint64_t)r->arrival;
        sim->comp_cycle[sim->comp_len++] = (uint64_t)done;
    }
}

/* Cycle accounting: each requestor on each channel is idle (nothing queued), active (queued
 * and allowed to use the channel) or blocked (queued, but the other requestor holds the
 * channel or it is switching modes). mc_account is called whenever one of these can change;
 * the cycles since the state began are added up when it ends (mc_account_close at the end of
 * the run), which gives the same sums as adding them at every call. */
static void close_state(req_stats *st, tick t)
{
    if (t > st->state_since) {
        uint64_t d = (uint64_t)(t - st->state_since);
        if (st->state == 0) st->s.cycles_idle += d;
        else if (st->state == 1) st->s.cycles_active += d;
        else st->s.cycles_blocked += d;
        st->state_since = t;
    }
}

void mc_account_slow(mc_sim *sim, channel *c, tick t)
{
    for (int r = 0; r < MC_NUM_REQ; r++) {
        req_stats *st = &c->rs[r];
        int state = mc_account_state(sim, c, r, t);
        if (state == st->state) continue;
        close_state(st, t);
        st->state = state;
    }
}

void mc_account_close(mc_sim *sim, channel *c, tick t)
{
    for (int r = 0; r < MC_NUM_REQ; r++) close_state(&c->rs[r], t);
    mc_account_slow(sim, c, t);
}

int mc_get_chan_stats(const mc_sim *sim, int requestor, int channel, mc_chan_stats *out)
{
    if (!sim || !out) return bad_arg(sim, "mc_get_chan_stats: NULL pointer");
    if (bad_index(sim, requestor, channel, 0))
        return bad_arg(sim, "mc_get_chan_stats: no such requestor or channel");
    const req_stats *st = &sim->ch[channel].rs[requestor];
    *out = st->s;
    out->bytes = (st->s.reads + st->s.writes) * (uint64_t)sim->cfg.request_bytes;
    if (requestor == MC_PIM && !sim->policy->partition_banks)
        out->bytes *= (uint64_t)sim->pim_scope_count; /* an all-bank command moves one burst per bank */
    uint64_t p99 = 0;
    mc_latency_percentile(sim, requestor, channel, 0.99, &p99);
    out->p99_latency = p99;
    return MC_OK;
}

int mc_latency_percentile(const mc_sim *sim, int requestor, int channel, double q, uint64_t *out)
{
    if (!sim || !out) return bad_arg(sim, "mc_latency_percentile: NULL pointer");
    if (bad_index(sim, requestor, channel, 1))
        return bad_arg(sim, "mc_latency_percentile: no such requestor or channel");
    if (!(q >= 0.0 && q <= 1.0)) return bad_arg(sim, "mc_latency_percentile: q outside 0..1");
    uint64_t total = 0;
    int lo = channel < 0 ? 0 : channel, hi = channel < 0 ? sim->nch : channel + 1;
    for (int c = lo; c < hi; c++) {
        const req_stats *st = &sim->ch[c].rs[requestor];
        total += st->s.reads + st->s.writes;
    }
    *out = 0;
    if (!total) return MC_OK;
    uint64_t target = (uint64_t)(q * (double)total);
    if (target >= total) target = total - 1;
    uint64_t seen = 0;
    for (size_t bin = 0; bin < HIST_BINS; bin++) {
        for (int c = lo; c < hi; c++) {
            const req_stats *st = &sim->ch[c].rs[requestor];
            if (bin < st->hist_len) seen += st->hist[bin];
        }
        if (seen > target) {
            *out = bin_value(bin);
            return MC_OK;
        }
    }
    return MC_OK;
}

int mc_get_summary(const mc_sim *sim, mc_summary *out)
{
    if (!sim || !out) return bad_arg(sim, "mc_get_summary: NULL pointer");
    out->cycles = (uint64_t)MAXT(sim->last_read_done, sim->last_write_accept);
    out->drain_cycles = (uint64_t)sim->last_done;
    out->requests = sim->requests;
    out->commands = sim->commands;
    out->refreshes = sim->refreshes;
    out->mode_switches = 0;
    out->epochs = 0;
    for (int c = 0; c < sim->nch; c++) {
        out->mode_switches += sim->ch[c].mode_switches;
        out->epochs += sim->ch[c].epochs;
    }
    /* (split: each side's records, the markers both sides read counted once) */
    out->records = sim->split ? sim->rings[0].hi + sim->rings[1].hi -
                                    MINT(sim->shared_fed[0], sim->shared_fed[1])
                              : sim->base;
    out->layers = sim->nlayers;
    return MC_OK;
}

int mc_mode_switches(const mc_sim *sim, int channel, uint64_t *out)
{
    if (!sim || !out) return bad_arg(sim, "mc_mode_switches: NULL pointer");
    if (channel < 0 || channel >= sim->nch) return bad_arg(sim, "mc_mode_switches: no such channel");
    *out = sim->ch[channel].mode_switches;
    return MC_OK;
}

uint64_t mc_completions_take(mc_sim *sim, uint64_t *index, uint64_t *cycle, uint64_t *issue,
                             uint64_t max)
{
    if (!sim || !index || !cycle || !issue) return 0;
    return mc_completions_take_arrival(sim, index, cycle, issue, NULL, max);
}

uint64_t mc_completions_take_arrival(mc_sim *sim, uint64_t *index, uint64_t *cycle,
                                     uint64_t *issue, uint64_t *arrival, uint64_t max)
{
    if (!sim || !index || !cycle || !issue) return 0;
    uint64_t n = sim->comp_len < max ? sim->comp_len : max;
    for (uint64_t i = 0; i < n; i++) {
        index[i] = sim->comp_index[i];
        cycle[i] = sim->comp_cycle[i];
        issue[i] = sim->comp_issue[i];
        if (arrival) arrival[i] = sim->comp_arrival[i];
    }
    for (uint64_t i = n; i < sim->comp_len; i++) {
        sim->comp_index[i - n] = sim->comp_index[i];
        sim->comp_cycle[i - n] = sim->comp_cycle[i];
        sim->comp_issue[i - n] = sim->comp_issue[i];
        sim->comp_arrival[i - n] = sim->comp_arrival[i];
    }
    sim->comp_len -= n;
    return n;
}

uint64_t mc_layer_count(const mc_sim *sim) { return sim ? sim->nlayers : 0; }

uint64_t mc_layer_ids(const mc_sim *sim, uint32_t *ids, uint64_t max)
{
    if (!sim || (!ids && max)) return 0;
    uint64_t n = sim->nlayers < max ? sim->nlayers : max;
    for (uint64_t k = 0; k < n; k++) ids[k] = sim->layers[k].id;
    return n;
}

int mc_layer_span(const mc_sim *sim, uint64_t layer, uint64_t *start, uint64_t *end,
                  uint64_t *requests)
{
    if (!sim || !start || !end || !requests) return bad_arg(sim, "mc_layer_span: NULL pointer");
    int64_t k = layer <= UINT32_MAX ? mc_layer_index(sim, (uint32_t)layer) : -1;
    if (k < 0) {
        *start = *end = *requests = 0;
        return MC_OK;
    }
    const layer_span *ls = &sim->layers[k];
    *start = ls->requests ? (uint64_t)ls->start : 0;
    *end = (uint64_t)ls->end;
    *requests = ls->requests;
    return MC_OK;
}

int mc_get_layer_stats(const mc_sim *sim, uint64_t layer, int requestor, mc_layer_stats *out)
{
    if (!sim || !out) return bad_arg(sim, "mc_get_layer_stats: NULL pointer");
    if (requestor < 0 || requestor >= MC_NUM_REQ)
        return bad_arg(sim, "mc_get_layer_stats: no such requestor");
    int64_t k = layer <= UINT32_MAX ? mc_layer_index(sim, (uint32_t)layer) : -1;
    if (k < 0) {
        memset(out, 0, sizeof *out);
        return MC_OK;
    }
    *out = sim->layers[k].by[requestor];
    return MC_OK;
}
