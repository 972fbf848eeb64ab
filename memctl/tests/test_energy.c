/* C tests of memctl's DRAM energy (energy.c), built and run by `make check` (and `make
 * sanitize`): the energy of a run equals the sum over its commands (from the command log) of
 * their increments plus the background of the banks' open / closed spans; a trace repeated
 * after an idle stretch costs twice its energy plus that stretch's background and refreshes;
 * idle gaps (crossed in one step without the command log) add only background and refresh;
 * components are non-negative and add up to the total. Prints "N passed, N failed". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../memctl.h"
#include "testing.h"

#define CLOSE(a, b) (fabs((a) - (b)) <= 1e-9 * (fabs(a) + fabs(b)) + 1e-6)

/* DRAMsim3's HBM2_8Gb_x128 with its currents (hbm2.toml), tCK 1.25 ns so that tCK counts */
static mc_config part(const char *policy, int closed_page, int refresh)
{
    mc_config k = hbm2_base(policy);
    k.refresh = refresh; k.closed_page = closed_page;
    k.energy = 1; k.tCK_ns = 1.25; k.VDD = 1.2; k.IDD0 = 65; k.IDD2N = 40; k.IDD3N = 55;
    k.IDD4R = 390; k.IDD4W = 500; k.IDD5AB = 250; k.devices_per_rank = 1;
    k.pim_column_share = 0.6;
    return k;
}

/* n requests (host, or every other block of 64 PIM), random addresses, one every 3 cycles
 * from cycle `start` */
static void fill(mc_record *r, int n, uint64_t start, int with_pim, unsigned seed)
{
    unsigned s = seed;
    for (int i = 0; i < n; i++) {
        s = s * 1103515245u + 12345u;
        memset(&r[i], 0, sizeof r[i]);
        r[i].cycle = start + (uint64_t)(i / 3);
        r[i].requestor = with_pim && (i / 64) % 2 ? MC_PIM : MC_HOST;
        r[i].op = (s >> 16) % 4 == 0 ? MC_WRITE : MC_READ;
        r[i].addr = ((uint64_t)(s >> 8) % (1u << 20)) * 64;
    }
}

typedef struct run_out {
    mc_energy e;
    mc_energy per[8];     /* per channel */
    mc_cmd *log;
    uint64_t nlog;
    int ok;
} run_out;

static run_out run(mc_config k, const mc_record *r, int n, int log)
{
    run_out o;
    memset(&o, 0, sizeof o);
    char err[256];
    mc_sim *sim = mc_new(&k, err, sizeof err);
    CHECK(sim != NULL, "mc_new: %s", err);
    if (!sim) return o;
    uint64_t cap = 1u << 22, done = 0, consumed = 0;
    if (log) {
        mc_cmdlog_enable(sim, cap);
        o.log = malloc(cap * sizeof *o.log);
    }
    int rc = MC_PAUSED;
    while (rc == MC_PAUSED) {
        rc = mc_feed(sim, r + done, (uint64_t)n - done, 1, &consumed);
        done += consumed;
        if (log) o.nlog += mc_cmdlog_take(sim, o.log + o.nlog, cap - o.nlog);
    }
    if (rc == MC_OK) rc = mc_finish(sim);
    if (log) o.nlog += mc_cmdlog_take(sim, o.log + o.nlog, cap - o.nlog);
    CHECK(rc == MC_OK, "run: rc %d: %s", rc, mc_error(sim));
    o.ok = rc == MC_OK && mc_get_energy(sim, -1, -1, &o.e) == MC_OK;
    for (int c = 0; c < 8; c++) o.ok = o.ok && mc_get_energy(sim, c, 0, &o.per[c]) == MC_OK;
    mc_free(sim);
    return o;
}

static void check_parts(const mc_energy *e, const char *what)
{
    const double p[] = {e->act_pj, e->read_pj, e->write_pj, e->refresh_pj, e->pim_act_pj,
                        e->pim_read_pj, e->pim_write_pj, e->active_standby_pj,
                        e->precharged_standby_pj, e->refresh_bank_pj};
    double sum = 0;
    int neg = 0;
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) {
        neg += p[i] < 0;
        sum += p[i];
    }
    CHECK(!neg, "%s: a negative component", what);
    CHECK(CLOSE(sum, e->total_pj), "%s: components add up to %.3f, total %.3f", what, sum,
          e->total_pj);
}

