/* The simulation: building a controller from a config, and the event loop that advances
 * time straight to the next cycle in which the front end or some channel can act. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* The worst service of one request from a freshly refreshed rank, and the cycles between two
 * refreshes that block it (every rank's refresh blocks the PIM's all-bank commands): a part
 * must leave refresh at most half the time, and room for that service between refreshes, or
 * a request could wait forever (pimrt/memctl/config.py states the same rule). */
int64_t mc_refresh_service(const mc_config *k)
{
    int64_t s = (int64_t)k->tRP + MAXT(k->tRCDRD, k->tRCDWR) + k->tRC +
                MAXT((int64_t)k->CL, (int64_t)k->CWL + k->tWR) + k->burst + k->tFAW + k->tCCD_L +
                k->tCCD_S + k->tWTR_L + k->tWTR_S + k->tRTP + k->tRRD_L + k->tRRD_S + k->tRTRS;
    if (k->pim_enabled) s += 2 * (int64_t)k->mode_switch_cycles + k->pim_column_cycles;
    return s;
}

static int check_config(mc_sim *sim, const mc_config *k)
{
#define NEED(cond, ...) \
    do { if (!(cond)) return mc_set_error(sim, MC_ERR_CONFIG, __VA_ARGS__); } while (0)
    NEED(k->channels > 0 && k->pseudo_channels > 0, "channels and pseudo_channels must be > 0");
    NEED((int64_t)k->channels * k->pseudo_channels <= MC_MAX_CHANNELS,
         "at most %d channels x pseudo_channels", MC_MAX_CHANNELS);
    NEED(k->ranks <= 8, "at most 8 ranks per channel");
    NEED(k->ranks > 0 && k->bankgroups > 0 && k->banks_per_group > 0,
         "ranks, bankgroups and banks_per_group must be > 0");
    NEED((int64_t)k->ranks * k->bankgroups * k->banks_per_group <= MC_MAX_BANKS,
         "at most %d banks per channel (ranks x bankgroups x banks_per_group)", MC_MAX_BANKS);
    NEED(k->rows > 0 && k->columns > 0, "rows and columns must be > 0");
    NEED(k->request_bytes > 0 && k->request_bytes <= (1 << 20),
         "request_bytes must be in 1..%d", 1 << 20);
    NEED(k->burst > 0, "burst must be > 0");
    const int times[] = {k->CL, k->CWL, k->tRCDRD, k->tRCDWR, k->tRP, k->tRAS, k->tRC, k->tCCD_S,
                         k->tCCD_L, k->tRRD_S, k->tRRD_L, k->tFAW, k->tWR, k->tWTR_S, k->tWTR_L,
                         k->tRTP, k->tRTRS, k->tREFI, k->tRFC, k->mode_switch_cycles,
                         k->pim_column_cycles};
    for (size_t i = 0; i < sizeof times / sizeof times[0]; i++)
        NEED(times[i] >= 0, "timing parameters must be >= 0 (found %d)", times[i]);
    NEED(k->tRAS <= k->tRC, "tRAS (%d) > tRC (%d)", k->tRAS, k->tRC);
    NEED(k->tRCDRD > 0 && k->tRCDWR > 0 && k->tRP > 0 && k->tRAS > 0, "tRCD, tRP, tRAS must be > 0");
    NEED(k->CL > 0 && k->CWL >= 0, "CL must be > 0 and CWL >= 0");
    NEED((int64_t)k->CL + k->burst + k->tRTRS >= k->CWL, "CL + burst + tRTRS must be >= CWL");
    NEED(k->queue_depth > 0 && k->queue_depth <= MC_MAX_QUEUE, "queue_depth must be in 1..%d",
         MC_MAX_QUEUE);
    NEED(k->host_queue_depth >= 0 && k->host_queue_depth <= MC_MAX_QUEUE,
         "host_queue_depth must be in 0..%d", MC_MAX_QUEUE);
    NEED(k->bank_queue_depth >= 0 && k->bank_queue_depth <= MC_MAX_QUEUE,
         "bank_queue_depth must be in 0..%d", MC_MAX_QUEUE);
    NEED(k->row_hit_cap >= 0, "row_hit_cap must be >= 0");
    NEED(k->arbitration == MC_ARB_ROUND_ROBIN || k->arbitration == MC_ARB_COLUMN_FIRST,
         "arbitration must be %d (round_robin) or %d (column_first)", MC_ARB_ROUND_ROBIN,
         MC_ARB_COLUMN_FIRST);
    NEED(k->write_low >= 0 && k->write_low < k->write_high && k->write_high <= k->queue_depth,
         "need 0 <= write_low_watermark < write_high_watermark <= queue_depth");
    NEED(k->host_queue_depth == 0 || k->write_low < k->host_queue_depth,
         "write_low_watermark (%d) must be less than host_queue_depth (%d): a full write buffer "
         "at or below it never drains", k->write_low, k->host_queue_depth);
    NEED(k->issue_width > 0, "issue_width must be > 0");
    NEED(k->host_hwm >= 0 && k->pim_hwm >= 0, "high watermarks must be >= 0");
    NEED(k->host_lwm >= -1 && k->pim_lwm >= -1, "low watermarks must be >= -1");
    NEED(k->epoch_cap >= 0 && k->epoch_cap <= MC_MAX_CYCLE && k->min_epoch >= 0 &&
             k->min_epoch <= MC_MAX_CYCLE && k->host_epoch_cap >= 0 &&
             k->host_epoch_cap <= MC_MAX_CYCLE,
         "epoch_cap, host_epoch_cap and min_epoch must be in 0..%lld", (long long)MC_MAX_CYCLE);
    NEED(!k->refresh || (k->tREFI > 0 && k->tRFC > 0 && k->tRFC < k->tREFI),
         "refresh needs 0 < tRFC < tREFI");
    NEED(k->refresh >= 0 && k->refresh <= 2, "refresh must be 0 (none), 1 (per rank) or 2 "
         "(per bank), not %d", k->refresh);
    if (k->refresh == 2) { /* per bank: it blocks one bank (and with PIM units every all-bank
                            * command of the channel) tRFCb of every tREFI / banks */
        NEED(k->tRFCb > 0 && k->tRFCb < k->tRFC,
             "per-bank refresh needs 0 < tRFCb < tRFC (tRFCb %d, tRFC %d)", k->tRFCb, k->tRFC);
        const int64_t every = mc_refb_interval(k);
        NEED(every > 0, "per-bank refresh: tREFI (%d) is less than the %d banks of a rank",
             k->tREFI, k->bankgroups * k->banks_per_group);
        NEED(k->tRREFD >= 0 && k->tRREFD < every,
             "per-bank refresh needs 0 <= tRREFD < tREFI / banks (tRREFD %d, tREFI / banks "
             "%lld)", k->tRREFD, (long long)every);
        int64_t busy = k->pim_enabled ? (int64_t)k->ranks * k->tRFCb : k->tRFCb;
        int64_t span = k->pim_enabled ? every : k->tREFI;
        NEED(2 * busy <= span,
             "per-bank refresh takes %lld of every %lld cycles (%.1f%%) of %s; at most 50%% is "
             "allowed", (long long)busy, (long long)span, 100.0 * (double)busy / (double)span,
             k->pim_enabled ? "the PIM's all-bank commands (tRFCb x ranks per tREFI / banks)"
                            : "a bank (tRFCb per tREFI)");
        int64_t need = mc_refresh_service(k);
        NEED(need <= span - busy,
             "the %lld cycles between two per-bank refreshes that block a request are fewer "
             "than one request's longest service (%lld cycles)", (long long)(span - busy),
             (long long)need);
    } else if (k->refresh) {
        int64_t blocking = k->pim_enabled ? k->ranks : 1;
        NEED(2 * blocking * k->tRFC <= k->tREFI,
             "refresh takes %lld x tRFC = %lld of every tREFI = %d cycles (%.1f%%); at most 50%% "
             "is allowed", (long long)blocking, (long long)(blocking * k->tRFC), k->tREFI,
             100.0 * (double)(blocking * k->tRFC) / k->tREFI);
        int64_t window = k->tREFI / blocking - k->tRFC, need = mc_refresh_service(k);
        NEED(need <= window,
             "the %lld cycles between two refreshes (tREFI / %lld - tRFC) are fewer than one "
             "request's longest service (%lld cycles)", (long long)window, (long long)blocking,
             (long long)need);
    }
    NEED(k->map_count > 0 && k->map_count <= MC_F_COUNT, "address mapping has no fields");
    NEED(k->offset_bits >= 0 && k->offset_bits <= 20 && (1 << k->offset_bits) == k->request_bytes,
         "offset_bits (%d) must be log2(request_bytes %d)", k->offset_bits, k->request_bytes);
    const int counts[MC_F_COUNT] = {
        [MC_F_ROW] = k->rows, [MC_F_RANK] = k->ranks, [MC_F_BANKGROUP] = k->bankgroups,
        [MC_F_BANK] = k->banks_per_group, [MC_F_CHANNEL] = k->channels,
        [MC_F_PCH] = k->pseudo_channels, [MC_F_COLUMN] = k->columns};
    int bits = k->offset_bits;
    for (int i = 0; i < k->map_count; i++) {
        NEED(k->map_fields[i] >= 0 && k->map_fields[i] < MC_F_COUNT, "bad address field %d",
             k->map_fields[i]);
        NEED(k->map_bits[i] >= 0 && k->map_bits[i] <= 30, "bad address field width %d",
             k->map_bits[i]);
        NEED(k->map_radix[i] == 0 || k->map_radix[i] == counts[k->map_fields[i]],
             "address field %d has radix %d, not its count %d", k->map_fields[i],
             k->map_radix[i], counts[k->map_fields[i]]);
        const int radix = k->map_radix[i] ? k->map_radix[i] : 1 << k->map_bits[i];
        NEED(radix <= counts[k->map_fields[i]],
             "address field %d has %d bits: values up to %d, beyond its count %d",
             k->map_fields[i], k->map_bits[i], radix - 1, counts[k->map_fields[i]]);
        bits += k->map_radix[i] ? 64 - __builtin_clzll((uint64_t)radix - 1) : k->map_bits[i];
    }
    NEED(bits <= 62, "address mapping needs %d bits", bits);
    NEED(!k->pim_enabled || (k->pim_column_cycles > 0 && k->mode_switch_cycles >= 0),
         "pim_column_cycles must be > 0 and mode_switch_cycles >= 0");
    if (k->energy) { /* (pimrt's config.py names the key; this is the defence behind) */
        const double cur[] = {k->VDD, k->IDD0, k->IDD2N, k->IDD3N, k->IDD4R, k->IDD4W, k->IDD5AB,
                              k->tCK_ns, k->devices_per_rank};
        for (size_t i = 0; i < sizeof cur / sizeof cur[0]; i++)
            NEED(cur[i] > 0 && cur[i] < 1e9, "energy: VDD, the IDD currents, tCK_ns and "
                 "devices_per_rank must be positive and finite (found %g)", cur[i]);
        NEED(k->IDD3N >= k->IDD2N, "energy: IDD3N (%g) is below IDD2N (%g)", k->IDD3N, k->IDD2N);
        NEED(k->IDD4R >= k->IDD3N && k->IDD4W >= k->IDD3N && k->IDD5AB >= k->IDD3N,
             "energy: IDD4R, IDD4W and IDD5AB must be at least IDD3N");
        NEED(k->refresh != 2 || (k->IDD5B >= k->IDD3N && k->IDD5B < 1e9),
             "energy: per-bank refresh needs IDD5B at least IDD3N (IDD5B %g, IDD3N %g)",
             k->IDD5B, k->IDD3N);
        NEED(k->IDD0 * k->tRC >= k->IDD3N * k->tRAS + k->IDD2N * k->tRP,
             "energy: IDD0 x tRC must be at least IDD3N x tRAS + IDD2N x tRP (an ACT's energy "
             "would be negative)");
        NEED(k->pim_column_share >= 0 && k->pim_column_share <= 1,
             "energy: pim_column_share must be in 0..1 (found %g)", k->pim_column_share);
    }
    return MC_OK;
#undef NEED
}

