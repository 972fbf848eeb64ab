/* The optional command log: every DRAM command the controller issues. */
#include <stdlib.h>

#include "internal.h"

void mc_log_cmd_slow(mc_sim *sim, const channel *c, int b, int cmd, int by, int32_t row,
                     int32_t col, tick t)
{
    if (cmd == MC_CMD_PIM_ENTER || cmd == MC_CMD_PIM_EXIT) {
        if (sim->mode_len == sim->mode_cap) {
            uint64_t cap = sim->mode_cap ? sim->mode_cap * 2 : 1024;
            uint64_t *a = realloc(sim->mode_cycle, cap * sizeof *a);
            if (a) sim->mode_cycle = a;
            uint32_t *b = realloc(sim->mode_channel, cap * sizeof *b);
            if (b) sim->mode_channel = b;
            uint8_t *d = realloc(sim->mode_enter, cap);
            if (d) sim->mode_enter = d;
            if (!a || !b || !d) {
                mc_set_error(sim, MC_ERR_MEMORY, "out of memory growing the mode log");
                return;
            }
            sim->mode_cap = cap;
        }
        sim->mode_cycle[sim->mode_len] = (uint64_t)t;
        sim->mode_channel[sim->mode_len] = (uint32_t)c->index;
        sim->mode_enter[sim->mode_len++] = cmd == MC_CMD_PIM_ENTER;
    }
    if (!sim->log_on) return;
    if (sim->log_len == sim->log_cap) {
        uint64_t cap = sim->log_cap ? sim->log_cap * 2 : 4096;
        mc_cmd *p = realloc(sim->log, cap * sizeof *p);
        if (!p) {
            sim->log_on = 0; /* out of memory: stop logging, report at the next pause */
            mc_set_error(sim, MC_ERR_MEMORY, "out of memory growing the command log");
            return;
        }
        sim->log = p;
        sim->log_cap = cap;
    }
    mc_cmd *e = &sim->log[sim->log_len++];
    e->cycle = (uint64_t)t;
    e->channel = c->log_channel;
    e->pseudo_channel = c->log_pch;
    if (b >= 0) {
        e->rank = sim->bank_rank[b];
        e->bankgroup = sim->bank_bg[b];
        e->bank = sim->bank_ba[b];
    } else {
        e->rank = (uint8_t)(b == -1 ? 0 : -b - 2); /* REF passes -(rank + 2) */
        e->bankgroup = 0xff;
        e->bank = -1;
    }
    e->row = row;
    e->column = col;
    e->command = (uint8_t)cmd;
    e->requestor = (uint8_t)by;
    e->pad = 0;
    if (sim->log_len >= sim->log_limit) sim->paused = 1;
}

void mc_cmdlog_enable(mc_sim *sim, uint64_t limit)
{
    if (!sim) return;
    sim->log_on = 1;
    sim->log_limit = limit ? limit : (1ull << 20);
}

uint64_t mc_cmdlog_take(mc_sim *sim, mc_cmd *out, uint64_t max)
{
    if (!sim || !out) return 0;
    uint64_t n = sim->log_len < max ? sim->log_len : max;
    for (uint64_t i = 0; i < n; i++) out[i] = sim->log[i];
    for (uint64_t i = n; i < sim->log_len; i++) sim->log[i - n] = sim->log[i];
    sim->log_len -= n;
    return n;
}

uint64_t mc_modelog_take(mc_sim *sim, uint64_t *cycle, uint32_t *channel, uint8_t *enter,
                         uint64_t max)
{
    if (!sim || !cycle || !channel || !enter) return 0;
    uint64_t n = sim->mode_len < max ? sim->mode_len : max;
    for (uint64_t i = 0; i < n; i++) {
        cycle[i] = sim->mode_cycle[i];
        channel[i] = sim->mode_channel[i];
        enter[i] = sim->mode_enter[i];
    }
    for (uint64_t i = n; i < sim->mode_len; i++) {
        sim->mode_cycle[i - n] = sim->mode_cycle[i];
        sim->mode_channel[i - n] = sim->mode_channel[i];
        sim->mode_enter[i - n] = sim->mode_enter[i];
    }
    sim->mode_len -= n;
    return n;
}