/* the increments of docs/energy.md, from the config alone */
typedef struct incs { double act, rd, wr, ref, pim_rd, pim_wr, act_stb, pre_stb; } incs;
static incs increments(const mc_config *k)
{
    const double s = k->VDD * k->tCK_ns * k->devices_per_rank;
    incs i = {
        .act = s * (k->IDD0 * k->tRC - (k->IDD3N * k->tRAS + k->IDD2N * k->tRP)),
        .rd = s * (k->IDD4R - k->IDD3N) * k->burst, .wr = s * (k->IDD4W - k->IDD3N) * k->burst,
        .ref = s * (k->IDD5AB - k->IDD3N) * k->tRFC, .act_stb = s * k->IDD3N,
        .pre_stb = s * k->IDD2N};
    i.pim_rd = i.rd * k->pim_column_share;
    i.pim_wr = i.wr * k->pim_column_share;
    return i;
}

/* the energy replayed from the command log: each command's increment (all-bank ones once per
 * bank of the scope), and per channel the cycles some bank was open */
static double replay(const mc_config *k, const run_out *o, uint64_t scope)
{
    const int scope_banks = __builtin_popcountll(scope);
    const incs in = increments(k);
    double pj = 0;
    int open[8][64];
    int nopen[8] = {0};
    uint64_t since[8] = {0}, active[8] = {0};
    memset(open, 0, sizeof open);
    const int nb = k->bankgroups * k->banks_per_group;
    for (uint64_t i = 0; i < o->nlog; i++) {
        const mc_cmd *c = &o->log[i];
        const int ch = c->channel;
        int lo = 0, hi = 0; /* banks the command opens (1) or closes (-1) */
        int change = 0;
        switch (c->command) {
        case MC_CMD_ACT: pj += in.act; change = 1; lo = hi = c->bankgroup * k->banks_per_group + c->bank; break;
        case MC_CMD_RD: pj += in.rd; break;
        case MC_CMD_WR: pj += in.wr; break;
        case MC_CMD_REF: pj += in.ref; break;
        case MC_CMD_PIM_ACT: pj += in.act * scope_banks; change = 1; lo = 0; hi = nb - 1; break;
        case MC_CMD_PIM_RD: pj += in.pim_rd * scope_banks; break;
        case MC_CMD_PIM_WR: pj += in.pim_wr * scope_banks; break;
        case MC_CMD_PIM_PRE: change = -1; lo = 0; hi = nb - 1; break;
        case MC_CMD_PRE:
            change = -1;
            if (c->bank < 0) { lo = 0; hi = nb - 1; }
            else lo = hi = c->bankgroup * k->banks_per_group + c->bank;
            break;
        default: break;
        }
        const int all_bank = c->command == MC_CMD_PIM_ACT || c->command == MC_CMD_PIM_PRE;
        for (int b = lo; change && b <= hi; b++) {
            if (all_bank && !((scope >> b) & 1)) continue;
            if (change > 0 && !open[ch][b]) {
                if (nopen[ch]++ == 0) since[ch] = c->cycle;
                open[ch][b] = 1;
            } else if (change < 0 && open[ch][b]) {
                if (--nopen[ch] == 0) active[ch] += c->cycle - since[ch];
                open[ch][b] = 0;
            }
        }
    }
    const uint64_t end = o->e.cycles;
    for (int ch = 0; ch < 8; ch++) {
        if (nopen[ch]) active[ch] += end - since[ch];
        pj += in.act_stb * (double)active[ch] + in.pre_stb * (double)(end - active[ch]);
    }
    return pj;
}

/* one read, no refresh: ACT + RD, the bank open from the ACT to the end (open page) */
static void one_read_by_hand(void)
{
    mc_config k = part("serial", 0, 0);
    mc_record r;
    fill(&r, 1, 0, 0, 1);
    r.op = MC_READ;
    run_out o = run(k, &r, 1, 1);
    if (!o.ok) return;
    uint64_t act = UINT64_MAX;
    for (uint64_t i = 0; i < o.nlog; i++)
        if (o.log[i].command == MC_CMD_ACT) act = o.log[i].cycle;
    CHECK(o.nlog == 2 && act != UINT64_MAX, "one read: %llu commands", (unsigned long long)o.nlog);
    const incs in = increments(&k);
    const double end = (double)o.e.cycles;
    /* 1.2 V x (65 x 48 - 55 x 34 - 40 x 14) mA x 1.25 ns = 1035 pJ; RD 1.2 x 335 x 2 x 1.25 */
    CHECK(CLOSE(in.act, 1035.0) && CLOSE(in.rd, 1005.0), "increments %.3f %.3f", in.act, in.rd);
    const double want = in.act + in.rd + in.act_stb * (end - (double)act) +
                        in.pre_stb * ((double)act + 7 * end);
    CHECK(CLOSE(o.e.total_pj, want), "one read: %.3f pJ, by hand %.3f", o.e.total_pj, want);
    CHECK(o.e.acts == 1 && o.e.reads == 1 && o.e.active_cycles == o.e.cycles - act,
          "one read: counts");
    check_parts(&o.e, "one read");
    free(o.log);
}