/* the caller's error buffer: written only when it has room */
static void set_err(char *err, int errlen, const char *msg)
{
    if (err && errlen > 0) snprintf(err, (size_t)errlen, "%s", msg);
}

/* request slots per channel: the host's read queue, write buffer and the banks' command
 * queues; the PIM's two queues */
static int slot_count(const mc_sim *sim)
{
    return 2 * sim->host_qd + 2 * sim->cfg.queue_depth + sim->nbanks * sim->cfg.bank_queue_depth;
}

mc_sim *mc_new(const mc_config *cfg, char *err, int errlen)
{
    if (!cfg) {
        set_err(err, errlen, "no configuration (NULL)");
        return NULL;
    }
    mc_sim *sim = calloc(1, sizeof *sim);
    if (!sim) {
        set_err(err, errlen, "out of memory");
        return NULL;
    }
    sim->cfg = *cfg;
    sim->cfg.policy[sizeof sim->cfg.policy - 1] = 0;
    int rc = check_config(sim, cfg);
    if (!rc) {
        sim->policy = mc_find_policy(sim->cfg.policy);
        if (!sim->policy)
            rc = mc_set_error(sim, MC_ERR_CONFIG,
                              "unknown policy '%s' (serial, bank_partition, authority)",
                              sim->cfg.policy);
    }
    if (rc) { /* (nothing below may run on a config that failed its checks) */
        set_err(err, errlen, sim->err);
        free(sim);
        return NULL;
    }
    const mc_config *k = &sim->cfg;
    sim->nch = k->channels * k->pseudo_channels;
    sim->nbanks = k->ranks * k->bankgroups * k->banks_per_group;
    uint64_t all = sim->nbanks == 64 ? ~0ull : ((1ull << sim->nbanks) - 1);
    if (sim->policy->partition_banks) {
        if (!k->pim_enabled)
            rc = mc_set_error(sim, MC_ERR_CONFIG, "bank_partition needs a part with PIM units");
        sim->pim_scope = k->pim_bank_mask & all;
        sim->host_banks = all & ~sim->pim_scope;
        if (!rc && (!sim->pim_scope || !sim->host_banks))
            rc = mc_set_error(sim, MC_ERR_CONFIG,
                              "bank_partition: pim_bank_mask must leave banks to both sides");
    } else {
        sim->pim_scope = all;
        sim->host_banks = all;
    }
    if (rc) {
        set_err(err, errlen, sim->err);
        free(sim);
        return NULL;
    }
    sim->partition_banks = sim->policy->partition_banks;
    sim->pim_scope_count = __builtin_popcountll(sim->pim_scope);
    sim->scope_kept = k->pim_enabled ? sim->pim_scope : 0;
    for (int b = 0; b < sim->nbanks; b++) {
        sim->bank_rank[b] = (uint8_t)(b / (k->bankgroups * k->banks_per_group));
        sim->bank_group[b] = (uint16_t)(b / k->banks_per_group);
        sim->bank_bg[b] = (uint8_t)((b / k->banks_per_group) % k->bankgroups);
        sim->bank_ba[b] = (int8_t)(b % k->banks_per_group);
        sim->rank_banks[sim->bank_rank[b]] |= 1ull << b;
        if ((sim->host_banks >> b) & 1) sim->host_bank_list[sim->host_bank_count++] = b;
    }
    uint64_t cap = (uint64_t)k->request_bytes;
    for (int i = 0; i < k->map_count; i++)
        cap *= k->map_radix[i] ? (uint64_t)k->map_radix[i] : 1ull << k->map_bits[i];
    sim->capacity = cap;
    mc_address_init(sim);
    sim->host_qd = k->host_queue_depth > 0 ? k->host_queue_depth : k->queue_depth;
    sim->hwm[MC_HOST] = k->host_hwm > 0 ? k->host_hwm : (3 * sim->host_qd + 3) / 4;
    sim->hwm[MC_PIM] = k->pim_hwm > 0 ? k->pim_hwm : (3 * k->queue_depth + 3) / 4;
    sim->lwm[MC_HOST] = k->host_lwm != 0 ? k->host_lwm : sim->host_qd / 4;
    sim->lwm[MC_PIM] = k->pim_lwm != 0 ? k->pim_lwm : k->queue_depth / 4;
    sim->epoch_cap = k->epoch_cap > 0 ? k->epoch_cap : 2000;
    sim->min_epoch = k->min_epoch;
    sim->host_epoch_cap = k->host_epoch_cap;
    sim->fe_last_req = -1;
    sim->end = -1;
    sim->cursors = sim->policy->barrier_on_switch ? 1 : MC_NUM_REQ;
    sim->window = MC_DEFAULT_WINDOW;
    sim->fe_at = -1;
    for (int k = 0; k < MC_NUM_REQ; k++) {
        sim->cur[k].cycle = -1;
        sim->cur[k].layer = LAYER_ID0;
    }
    sim->ch = calloc((size_t)sim->nch, sizeof *sim->ch);
    if (sim->cfg.bank_queue_depth <= 0) sim->cfg.bank_queue_depth = k->queue_depth;
    int slots = slot_count(sim);
    int ok = sim->ch != NULL;
    for (int ci = 0; ok && ci < sim->nch; ci++) {
        channel *c = &sim->ch[ci];
        c->index = ci;
        c->log_channel = (uint8_t)(ci / k->pseudo_channels);
        c->log_pch = (uint8_t)(ci % k->pseudo_channels);
        c->groups = calloc((size_t)(k->ranks * k->bankgroups), sizeof *c->groups);
        c->ranks = calloc((size_t)k->ranks, sizeof *c->ranks);
        c->slots = calloc((size_t)slots, sizeof *c->slots);
        ok = ok && c->groups && c->ranks && c->slots;
        if (!ok) break;
        for (int s = 0; s < slots; s++) c->slots[s].next = s + 1 < slots ? s + 1 : -1;
        c->free_head = 0;
        for (int b = 0; b < MC_MAX_BANKS; b++) {
            bank *bk = &c->banks[b];
            bk->open_row = -1;
            bk->head[0] = bk->head[1] = bk->tail[0] = bk->tail[1] = -1;
            for (int d = 0; d < 2; d++) c->txq_head[d][b] = c->txq_tail[d][b] = -1;
        }
        for (int r = 0; r < k->ranks; r++) {
            for (int i = 0; i < 4; i++) c->ranks[r].faw[i] = -(tick)k->tFAW - 1;
            /* ranks refresh staggered over tREFI */
            c->ranks[r].refresh_due = (tick)k->tREFI * (r + 1) / k->ranks;
        }
        c->refresh_next = c->ranks[0].refresh_due; /* the earliest (staggered) */
        if (k->refresh == 2) mc_refb_init(sim, c);
        c->pim_head = c->pim_tail = -1;
        c->pim_row = -1;
        c->owner = MC_HOST;
        mc_stats_init_channel(sim, c);
    }
    if (!ok) {
        set_err(err, errlen, "out of memory");
        mc_free(sim);
        return NULL;
    }
    return sim;
}