static void matches_command_log(void)
{
    const char *pol[] = {"serial", "authority", "bank_partition"};
    for (int p = 0; p < 3; p++)
        for (int closed = 0; closed < 2; closed++) {
            mc_config k = part(pol[p], closed, 1);
            int n = 6000;
            mc_record *r = malloc((size_t)n * sizeof *r);
            fill(r, n, 0, 1, 11u + (unsigned)p);
            run_out o = run(k, r, n, 1);
            if (o.ok) {
                uint64_t scope = p == 2 ? k.pim_bank_mask : 0xFFFF;
                double want = replay(&k, &o, scope);
                CHECK(CLOSE(o.e.total_pj, want), "%s closed %d: %.3f pJ, from the log %.3f",
                      pol[p], closed, o.e.total_pj, want);
                check_parts(&o.e, pol[p]);
                double sum = 0;
                for (int c = 0; c < 8; c++) sum += o.per[c].total_pj;
                CHECK(CLOSE(sum, o.e.total_pj), "%s: channels add up to %.3f of %.3f", pol[p],
                      sum, o.e.total_pj);
                CHECK(o.e.pim_reads + o.e.pim_writes > 0 && o.e.pim_acts > 0,
                      "%s: PIM commands counted", pol[p]);
            }
            free(o.log);
            free(r);
        }
}

/* T, then T again L cycles later (L a multiple of tREFI past T's end; a barrier between drains
 * the writes the buffer keeps, as the end of the trace does): twice T's commands and energy plus
 * the idle stretch's precharged standby and refreshes. Exact but for the closing tail: T's run
 * ends when its last request completes, while a bank's closing PRE may come up to
 * CWL + burst + tWR cycles later (active standby the repeated run counts and T's does not); with
 * refresh, the second copy meets a refresh due at its first cycle (T's first is due at tREFI),
 * so within 1% */
static void repeated_trace_is_linear(void)
{
    for (int refresh = 0; refresh < 2; refresh++) {
        mc_config k = part("serial", 1, refresh);
        int n = 3000;
        mc_record *r = malloc((2 * (size_t)n + 1) * sizeof *r);
        fill(r, n, 0, 0, 5);
        run_out a = run(k, r, n, 0);
        uint64_t L = (a.e.cycles / 3900 + 3) * 3900;
        memset(&r[n], 0, sizeof r[n]);
        r[n].op = MC_BARRIER;
        fill(r + n + 1, n, L, 0, 5);
        run_out b = run(k, r, 2 * n + 1, 0);
        if (!a.ok || !b.ok) continue;
        const incs in = increments(&k);
        const uint64_t tail = 8ull * (uint64_t)(k.CWL + k.burst + k.tWR);
        uint64_t gap = L - a.e.cycles; /* the stretch after the first copy's end */
        uint64_t gap_refs = b.e.refreshes - 2 * a.e.refreshes;
        double want = 2 * a.e.total_pj + in.pre_stb * 8.0 * (double)gap + in.ref * (double)gap_refs;
        CHECK(b.e.reads == 2 * a.e.reads && b.e.writes == 2 * a.e.writes,
              "repeat: reads and writes double");
        if (!refresh) {
            CHECK(b.e.cycles == L + a.e.cycles && b.e.acts == 2 * a.e.acts && gap_refs == 0,
                  "repeat: %llu cycles (want %llu), %llu ACTs (twice %llu)",
                  (unsigned long long)b.e.cycles, (unsigned long long)(L + a.e.cycles),
                  (unsigned long long)b.e.acts, (unsigned long long)a.e.acts);
            uint64_t extra = b.e.active_cycles - 2 * a.e.active_cycles;
            CHECK(b.e.active_cycles >= 2 * a.e.active_cycles && extra <= tail,
                  "repeat: %llu active cycles beyond twice T's (the tail allows %llu)",
                  (unsigned long long)extra, (unsigned long long)tail);
            double tail_pj = (in.act_stb - in.pre_stb) * (double)extra;
            CHECK(CLOSE(b.e.total_pj, want + tail_pj), "repeat: %.3f pJ, want %.3f",
                  b.e.total_pj, want + tail_pj);
        } else {
            CHECK(fabs(b.e.total_pj / want - 1) < 0.01 && gap_refs > 0 &&
                  gap_refs <= 8 * (gap / 3900 + 2),
                  "repeat with refresh: %.3f pJ, want %.3f; %llu refreshes in the gap",
                  b.e.total_pj, want, (unsigned long long)gap_refs);
        }
        check_parts(&b.e, "repeat");
        free(r);
    }
}