/* a copy of n elements of `size` bytes at p (NULL if p is; *ok cleared out of memory) */
static void *dup(const void *p, size_t n, size_t size, int *ok)
{
    if (!p || !n) return NULL;
    void *q = malloc(n * size);
    if (!q) *ok = 0;
    else memcpy(q, p, n * size);
    return q;
}

mc_sim *mc_clone(const mc_sim *sim, char *err, int errlen)
{
    if (!sim) {
        set_err(err, errlen, "no simulation (NULL)");
        return NULL;
    }
    if (mc_failed(sim) || sim->finished) {
        set_err(err, errlen, mc_failed(sim) ? "the run failed: nothing to copy"
                                            : "the run is over (mc_finish): nothing to copy");
        return NULL;
    }
    mc_sim *c = malloc(sizeof *c);
    if (!c) {
        set_err(err, errlen, "out of memory");
        return NULL;
    }
    *c = *sim;
    /* nothing shared with sim: every buffer is copied below (those left NULL are freed by
     * mc_free if a copy fails half way) */
    c->ch = NULL;
    c->log = NULL;
    c->mode_cycle = NULL;
    c->mode_channel = NULL;
    c->mode_enter = NULL;
    c->comp_index = c->comp_cycle = c->comp_issue = c->comp_arrival = NULL;
    c->layers = NULL;
    c->events = NULL;
    c->pending_events = NULL;
    c->event_map.keys = c->layer_map.keys = NULL;
    c->event_map.vals = c->layer_map.vals = NULL;
    for (int k = 0; k < MC_NUM_REQ; k++) c->rings[k].rec = NULL;
    int ok = 1;
    c->ch = dup(sim->ch, (size_t)sim->nch, sizeof *sim->ch, &ok);
    for (int ci = 0; c->ch && ci < sim->nch; ci++) {
        channel *to = &c->ch[ci];
        to->groups = NULL;
        to->ranks = NULL;
        to->slots = NULL;
        for (int r = 0; r < MC_NUM_REQ; r++) to->rs[r].hist = NULL;
    }
    for (int ci = 0; ok && ci < sim->nch; ci++) {
        channel *to = &c->ch[ci];
        const channel *from = &sim->ch[ci];
        to->groups = dup(from->groups, (size_t)(sim->cfg.ranks * sim->cfg.bankgroups),
                         sizeof *from->groups, &ok);
        to->ranks = dup(from->ranks, (size_t)sim->cfg.ranks, sizeof *from->ranks, &ok);
        to->slots = dup(from->slots, (size_t)slot_count(sim), sizeof *from->slots, &ok);
        for (int r = 0; r < MC_NUM_REQ; r++)
            to->rs[r].hist = dup(from->rs[r].hist, from->rs[r].hist_len, sizeof(uint64_t), &ok);
    }
    if (!c->ch) { /* (mc_free walks ch for nch channels) */
        ok = 0;
        c->nch = 0;
    }
    c->log = dup(sim->log, sim->log_cap, sizeof *sim->log, &ok);
    c->mode_cycle = dup(sim->mode_cycle, sim->mode_cap, sizeof *sim->mode_cycle, &ok);
    c->mode_channel = dup(sim->mode_channel, sim->mode_cap, sizeof *sim->mode_channel, &ok);
    c->mode_enter = dup(sim->mode_enter, sim->mode_cap, sizeof *sim->mode_enter, &ok);
    c->comp_index = dup(sim->comp_index, sim->comp_cap, sizeof(uint64_t), &ok);
    c->comp_cycle = dup(sim->comp_cycle, sim->comp_cap, sizeof(uint64_t), &ok);
    c->comp_issue = dup(sim->comp_issue, sim->comp_cap, sizeof(uint64_t), &ok);
    c->comp_arrival = dup(sim->comp_arrival, sim->comp_cap, sizeof(uint64_t), &ok);
    c->layers = dup(sim->layers, sim->layers_cap, sizeof *sim->layers, &ok);
    c->events = dup(sim->events, sim->events_cap, sizeof *sim->events, &ok);
    c->pending_events = dup(sim->pending_events, sim->pending_cap, sizeof(uint64_t), &ok);
    c->event_map.keys = dup(sim->event_map.keys, sim->event_map.cap, sizeof(uint32_t), &ok);
    c->event_map.vals = dup(sim->event_map.vals, sim->event_map.cap, sizeof(uint64_t), &ok);
    c->layer_map.keys = dup(sim->layer_map.keys, sim->layer_map.cap, sizeof(uint32_t), &ok);
    c->layer_map.vals = dup(sim->layer_map.vals, sim->layer_map.cap, sizeof(uint64_t), &ok);
    for (int k = 0; ok && k < MC_NUM_REQ; k++)
        if (mc_ring_copy(sim, k, &c->rings[k])) {
            c->rings[k].rec = NULL;
            ok = 0;
        }
    if (!ok) {
        set_err(err, errlen, "out of memory");
        mc_free(c);
        return NULL;
    }
    return c;
}

void mc_free(mc_sim *sim)
{
    if (!sim) return;
    for (int ci = 0; sim->ch && ci < sim->nch; ci++) {
        channel *c = &sim->ch[ci];
        free(c->groups);
        free(c->ranks);
        free(c->slots);
        for (int r = 0; r < MC_NUM_REQ; r++) free(c->rs[r].hist);
    }
    free(sim->ch);
    free(sim->log);
    free(sim->mode_cycle);
    free(sim->mode_channel);
    free(sim->mode_enter);
    free(sim->comp_index);
    free(sim->comp_cycle);
    free(sim->comp_issue);
    free(sim->comp_arrival);
    free(sim->layers);
    free(sim->events);
    free(sim->pending_events);
    for (int k = 0; k < MC_NUM_REQ; k++) free(sim->rings[k].rec);
    idmap_free(&sim->event_map);
    idmap_free(&sim->layer_map);
    free(sim);
}

static int starved(const mc_sim *sim)
{
    for (int k = 0; k < sim->cursors; k++)
        if (mc_at_end(sim, k) && !mc_no_more(sim, k)) return 1;
    return 0;
}

static int all_offered(const mc_sim *sim)
{
    for (int k = 0; k < sim->cursors; k++)
        if (!mc_at_end(sim, k)) return 0;
    return 1;
}