/* an idle gap of G = 1000 tREFI before the last third of the trace (after a barrier) adds
 * G precharged cycles and G / tREFI refreshes a channel and nothing else (but a closing tail
 * and an ACT or so a channel where a refresh falls differently): within 0.1% of that; and it
 * costs the same whether crossed in one step (no command log) or simulated (log on) */
static void idle_gap_adds_background_and_refresh(void)
{
    for (int refresh = 0; refresh < 2; refresh++) {
        mc_config k = part("serial", 1, refresh);
        int n = 3000;
        mc_record *r = malloc((size_t)n * sizeof *r);
        fill(r, n, 0, 0, 9);
        r[2 * n / 3 - 1].op = MC_BARRIER;
        run_out a = run(k, r, n, 0);
        const uint64_t G = 3900ull * 1000;
        for (int i = 2 * n / 3; i < n; i++) r[i].cycle += G;
        run_out b = run(k, r, n, 0);
        run_out c = run(k, r, n, 1);
        if (a.ok && b.ok && c.ok) {
            const incs in = increments(&k);
            CHECK(b.e.reads == a.e.reads && b.e.writes == a.e.writes, "gap: the same requests");
            int64_t dacts = (int64_t)b.e.acts - (int64_t)a.e.acts;
            CHECK(dacts >= -8 && dacts <= 8, "gap: %lld ACTs more", (long long)dacts);
            int64_t drefs = (int64_t)b.e.refreshes - (int64_t)a.e.refreshes;
            CHECK(refresh ? drefs >= 8 * 1000 - 8 && drefs <= 8 * 1000 + 8 : drefs == 0,
                  "gap: %lld refreshes more", (long long)drefs);
            double want = a.e.total_pj + 8.0 * (double)G * in.pre_stb +
                          (refresh ? 8.0 * 1000 * in.ref : 0);
            CHECK(fabs(b.e.total_pj / want - 1) < 1e-3, "gap: %.3f pJ, want %.3f", b.e.total_pj,
                  want);
            /* exactly: the difference is the gap's background and refreshes plus the ACTs */
            double diff = b.e.total_pj - a.e.total_pj;
            double parts = (b.e.active_standby_pj - a.e.active_standby_pj) +
                           (b.e.precharged_standby_pj - a.e.precharged_standby_pj) +
                           (b.e.refresh_pj - a.e.refresh_pj) + in.act * (double)dacts;
            CHECK(CLOSE(diff, parts) && b.e.read_pj == a.e.read_pj && b.e.write_pj == a.e.write_pj,
                  "gap: the difference is not only background, refresh and ACTs");
            CHECK(CLOSE(b.e.total_pj, c.e.total_pj) && b.e.refreshes == c.e.refreshes &&
                  b.e.active_cycles == c.e.active_cycles,
                  "gap: skipped %.3f pJ, simulated %.3f", b.e.total_pj, c.e.total_pj);
            check_parts(&b.e, "gap");
        }
        free(c.log);
        free(r);
    }
}