static int cursor_due(const mc_sim *sim, tick t)
{
    for (int k = 0; k < sim->cursors; k++)
        if (sim->cur[k].next <= t) return 1;
    return 0;
}

/* a completing request can wake a cursor: one blocked on a full queue, or one at a barrier
 * (the front end waits for all outstanding work) */
static int wakeable(const mc_sim *sim)
{
    if (sim->fe_barrier) return 1;
    for (int k = 0; k < sim->cursors; k++)
        if (sim->cur[k].blocked) return 1;
    return 0;
}

/* the earliest cycle a cursor that has records left can act */
static tick frontend_next(const mc_sim *sim)
{
    tick next = NEVER;
    for (int k = 0; k < sim->cursors; k++)
        if (!mc_at_end(sim, k)) next = MINT(next, sim->cur[k].next);
    return next;
}

/* The host's stream has ended (every record handed in, the host's cursor past them all): a
 * channel asleep with a few writes below the low watermark must wake, since they drain once
 * nothing else may come (scheduler.c, update_drain). Without refresh nothing else would wake
 * it. Defined by the trace, not by when the caller hands the last records in, so the cycles
 * do not depend on the chunks or on the window. */
static void no_more_records(mc_sim *sim)
{
    sim->fe_done = 1;
    for (int ci = 0; ci < sim->nch; ci++) sim->ch[ci].next_event = MINT(sim->ch[ci].next_event, sim->now);
}

static void check_end(mc_sim *sim)
{
    if (mc_no_more(sim, 0) && !sim->fe_done && mc_at_end(sim, 0)) no_more_records(sim);
}

/* An idle gap crossed in one step: nothing is outstanding and the front end acts next at
 * `until`, so each idle channel would only refresh, every rank at its due cycle (its banks
 * closed well before: the previous refresh closed them, and refresh takes at most half of
 * tREFI). The refreshes due before until - 2 tREFI are accounted for at once, exactly as
 * simulating them would leave the channel (mc_skip_refreshes); the last ones are simulated.
 * A channel whose write buffer keeps a few writes nothing makes drain meanwhile counts as idle
 * (not while a mode switch ends at t: its step at t turns those writes' wait from blocked to
 * active in the cycle accounting).
 * Not with the command log on (it lists every refresh). A channel not idle in that sense (a
 * row open, a refresh pending, a switch under way) is simulated as before. */
static void skip_idle_refreshes(mc_sim *sim, tick t, tick until)
{
    const mc_config *k = &sim->cfg;
    const tick stop = until - 2 * (tick)k->tREFI;
    for (int ci = 0; ci < sim->nch; ci++) {
        channel *c = &sim->ch[ci];
        /* idle: nothing queued but a few host writes the write buffer keeps (at most its low
         * watermark, command queues empty, no reason to drain: update_drain leaves them) */
        const int w = c->txq_count[DIR_WR];
        if (c->refresh_next >= stop || c->refreshing || c->switching || c->open_mask ||
            c->pim_row >= 0 || c->mode_ready >= t || c->txq_count[DIR_RD] || c->pim_count ||
            c->qcount[MC_PIM][0] + c->qcount[MC_PIM][1] || c->qcount[MC_HOST][DIR_RD] ||
            c->qcount[MC_HOST][DIR_WR] != w || c->pending_mask[0] | c->pending_mask[1] ||
            c->drain_left > 0 || w > k->write_low || w >= k->write_high ||
            MAXT(c->next_row, c->next_col) > c->refresh_next)
            continue;
        if (k->refresh == 2) { /* per bank (refresh.c) */
            if (!mc_refb_skip_ok(sim, c, t)) continue;
            uint64_t n = mc_refb_skip(sim, c, stop);
            sim->refreshes += n;
            sim->commands += n;
            c->scan_valid = 0;
            c->stuck_rounds = 0;
            c->next_event = MAXT(t, c->refresh_next);
            continue;
        }
        int ok = 1;
        for (int r = 0; ok && r < k->ranks; r++) { /* due dates apart, banks closed by then */
            const rank_state *rk = &c->ranks[r];
            if (rk->refresh_due <= t || rk->refresh_pending) ok = 0;
            for (int q = 0; ok && q < k->ranks; q++)
                if (q != r && c->ranks[q].refresh_due % k->tREFI == rk->refresh_due % k->tREFI)
                    ok = 0;
            for (int b = 0; ok && b < sim->nbanks; b++)
                if (sim->bank_rank[b] == r && c->banks[b].closed_at > rk->refresh_due) ok = 0;
        }
        if (!ok) continue;
        uint64_t skipped = 0;
        for (int r = 0; r < k->ranks; r++) {
            tick due = c->ranks[r].refresh_due;
            if (due >= stop) continue;
            uint64_t n = (uint64_t)((stop - 1 - due) / k->tREFI) + 1; /* dues below stop */
            mc_skip_refreshes(sim, c, r, n);
            skipped += n;
        }
        sim->refreshes += skipped;
        sim->commands += skipped;
        c->scan_valid = 0;
        c->stuck_rounds = 0;
        c->next_event = MAXT(t, c->refresh_next);
    }
}

/* Advance until a cursor needs more records and may take them (mc_feed_room; recs set) or
 * all work is done (recs 0). */