static void unavailable_and_bad(void)
{
    mc_config k = part("serial", 0, 1);
    k.energy = 0;
    mc_record r[30];
    fill(r, 30, 0, 0, 3);
    run_out o = run(k, r, 30, 0);
    CHECK(o.ok && !o.e.available && o.e.total_pj == 0 && o.e.reads + o.e.writes == 30,
          "no currents: counts only, available 0");
    char err[256];
    k = part("serial", 0, 1);
    k.IDD3N = 30; /* below IDD2N */
    mc_sim *sim = mc_new(&k, err, sizeof err);
    CHECK(!sim && strstr(err, "IDD3N"), "IDD3N < IDD2N refused: %s", err);
    if (sim) mc_free(sim);
    k = part("serial", 0, 1);
    k.IDD0 = -1;
    sim = mc_new(&k, err, sizeof err);
    CHECK(!sim && strstr(err, "energy"), "negative current refused: %s", err);
    if (sim) mc_free(sim);
    k = part("serial", 0, 1);
    sim = mc_new(&k, err, sizeof err);
    mc_energy e;
    CHECK(sim && mc_get_energy(sim, 8, 0, &e) == MC_ERR_ARG && mc_get_energy(sim, 0, 1, &e) ==
          MC_ERR_ARG && mc_get_energy(sim, -1, -1, NULL) == MC_ERR_ARG &&
          mc_get_energy(NULL, -1, -1, &e) == MC_ERR_ARG, "mc_get_energy checks its arguments");
    if (sim) mc_free(sim);
}

/* Per-bank refresh (refresh 2) on the HBM2 part without PIM: two reads 16 tREFI apart. Each
 * channel refreshes one bank every tREFI / 16 = 243 cycles, so 16 x 16 = 256 per-bank
 * refreshes by cycle 16 x 3900 (the 257th falls due at 62,451, after the run), none all-bank;
 * each costs VDD x (IDD5B - IDD3N) x tRFCb x tCK by hand: 1.2 x 19.8 x 160 x 1.25 = 4,752 pJ */
static void per_bank_refresh_by_hand(void)
{
    mc_config k = part("serial", 0, 2);
    k.pim_enabled = 0; k.pim_bank_mask = 0;
    k.tRFCb = 160; k.tRREFD = 8; k.IDD5B = 74.8;
    mc_record r[2] = {{0, 0, 0, MC_READ, MC_HOST, 0},
                      {16 * 3900 - 100, 0x40, 0, MC_READ, MC_HOST, 0}};
    for (int log = 0; log < 2; log++) { /* simulated refresh by refresh, and the gap skipped */
        run_out o = run(k, r, 2, log);
        if (!o.ok) return;
        CHECK(o.e.cycles > 16 * 3900 - 100 && o.e.cycles < 62451, "per-bank window %llu",
              (unsigned long long)o.e.cycles);
        CHECK(o.e.bank_refreshes == 8 * 256 && o.e.refreshes == 0,
              "per-bank refreshes over 16 tREFI: %llu (want 8 channels x 16 banks x 16), "
              "all-bank %llu", (unsigned long long)o.e.bank_refreshes,
              (unsigned long long)o.e.refreshes);
        for (int c = 0; c < 8; c++)
            CHECK(o.per[c].bank_refreshes == 256, "channel %d: %llu per-bank refreshes", c,
                  (unsigned long long)o.per[c].bank_refreshes);
        CHECK(CLOSE(o.e.refresh_bank_pj, 4752.0 * 8 * 256) && o.e.refresh_pj == 0,
              "per-bank refresh energy %.3f pJ, by hand %.3f", o.e.refresh_bank_pj,
              4752.0 * 8 * 256);
        check_parts(&o.e, "per-bank refresh");
        if (log) {
            uint64_t refb = 0;
            for (uint64_t i = 0; i < o.nlog; i++) refb += o.log[i].command == MC_CMD_REFB;
            CHECK(refb == o.e.bank_refreshes, "command log: %llu REFB, energy counts %llu",
                  (unsigned long long)refb, (unsigned long long)o.e.bank_refreshes);
        }
        free(o.log);
    }
    /* refused: IDD5B below IDD3N, tRFCb not below tRFC */
    char err[256];
    k.IDD5B = 50;
    mc_sim *sim = mc_new(&k, err, sizeof err);
    CHECK(!sim && strstr(err, "IDD5B"), "IDD5B below IDD3N refused: %s", sim ? "" : err);
    if (sim) mc_free(sim);
    k.IDD5B = 74.8; k.tRFCb = 260;
    sim = mc_new(&k, err, sizeof err);
    CHECK(!sim && strstr(err, "tRFCb"), "tRFCb = tRFC refused: %s", sim ? "" : err);
    if (sim) mc_free(sim);
}

int main(void)
{
    one_read_by_hand();
    matches_command_log();
    repeated_trace_is_linear();
    idle_gap_adds_background_and_refresh();
    unavailable_and_bad();
    per_bank_refresh_by_hand();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