static int run(mc_sim *sim, int recs)
{
    int moved = 1; /* a cursor may have moved: whether they all ran out can have changed */
    for (;;) {
        tick t = sim->now;
        if (recs) {
            if (cursor_due(sim, t)) { /* (only the front end moves cursors) */
                int rc = mc_frontend_step(sim, t);
                if (rc) return rc;
                moved = 1;
                check_end(sim);
            }
            if (moved && (sim->fe_end ? all_offered(sim)
                                      : starved(sim) && (sim->split || mc_feed_room(sim))))
                return MC_OK;
            moved = 0;
        }
        tick next = recs ? frontend_next(sim) : NEVER;
        /* (outstanding requests, if any, can only be writes kept in a write buffer: nothing
         * may make them drain before the front end acts, skip_idle_refreshes checks the rest) */
        /* with the command log on an idle gap is simulated refresh by refresh, each logged:
         * a gap of more than MC_LOG_GAP_REFRESHES refresh intervals is refused, not a hang */
        if (recs && sim->cfg.refresh && sim->log_on && next < NEVER &&
            (next - t) / (tick)sim->cfg.tREFI > MC_LOG_GAP_REFRESHES)
            return mc_set_error(sim, MC_ERR_TRACE,
                                "the trace's next record acts at cycle %lld, %lld cycles after "
                                "cycle %lld: with the command log on every refresh in that idle "
                                "gap (%lld a rank) is simulated and logged, and more than %d is "
                                "refused; run without the command log or shorten the gap",
                                (long long)next, (long long)(next - t), (long long)t,
                                (long long)((next - t) / (tick)sim->cfg.tREFI),
                                MC_LOG_GAP_REFRESHES);
        if (recs && sim->cfg.refresh && !sim->log_on && next < NEVER &&
            next - t > 4 * (tick)sim->cfg.tREFI &&
            (sim->outstanding == 0 || (!sim->fe_done && !sim->fe_barrier && !sim->npending)))
            skip_idle_refreshes(sim, t, next);
        if (recs && next >= NEVER && !sim->npending && (sim->outstanding == 0 || !wakeable(sim))) {
            /* every cursor waits and no work is left that could wake one (requests still
             * outstanding wake only a cursor blocked on a full queue or one at a barrier:
             * writes a write buffer keeps do not make an event fire) */
            for (int k = 0; k < sim->cursors; k++)
                if (sim->cur[k].waiting)
                    return mc_set_error(sim, MC_ERR_TRACE,
                                        "record %llu: WAIT for event %u, which nothing signals "
                                        "before it", (unsigned long long)sim->cur[k].pos,
                                        mc_ring_of(sim, k)->rec[sim->cur[k].pos &
                                                                mc_ring_of(sim, k)->mask].value);
        }
        /* the channels due at t, stepped in order (a step changes only its own channel's
         * next_event); found and then folded into next without a branch per channel */
        uint64_t due = 0;
        for (int ci = 0; ci < sim->nch; ci++)
            due |= (uint64_t)(sim->ch[ci].next_event <= t) << ci;
        while (due) {
            const int ci = __builtin_ctzll(due);
            due &= due - 1;
            mc_channel_step(sim, &sim->ch[ci], t);
        }
        for (int ci = 0; ci < sim->nch; ci++) next = mc_min_branchless(next, sim->ch[ci].next_event);
        if (mc_failed(sim)) return sim->err_code;
        if (next >= NEVER) {
            if (!recs) {
                if (sim->outstanding)
                    return mc_set_error(sim, MC_ERR_STATE,
                                        "internal error: %llu requests can never be served",
                                        (unsigned long long)sim->outstanding);
                return MC_OK;
            }
            return mc_set_error(sim, MC_ERR_STATE,
                                "internal error: the front end is stuck at cycle %lld",
                                (long long)t);
        }
        if (!recs && sim->outstanding == 0) return MC_OK; /* only refresh left */
        sim->now = MAXT(next, t + 1);
        if (sim->paused) {
            sim->paused = 0;
            return MC_PAUSED;
        }
    }
}


/* (a compare per record, each handed in once: cheap beside simulating it) */
static int check_cycles(mc_sim *sim, const mc_record *recs, uint64_t n, uint64_t first)
{
    for (uint64_t i = 0; i < n; i++)
        if ((recs[i].op == MC_READ || recs[i].op == MC_WRITE) && recs[i].cycle > (uint64_t)MC_MAX_CYCLE)
            return mc_set_error(sim, MC_ERR_TRACE,
                                "record %llu: arrival cycle %llu is beyond the latest the "
                                "simulator represents (2^60 = %lld)", (unsigned long long)(first + i),
                                (unsigned long long)recs[i].cycle, (long long)MC_MAX_CYCLE);
    return MC_OK;
}

int mc_feed(mc_sim *sim, const mc_record *recs, uint64_t n, int last, uint64_t *consumed)
{
    if (!sim) return MC_ERR_ARG;
    if (!consumed || (!recs && n > 0))
        return mc_set_error(sim, MC_ERR_ARG, "mc_feed: NULL %s", consumed ? "records" : "consumed");
    *consumed = 0;
    if (mc_failed(sim)) return MC_ERR_STATE;
    if (sim->finished)
        return mc_set_error(sim, MC_ERR_ARG, "mc_feed after mc_finish: the run is over");
    /* once a call with last set has taken every record, the cursors stop at the end of the
     * records (their next cycle is "never"): more records would never be read, and the run
     * would turn on refreshes for ever. An empty call (a resume after MC_PAUSED) is fine. */
    if (sim->fe_end && n > 0)
        return mc_set_error(sim, MC_ERR_ARG,
                            "mc_feed: %llu records offered after the last records (an earlier "
                            "call with last set took them all); call mc_finish",
                            (unsigned long long)n);
    if (sim->split)
        return mc_set_error(sim, MC_ERR_ARG, "mc_feed: this run is fed by side (mc_feed_side)");
    int bad = check_cycles(sim, recs, n, sim->rings[0].hi);
    if (bad) return bad;
    for (;;) {
        uint64_t take = MINT(n - *consumed, mc_feed_room(sim));
        if (take) {
            int rc = mc_ring_push(sim, 0, recs + *consumed, take);
            if (rc) return rc;
            *consumed += take;
        }
        sim->fe_end = sim->fe_end || (*consumed == n && last);
        check_end(sim);
        for (int k = 0; k < sim->cursors; k++) /* new records: wake cursors that ran out */
            if (sim->cur[k].next < sim->now) sim->cur[k].next = sim->now;
        int rc = run(sim, 1);
        sim->base = mc_lowest_cursor(sim);
        if (rc != MC_OK || *consumed == n) return rc;
    }
}

/* the arguments of mc_feed_side, and whether this run may be fed by side */
static int side_feed_ok(mc_sim *sim, int side, const mc_record *recs, uint64_t n,
                        uint64_t *consumed)
{
    if (!consumed || (!recs && n > 0))
        return mc_set_error(sim, MC_ERR_ARG, "mc_feed_side: NULL %s", consumed ? "records" : "consumed");
    *consumed = 0;
    if (mc_failed(sim)) return MC_ERR_STATE;
    if (sim->finished)
        return mc_set_error(sim, MC_ERR_ARG, "mc_feed_side after mc_finish: the run is over");
    if (side != MC_HOST && side != MC_PIM)
        return mc_set_error(sim, MC_ERR_ARG, "mc_feed_side: no side %d (0 host, 1 PIM)", side);
    if (sim->cursors != MC_NUM_REQ)
        return mc_set_error(sim, MC_ERR_ARG, "mc_feed_side: the %s policy reads one stream "
                            "for both sides (mc_feed)", sim->cfg.policy);
    if (!sim->split && sim->rings[0].hi)
        return mc_set_error(sim, MC_ERR_ARG, "mc_feed_side: this run is fed one stream (mc_feed)");
    if (sim->side_end[side] && n > 0)
        return mc_set_error(sim, MC_ERR_ARG, "mc_feed_side: %llu records offered after side %d's "
                            "last records", (unsigned long long)n, side);
    return MC_OK;
}

int mc_feed_side(mc_sim *sim, int side, const mc_record *recs, uint64_t n, int last,
                 uint64_t *consumed)
{
    if (!sim) return MC_ERR_ARG;
    int rc = side_feed_ok(sim, side, recs, n, consumed);
    if (rc) return rc;
    const uint64_t first = sim->rings[side].hi;
    rc = check_cycles(sim, recs, n, first);
    if (rc) return rc;
    uint64_t shared = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (recs[i].op == MC_BARRIER) /* (a cursor a barrier lets through lingers a cycle
                                       * before the other side's records in one stream) */
            return mc_set_error(sim, MC_ERR_TRACE, "side %d's record %llu: a BARRIER (a run "
                                "with barriers is fed one stream, mc_feed)", side,
                                (unsigned long long)(first + i));
        if (mc_shared_op(recs[i].op)) shared++;
        else if (recs[i].requestor != side)
            return mc_set_error(sim, MC_ERR_TRACE, "side %d's record %llu: requestor %u (its "
                                "side's records only, and the markers both sides read)", side,
                                (unsigned long long)(first + i), (unsigned)recs[i].requestor);
    }
    sim->split = 1;
    if (n) {
        rc = mc_ring_push(sim, side, recs, n);
        if (rc) return rc;
    }
    *consumed = n;
    sim->shared_fed[side] += shared;
    sim->side_end[side] = sim->side_end[side] || last;
    sim->fe_end = sim->side_end[MC_HOST] && sim->side_end[MC_PIM];
    check_end(sim);
    for (int k = 0; k < sim->cursors; k++) /* new records: wake cursors that ran out */
        if (sim->cur[k].next < sim->now) sim->cur[k].next = sim->now;
    return run(sim, 1);
}

unsigned mc_hungry(const mc_sim *sim)
{
    unsigned out = 0;
    if (!sim || !sim->split) return 0;
    for (int k = 0; k < sim->cursors; k++)
        if (mc_at_end(sim, k) && !sim->side_end[k]) out |= 1u << k;
    return out;
}

int mc_cursor_count(const mc_sim *sim) { return sim ? sim->cursors : 0; }

int mc_finish(mc_sim *sim)
{
    if (!sim) return MC_ERR_ARG;
    if (mc_failed(sim)) return MC_ERR_STATE;
    sim->finished = 1;
    sim->fe_end = 1;
    sim->side_end[MC_HOST] = sim->side_end[MC_PIM] = 1;
    if (!sim->fe_done) no_more_records(sim);
    int rc = run(sim, 0);
    if (rc == MC_OK) { /* close the cycle accounting at the end of the run */
        tick end = MAXT(sim->last_done, sim->now);
        for (int ci = 0; ci < sim->nch; ci++) mc_account_close(sim, &sim->ch[ci], end);
        sim->end = end; /* the energy's window (energy.c) */
        for (int k = 0; k < MC_NUM_REQ; k++) { /* no record is read again */
            free(sim->rings[k].rec);
            sim->rings[k].rec = NULL;
        }
    }
    return rc;
}
