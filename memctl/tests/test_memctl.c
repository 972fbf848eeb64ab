/* C tests of memctl, built and run by `make check` (and `make sanitize` under ASan/UBSan).
 * They drive every policy with host and PIM traffic and every error path, and check that
 * every request completes exactly once. Prints "N passed, N failed". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../memctl.h"
#include "../internal.h" /* for the invariant of the PIM scope maxima */
#include "testing.h"

/* HBM2_8Gb_x128-like part with PIM (tests/testing.h), completions kept */
static mc_config hbm2(const char *policy)
{
    mc_config k = hbm2_base(policy);
    k.keep_completions = 1;
    return k;
}

static mc_record *make_trace(int n, int with_pim, unsigned seed)
{
    mc_record *r = calloc((size_t)n, sizeof *r);
    unsigned s = seed;
    for (int i = 0; i < n; i++) {
        s = s * 1103515245u + 12345u;
        r[i].cycle = (uint64_t)(i / 3);
        r[i].requestor = with_pim && (i / 64) % 2 ? MC_PIM : MC_HOST;
        r[i].op = (s >> 16) % 4 == 0 ? MC_WRITE : MC_READ;
        r[i].addr = ((uint64_t)(s >> 8) % (1u << 20)) * 64;
        if (i % 500 == 0) { r[i].op = MC_LAYER; r[i].value = (uint32_t)(i / 500); }
        if (i % 777 == 0) { r[i].op = MC_PARAM; r[i].param = MC_P_EPOCH_CAP; r[i].value = 500; }
        if (i % 1001 == 0) r[i].op = MC_BARRIER;
    }
    return r;
}

/* each channel's scope_* maxima equal the max over the PIM scope's banks (timing.c keeps them
 * incrementally; a PIM command's ready cycle relies on them) */
static void check_scope(const mc_sim *sim, const char *policy)
{
    int bad = 0;
    for (int ci = 0; ci < sim->nch; ci++) {
        const channel *c = &sim->ch[ci];
        tick m[5] = {0, 0, 0, 0, 0};
        for (uint64_t s = sim->pim_scope; s; s &= s - 1) {
            const bank *bk = &c->banks[__builtin_ctzll(s)];
            m[0] = MAXT(m[0], bk->next_act);
            m[1] = MAXT(m[1], bk->next_rd);
            m[2] = MAXT(m[2], bk->next_wr);
            m[3] = MAXT(m[3], bk->next_pre);
            m[4] = MAXT(m[4], bk->closed_at);
        }
        bad += m[0] != c->scope_next_act || m[1] != c->scope_next_rd ||
               m[2] != c->scope_next_wr || m[3] != c->scope_next_pre ||
               m[4] != c->scope_closed_at;
    }
    CHECK(bad == 0, "%s: PIM scope maxima out of date in %d channels", policy, bad);
}

static void run_policy(const char *policy, int with_pim)
{
    mc_config k = hbm2(policy);
    char err[256];
    mc_sim *sim = mc_new(&k, err, sizeof err);
    CHECK(sim != NULL, "%s: mc_new failed: %s", policy, err);
    if (!sim) return;
    mc_cmdlog_enable(sim, 1000);
    int n = 5000;
    mc_record *r = make_trace(n, with_pim, 7);
    uint64_t requests = 0;
    for (int i = 0; i < n; i++) requests += r[i].op <= MC_WRITE;
    uint64_t done = 0, consumed = 0, logged = 0;
    mc_cmd *buf = malloc(4096 * sizeof *buf);
    uint64_t *seen = calloc((size_t)n, sizeof *seen);
    uint64_t idx[512], cyc[512], iss[512];
    int rc;
    /* in two halves, the second the last: exercises carrying records over */
    uint64_t half = (uint64_t)n / 2;
    rc = MC_PAUSED;
    while (rc == MC_PAUSED) {
        rc = mc_feed(sim, r + done, half - done, 0, &consumed);
        done += consumed;
        logged += mc_cmdlog_take(sim, buf, 4096);
        check_scope(sim, policy);
    }
    CHECK(rc == MC_OK, "%s: feed rc %d: %s", policy, rc, mc_error(sim));
    rc = MC_PAUSED;
    while (rc == MC_PAUSED) {
        rc = mc_feed(sim, r + done, (uint64_t)n - done, 1, &consumed);
        done += consumed;
        logged += mc_cmdlog_take(sim, buf, 4096);
        check_scope(sim, policy);
    }
    CHECK(rc == MC_OK && done == (uint64_t)n, "%s: last feed rc %d, %llu of %d: %s", policy, rc,
          (unsigned long long)done, n, mc_error(sim));
    do {
        rc = mc_finish(sim);
        logged += mc_cmdlog_take(sim, buf, 4096);
        check_scope(sim, policy);
    } while (rc == MC_PAUSED);
    CHECK(rc == MC_OK, "%s: finish rc %d: %s", policy, rc, mc_error(sim));
    uint64_t m, total = 0, dup = 0, late = 0, arr[512];
    while ((m = mc_completions_take_arrival(sim, idx, cyc, iss, arr, 512)) > 0) {
        for (uint64_t i = 0; i < m; i++) {
            if (idx[i] < (uint64_t)n) { dup += seen[idx[i]]++ > 0; }
            late += arr[i] > cyc[i] || (idx[i] < (uint64_t)n && arr[i] < r[idx[i]].cycle);
            total++;
        }
    }
    CHECK(late == 0, "%s: %llu arrivals after their completion or before their record's cycle",
          policy, (unsigned long long)late);
    CHECK(total == requests, "%s: %llu completions for %llu requests", policy,
          (unsigned long long)total, (unsigned long long)requests);
    CHECK(dup == 0, "%s: %llu requests completed twice", policy, (unsigned long long)dup);
    mc_summary s;
    mc_get_summary(sim, &s);
    CHECK(s.commands == logged, "%s: %llu commands, %llu logged", policy,
          (unsigned long long)s.commands, (unsigned long long)logged);
    /* layer ids 1..9: record 0 is a barrier; an id is kept only once the trace uses it */
    CHECK(s.layers == 9, "%s: %llu layers", policy, (unsigned long long)s.layers);
    if (with_pim && strcmp(policy, "bank_partition") != 0)
        CHECK(s.mode_switches > 0, "%s: no mode switch", policy);
    free(seen);
    free(buf);
    free(r);
    mc_free(sim);
}

static void bad_config(void)
{
    char err[256];
    mc_config k = hbm2("authority");
    k.tRAS = 60;
    CHECK(mc_new(&k, err, sizeof err) == NULL && strstr(err, "tRAS"), "tRAS > tRC accepted: %s", err);
    k = hbm2("authority");
    k.banks_per_group = 0;
    CHECK(mc_new(&k, err, sizeof err) == NULL && strstr(err, "banks_per_group"), "zero banks: %s", err);
    k = hbm2("nonsense");
    CHECK(mc_new(&k, err, sizeof err) == NULL && strstr(err, "nonsense"), "policy: %s", err);
    k = hbm2("bank_partition");
    k.pim_bank_mask = 0xFFFF;
    CHECK(mc_new(&k, err, sizeof err) == NULL, "partition leaves host no bank");
    k = hbm2("authority");
    k.write_low = 40;
    CHECK(mc_new(&k, err, sizeof err) == NULL && strstr(err, "watermark"), "watermarks: %s", err);
}

static void bad_records(void)
{
    char err[256];
    mc_config k = hbm2("authority");
    mc_sim *sim = mc_new(&k, err, sizeof err);
    mc_record r = {0, (uint64_t)1 << 40, 0, MC_READ, MC_HOST, 0};
    uint64_t c;
    int rc = mc_feed(sim, &r, 1, 1, &c);
    CHECK(rc == MC_ERR_TRACE && strstr(mc_error(sim), "capacity"), "address: %d %s", rc, mc_error(sim));
    mc_free(sim);
    sim = mc_new(&k, err, sizeof err);
    r.addr = 0;
    r.op = 9;
    rc = mc_feed(sim, &r, 1, 1, &c);
    CHECK(rc == MC_ERR_TRACE && strstr(mc_error(sim), "op"), "op: %d %s", rc, mc_error(sim));
    mc_free(sim);
    k.pim_enabled = 0;
    sim = mc_new(&k, err, sizeof err);
    r.op = MC_READ;
    r.requestor = MC_PIM;
    rc = mc_feed(sim, &r, 1, 1, &c);
    CHECK(rc == MC_ERR_TRACE && strstr(mc_error(sim), "PIM"), "pim: %d %s", rc, mc_error(sim));
    mc_free(sim);
}

/* A channel holding one write (below the low watermark) sleeps; it drains once no records can
 * come. A last mc_feed without records must wake it: without refresh nothing else would, and
 * mc_finish failed with "requests can never be served" (regression). */
static void lone_write_drains_at_the_end(void)
{
    char err[256];
    mc_config k = hbm2("serial");
    k.refresh = 0;
    k.row_hit_cap = 1;
    k.issue_width = 1;
    mc_sim *sim = mc_new(&k, err, sizeof err);
    CHECK(sim != NULL, "lone write: mc_new failed: %s", err);
    if (!sim) return;
    mc_record r[2];
    memset(r, 0, sizeof r);
    r[0].op = MC_WRITE; r[0].addr = 0;                     /* channel 0 */
    r[1].op = MC_READ; r[1].addr = 1u << 11; r[1].cycle = 1; /* channel 1 */
    uint64_t consumed, done = 0;
    int rc = MC_PAUSED;
    while (rc == MC_PAUSED) {
        rc = mc_feed(sim, r + done, 2 - done, 0, &consumed);
        done += consumed;
    }
    CHECK(rc == MC_OK && done == 2, "lone write: feed rc %d: %s", rc, mc_error(sim));
    do rc = mc_feed(sim, r + 2, 0, 1, &consumed); while (rc == MC_PAUSED);
    CHECK(rc == MC_OK, "lone write: last feed rc %d: %s", rc, mc_error(sim));
    do rc = mc_finish(sim); while (rc == MC_PAUSED);
    CHECK(rc == MC_OK, "lone write: finish rc %d: %s", rc, mc_error(sim));
    uint64_t idx[4], cyc[4], iss[4];
    CHECK(mc_completions_take(sim, idx, cyc, iss, 4) == 2, "lone write: not 2 completions");
    mc_free(sim);
}

/* all n records fed and the run finished, the command log left for the caller to take (its
 * capacity must hold the run's commands); *done: the records taken */
static int run_keeping_log(mc_sim *sim, const mc_record *r, uint64_t n, uint64_t *done)
{
    uint64_t consumed;
    int rc = MC_PAUSED;
    while (rc == MC_PAUSED) {
        rc = mc_feed(sim, r + *done, n - *done, 1, &consumed);
        *done += consumed;
    }
    if (rc != MC_OK) return rc;
    do rc = mc_finish(sim); while (rc == MC_PAUSED);
    return rc;
}

/* Writes a drain moved into a bank's command queue ahead of older reads must not hold its slots
 * while those reads come in one at a time: the reads alternate between two rows, and one read
 * alone in the queue never finds a row hit. A full bank queue serves its writes first, so the
 * reads behind them move in together and hit their open rows (regression: every read after
 * the drain paid an ACT). */
static void drained_writes_do_not_clog_a_bank(void)
{
    char err[256];
    mc_config k = hbm2("serial");
    k.refresh = 0;
    k.write_high = 7; k.write_low = 2; /* the 7 writes drain at once */
    mc_sim *sim = mc_new(&k, err, sizeof err);
    CHECK(sim != NULL, "clog: mc_new failed: %s", err);
    if (!sim) return;
    mc_cmdlog_enable(sim, 1000);
    enum { READS = 80, WRITES = 7, N = READS + WRITES, FIRST = 40 };
    mc_record r[N];
    memset(r, 0, sizeof r);
    /* channel 0, bank 0: addr = row << 18 | column << 6 (the test part's mapping) */
    for (int i = 0, n = 0; i < N; i++) {
        if (i >= FIRST && i < FIRST + WRITES) {
            r[i].op = MC_WRITE;
            r[i].addr = (uint64_t)9 << 18 | (uint64_t)(i - FIRST) << 6;
        } else {
            r[i].op = MC_READ;
            r[i].addr = (uint64_t)(n % 2 ? 5 : 3) << 18 | (uint64_t)(n / 2) << 6;
            n++;
        }
    }
    uint64_t done = 0;
    int rc = run_keeping_log(sim, r, N, &done);
    CHECK(rc == MC_OK && done == N, "clog: rc %d: %s", rc, mc_error(sim));
    mc_cmd cmds[1000];
    uint64_t m = mc_cmdlog_take(sim, cmds, 1000), acts = 0;
    for (uint64_t i = 0; i < m; i++) acts += cmds[i].command == MC_CMD_ACT;
    /* the bank queue holds 8: four hits per visit of a read row (20 ACTs) and one for the
     * writes' row; with the writes holding 7 slots each read behind them paid an ACT (45) */
    CHECK(acts <= 24, "clog: %llu ACTs for %d reads of 2 rows and %d writes of 1",
          (unsigned long long)acts, READS, WRITES);
    mc_free(sim);
}

/* Arbitration among the banks: 8 row hits to bank 0 (bank group 0), then 8 to bank 4 (bank
 * group 1), all at cycle 0. Column-first serves the oldest ready hit, so bank 0's eight reads
 * go first; round-robin (DRAMsim3's) gives the turn to the bank after the one that last issued,
 * so once bank 4 can read the two banks alternate. */
static void round_robin_takes_turns(void)
{
    for (int arb = 0; arb < 2; arb++) {
        char err[256];
        mc_config k = hbm2("serial");
        k.refresh = 0;
        k.arbitration = arb ? MC_ARB_COLUMN_FIRST : MC_ARB_ROUND_ROBIN;
        mc_sim *sim = mc_new(&k, err, sizeof err);
        CHECK(sim != NULL, "turns: mc_new failed: %s", err);
        if (!sim) return;
        mc_cmdlog_enable(sim, 1000);
        enum { N = 16 };
        mc_record r[N];
        memset(r, 0, sizeof r);
        for (int i = 0; i < N; i++) { /* addr = row << 18 | bankgroup << 16 | column << 6 */
            r[i].op = MC_READ;
            r[i].addr = (uint64_t)3 << 18 | (uint64_t)(i / 8) << 16 | (uint64_t)(i % 8) << 6;
        }
        uint64_t done = 0;
        int rc = run_keeping_log(sim, r, N, &done);
        CHECK(rc == MC_OK && done == N, "turns: rc %d: %s", rc, mc_error(sim));
        mc_cmd cmds[1000];
        uint64_t m = mc_cmdlog_take(sim, cmds, 1000);
        int order[N], n = 0;
        for (uint64_t i = 0; i < m && n < N; i++)
            if (cmds[i].command == MC_CMD_RD) order[n++] = cmds[i].bankgroup;
        CHECK(n == N, "turns: %d reads logged", n);
        int first4 = 0, alternating = 1;
        while (first4 < n && order[first4] == 0) first4++;
        if (arb) {
            CHECK(first4 == 8, "turns: column-first read %d of bank 0 before bank 4's", first4);
        } else {
            CHECK(first4 > 0 && first4 < 8, "turns: round-robin read %d of bank 0 first", first4);
            for (int i = first4; i + 1 < n && i < 2 * (8 - first4) + first4 - 1; i++)
                alternating &= order[i] != order[i + 1];
            CHECK(alternating, "turns: round-robin did not alternate the two banks");
        }
        mc_free(sim);
    }
}

/* A long trace in many chunks with the PIM silent (authority: two cursors): the silent cursor
 * reads ahead to the end of what it is given, and what the controller holds must stay within
 * the window (back-pressure), the ring wrapping many times; sparse event ids (10^8) cost one
 * entry each. Every request still completes once, in the same cycles as with a window that
 * never binds. */
static uint64_t silent_run(uint64_t window, uint64_t *peak, uint64_t *cap, int *ok)
{
    mc_config k = hbm2("authority");
    k.keep_completions = 0;
    char err[256];
    mc_sim *sim = mc_new(&k, err, sizeof err);
    *ok = sim != NULL;
    if (!sim) return 0;
    if (window) mc_set_window(sim, window);
    enum { CHUNK = 997, CHUNKS = 60 };
    mc_record *r = calloc(CHUNK, sizeof *r);
    uint64_t base = 0;
    int rc = MC_OK;
    for (int c = 0; c < CHUNKS && rc == MC_OK; c++) {
        for (int i = 0; i < CHUNK; i++) {
            uint64_t j = base + (uint64_t)i;
            memset(&r[i], 0, sizeof r[i]);
            r[i].op = j % 5 == 0 ? MC_WRITE : MC_READ;
            r[i].addr = (j * 2654435761u % (1u << 22)) * 64;
            if (j % 4001 == 17) { r[i].op = MC_SIGNAL; r[i].value = 100000000u + (uint32_t)j; }
            if (j % 3001 == 5) { r[i].op = MC_DELAY; r[i].value = 50; }
        }
        uint64_t done = 0, consumed = 0;
        do {
            rc = mc_feed(sim, r + done, CHUNK - done, c == CHUNKS - 1, &consumed);
            done += consumed;
        } while (rc == MC_PAUSED);
        base += CHUNK;
    }
    if (rc == MC_OK)
        do rc = mc_finish(sim); while (rc == MC_PAUSED);
    *ok = rc == MC_OK;
    uint64_t held;
    mc_held(sim, &held, peak, cap);
    mc_summary s;
    mc_get_summary(sim, &s);
    CHECK(mc_event_count(sim) == (CHUNKS * CHUNK + 4000 - 17) / 4001,
          "silent: %llu events", (unsigned long long)mc_event_count(sim));
    uint64_t reached, fired;
    mc_event(sim, 100000017u, &reached, &fired);
    CHECK(reached != UINT64_MAX && fired != UINT64_MAX && fired >= reached,
          "silent: event 10^8 + 17 reached %llu fired %llu", (unsigned long long)reached,
          (unsigned long long)fired);
    free(r);
    mc_free(sim);
    return s.cycles;
}

static void silent_requestor_is_bounded(void)
{
    uint64_t peak, cap, peak_big, cap_big;
    int ok, ok_big;
    uint64_t cycles = silent_run(500, &peak, &cap, &ok);
    uint64_t cycles_big = silent_run(0, &peak_big, &cap_big, &ok_big);
    CHECK(ok && ok_big, "silent: runs failed");
    CHECK(peak <= 500 && cap <= 1024, "silent: held %llu records in a buffer of %llu (window 500)",
          (unsigned long long)peak, (unsigned long long)cap);
    CHECK(cycles == cycles_big, "silent: %llu cycles with a window of 500, %llu with the default",
          (unsigned long long)cycles, (unsigned long long)cycles_big);
}

/* The host waits for an event the PIM signals 3,000 host records later, with a window of 100
 * records fed in chunks of 37: the PIM's cursor must read past the window (the ring grows,
 * copying its wrapped contents), and the run ends as with a window that never binds. */
static uint64_t wait_beyond(uint64_t window, uint64_t *peak)
{
    mc_config k = hbm2("authority");
    k.keep_completions = 0;
    char err[256];
    mc_sim *sim = mc_new(&k, err, sizeof err);
    if (!sim) return 0;
    mc_set_window(sim, window);
    enum { N = 3200 };
    mc_record *r = calloc(N, sizeof *r);
    r[0].op = MC_WAIT; r[0].requestor = MC_HOST; r[0].value = 7;
    for (int i = 1; i < 3001; i++) { r[i].op = MC_READ; r[i].addr = (uint64_t)i * 4096; }
    for (int i = 3001; i < 3101; i++) {
        r[i].op = MC_READ; r[i].requestor = MC_PIM; r[i].addr = (uint64_t)(i - 3001) * 64;
    }
    r[3101].op = MC_SIGNAL; r[3101].requestor = MC_PIM; r[3101].value = 7;
    for (int i = 3102; i < N; i++) { r[i].op = MC_WRITE; r[i].addr = (uint64_t)i * 64; }
    uint64_t done = 0, consumed;
    int rc = MC_OK;
    while (rc == MC_OK && done < N) {
        uint64_t m = N - done < 37 ? N - done : 37;
        rc = mc_feed(sim, r + done, m, done + m == N, &consumed);
        done += consumed;
    }
    if (rc == MC_OK) rc = mc_finish(sim);
    CHECK(rc == MC_OK, "wait beyond the window: rc %d: %s", rc, mc_error(sim));
    uint64_t held, cap, fired, reached;
    mc_held(sim, &held, peak, &cap);
    mc_event(sim, 7, &reached, &fired);
    mc_summary s;
    mc_get_summary(sim, &s);
    CHECK(s.requests == 3000 + 100 + (N - 3102) && fired != UINT64_MAX, "wait beyond the window: %llu requests",
          (unsigned long long)s.requests);
    free(r);
    mc_free(sim);
    return s.cycles;
}

static void wait_reads_past_the_window(void)
{
    uint64_t peak_small, peak_big;
    uint64_t small = wait_beyond(100, &peak_small), big = wait_beyond(1u << 20, &peak_big);
    CHECK(small == big && small > 0, "wait beyond the window: %llu cycles, %llu unbounded",
          (unsigned long long)small, (unsigned long long)big);
    CHECK(peak_small > 3000, "wait beyond the window: held at most %llu records",
          (unsigned long long)peak_small);
}

/* the fast text reader: plainly valid lines, and -1 (the caller's per-line parser decides) at
 * anything else */
static void text_reader(void)
{
    mc_record out[8];
    uint64_t n, last, used, lines;
    const char *ok = "# header\n0x40 READ 0\n\n1f40 write 3 # c\r\n0X80\tP_MEM_RD  3\r\n";
    int rc = mc_text_parse(MC_TEXT_DRAMSIM3, ok, strlen(ok), 0, 0, out, 8, &n, &used, &lines, &last);
    CHECK(rc == 0 && n == 3 && last == 4 && used == strlen(ok) && lines == 5,
          "text: rc %d, %llu records, last line %llu", rc, (unsigned long long)n,
          (unsigned long long)last);
    CHECK(n == 3 && out[0].addr == 0x40 && out[0].op == MC_READ && out[1].addr == 0x1f40 &&
          out[1].op == MC_WRITE && out[1].cycle == 3 && out[2].addr == 0x80 && out[2].cycle == 3,
          "text: wrong records");
    const char *ram = "LD 0x40\nst 64\n";
    rc = mc_text_parse(MC_TEXT_RAMULATOR, ram, strlen(ram), 0, 0, out, 8, &n, &used, &lines, &last);
    CHECK(rc == 0 && n == 2 && out[1].addr == 64 && out[1].op == MC_WRITE, "text: ramulator");
    const char *dram = "0x40 R\n80 w\n100\n";
    rc = mc_text_parse(MC_TEXT_RAMULATOR_DRAM, dram, strlen(dram), 0, 0, out, 8, &n, &used, &lines, &last);
    CHECK(rc == 0 && n == 3 && out[1].addr == 0x80 && out[1].op == MC_WRITE &&
          out[2].addr == 0x100 && out[2].op == MC_READ, "text: ramulator_dram");
    const char *bad[] = {
        "0x40 LOAD 0\n", "0x40 READ\n", "0x40 READ 0 1\n", "0xZZ READ 0\n",
        "0x10000000000000000 READ 0\n", "0x40 READ 18446744073709551616\n",
        "0x40 READ 5\n0x80 READ 4\n", "0x40 READ -1\n", "0x40 READ 1.5\n", "0x\xc3\xa9 READ 0\n",
        "0x200 READ 0\n", /* beyond a capacity of 0x200 */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        rc = mc_text_parse(MC_TEXT_DRAMSIM3, bad[i], strlen(bad[i]), 0x200, 0, out, 8, &n, &used, &lines, &last);
        CHECK(rc == -1, "text: bad line %zu taken", i);
    }
    rc = mc_text_parse(MC_TEXT_DRAMSIM3, "0x40 READ 3\n", 12, 0, 4, out, 8, &n, &used, &lines, &last);
    CHECK(rc == -1, "text: a cycle below the previous block's was taken");
    rc = mc_text_parse(MC_TEXT_DRAMSIM3, ok, strlen(ok), 0, 0, out, 2, &n, &used, &lines, &last);
    CHECK(rc == 0 && n == 2 && lines == 4 && used == strlen("# header\n0x40 READ 0\n\n1f40 write 3 # c\r\n"),
          "text: a full out stops before the next record (%llu records, %llu bytes, %llu lines)",
          (unsigned long long)n, (unsigned long long)used, (unsigned long long)lines);
}

/* ---- hostile input (issue 25) ------------------------------------------------------------ */

/* run records to the end: the rc of the first failing call, or MC_OK */
static int run_all(mc_sim *sim, const mc_record *r, uint64_t n)
{
    uint64_t done = 0, consumed = 0;
    int rc = MC_PAUSED;
    mc_cmd buf[256];
    while (rc == MC_PAUSED) {
        rc = mc_feed(sim, r + done, n - done, 1, &consumed);
        done += consumed;
        while (mc_cmdlog_take(sim, buf, 256)) {}
    }
    if (rc != MC_OK) return rc;
    do {
        rc = mc_finish(sim);
        while (mc_cmdlog_take(sim, buf, 256)) {}
    } while (rc == MC_PAUSED);
    return rc;
}

/* an epoch cap shorter than one request's service: every epoch still serves one (it used to
 * hand authority over forever), by the config and by a PARAM record */
static void short_epoch_cap_progresses(void)
{
    char err[256];
    for (int via_param = 0; via_param < 2; via_param++) {
        mc_config k = hbm2("authority");
        if (!via_param) k.epoch_cap = 4;
        mc_sim *sim = mc_new(&k, err, sizeof err);
        mc_record r[3] = {{0, 0, 4, MC_PARAM, 0, MC_P_EPOCH_CAP},
                          {0, 0, 0, MC_READ, MC_HOST, 0},
                          {0, 0x100000, 0, MC_READ, MC_PIM, 0}};
        int rc = via_param ? run_all(sim, r, 3) : run_all(sim, r + 1, 2);
        mc_summary s;
        mc_get_summary(sim, &s);
        CHECK(rc == MC_OK && s.requests == 2 && s.cycles < 1000 && s.epochs <= 2,
              "epoch cap 4 (param %d): rc %d, %llu requests, %llu cycles, %llu epochs: %s",
              via_param, rc, (unsigned long long)s.requests, (unsigned long long)s.cycles,
              (unsigned long long)s.epochs, mc_error(sim));
        mc_free(sim);
    }
}

/* the host's own epoch cap: host and PIM both saturating a part with short epochs; a long
 * host cap (by the config or by a PARAM record, the same run) leaves the host longer epochs,
 * so fewer of them, and the host's requests done sooner; 0 is epoch_cap for both sides */
static void host_epoch_cap_lengthens_the_hosts_epochs(void)
{
    char err[256];
    enum { N = 6000 };
    mc_summary s[3];
    double host_done[3];
    for (int v = 0; v < 3; v++) {          /* 0: no host cap, 1: config, 2: PARAM record */
        mc_config k = hbm2("authority");
        k.epoch_cap = 120;
        if (v == 1) k.host_epoch_cap = 4000;
        mc_sim *sim = mc_new(&k, err, sizeof err);
        mc_record *r = calloc(N + 1, sizeof *r);
        r[0] = v == 2 ? (mc_record){0, 0, 4000, MC_PARAM, 0, MC_P_HOST_EPOCH_CAP}
                      : (mc_record){0, 0, 0, MC_PARAM, 0, MC_P_MIN_EPOCH};   /* as it was */
        unsigned x = 7;
        for (int i = 1; i <= N; i++) {
            x = x * 1103515245u + 12345u;
            r[i].op = MC_READ;
            r[i].requestor = i % 2 ? MC_PIM : MC_HOST;
            r[i].addr = ((uint64_t)(x >> 8) % (1u << 20)) * 64;
        }
        int rc = run_all(sim, r, N + 1);
        mc_get_summary(sim, &s[v]);
        uint64_t *idx = calloc(N, sizeof *idx), *cyc = calloc(N, sizeof *cyc),
                 *iss = calloc(N, sizeof *iss);
        uint64_t n = mc_completions_take(sim, idx, cyc, iss, N);
        double sum = 0;
        int hosts = 0;
        for (uint64_t i = 0; i < n; i++)
            if (idx[i] <= N && r[idx[i]].requestor == MC_HOST) { sum += (double)cyc[i]; hosts++; }
        host_done[v] = hosts ? sum / hosts : 0;
        free(idx);
        free(cyc);
        free(iss);
        CHECK(rc == MC_OK && s[v].requests == N && hosts == N / 2, "host cap %d: rc %d, %llu "
              "requests, %d host completions: %s", v, rc, (unsigned long long)s[v].requests,
              hosts, mc_error(sim));
        free(r);
        mc_free(sim);
    }
    CHECK(s[1].epochs < s[0].epochs && host_done[1] < host_done[0],
          "host cap 4000: %llu epochs (without: %llu), host requests done at %.0f on average "
          "(without: %.0f)", (unsigned long long)s[1].epochs, (unsigned long long)s[0].epochs,
          host_done[1], host_done[0]);
    CHECK(s[1].cycles == s[2].cycles && s[1].epochs == s[2].epochs &&
              s[1].mode_switches == s[2].mode_switches,
          "host cap by config and by PARAM differ: %llu / %llu cycles, %llu / %llu epochs",
          (unsigned long long)s[1].cycles, (unsigned long long)s[2].cycles,
          (unsigned long long)s[1].epochs, (unsigned long long)s[2].epochs);
}

/* a watermark PARAM beyond int: a clear error naming the record, not a negative watermark */
static void watermark_beyond_int_is_refused(void)
{
    char err[256];
    mc_config k = hbm2("authority");
    mc_sim *sim = mc_new(&k, err, sizeof err);
    mc_record r[2] = {{0, 0, 3000000000u, MC_PARAM, 0, MC_P_HOST_HWM},
                      {0, 0, 0, MC_READ, MC_HOST, 0}};
    int rc = run_all(sim, r, 2);
    CHECK(rc == MC_ERR_TRACE && strstr(mc_error(sim), "record 0") &&
          strstr(mc_error(sim), "3000000000 out of range"), "watermark 3e9: rc %d: %s", rc,
          mc_error(sim));
    mc_free(sim);
}

/* an idle gap of 10^12 cycles with the command log on: refused with the arithmetic, not
 * simulated refresh by refresh (which would run for hours and log billions of commands) */
static void long_gap_with_log_is_refused(void)
{
    char err[256];
    mc_config k = hbm2("authority");
    mc_sim *sim = mc_new(&k, err, sizeof err);
    CHECK(sim != NULL, "gap+log: mc_new failed: %s", err);
    if (!sim) return;
    mc_cmdlog_enable(sim, 4096);
    mc_record r[2] = {{0, 0, 0, MC_READ, MC_HOST, 0},
                      {1000000000000LL, 0x100000, 0, MC_READ, MC_HOST, 0}};
    const int rc = run_all(sim, r, 2);
    CHECK(rc == MC_ERR_TRACE && strstr(mc_error(sim), "command log on") &&
              strstr(mc_error(sim), "cycle 1000000000000"),
          "gap+log: rc %d: %s", rc, mc_error(sim));
    mc_free(sim);
}

/* the watchdog: a refresh that leaves no room (set behind check_config's back, as a bug
 * would) is reported as a livelock naming the channel, not a hang */
static void watchdog_reports_livelock(void)
{
    char err[256];
    mc_config k = hbm2("authority");
    mc_sim *sim = mc_new(&k, err, sizeof err);
    sim->cfg.tREFI = 270; /* tRFC 260: 10 cycles between refreshes, tRCD 14 */
    for (int ci = 0; ci < sim->nch; ci++) sim->ch[ci].ranks[0].refresh_due = sim->ch[ci].refresh_next = 270;
    mc_record r = {300, 0x100000, 0, MC_READ, MC_HOST, 0};
    int rc = run_all(sim, &r, 1);
    CHECK(rc == MC_ERR_STUCK && strstr(mc_error(sim), "livelock: channel") &&
              strstr(mc_error(sim), "1 host and 0 PIM requests wait"),
          "watchdog: rc %d: %s", rc, mc_error(sim));
    CHECK(mc_feed(sim, &r, 1, 1, &(uint64_t){0}) == MC_ERR_STATE, "feed after an error");
    mc_free(sim);
    /* a write buffer full at or below the low watermark (check_config refuses such a part):
     * the front end waits for room that never comes, refresh after refresh */
    k = hbm2("serial"); /* (one cursor: blocked, it asks for no more records) */
    sim = mc_new(&k, err, sizeof err);
    sim->host_qd = 1;
    mc_record w[3] = {{0, 0, 0, MC_WRITE, MC_HOST, 0}, {0, 0x40, 0, MC_WRITE, MC_HOST, 0},
                      {0, 0x80, 0, MC_READ, MC_HOST, 0}};
    uint64_t consumed;
    int rc2 = mc_feed(sim, w, 3, 0, &consumed);
    CHECK(rc2 == MC_ERR_STUCK && strstr(mc_error(sim), "1 host and 0 PIM requests wait"),
          "blocked front end: rc %d: %s", rc2, mc_error(sim));
    mc_free(sim);
    k.host_queue_depth = 8;
    CHECK(mc_new(&k, err, sizeof err) == NULL && strstr(err, "host_queue_depth (8)"),
          "host queue at the low watermark: %s", err);
}

static void refused_configs(void)
{
    char err[256];
    struct { const char *what; mc_config k; } cases[16];
    int n = 0;
#define CASE(label, stmt) do { cases[n].what = label; cases[n].k = hbm2("authority"); \
                               { mc_config *k = &cases[n].k; stmt; } n++; } while (0)
    CASE("refresh takes", (k->tREFI = 270));
    CASE("refresh takes", (k->ranks = 4, k->tREFI = 1000)); /* 4 x 260 > 1000: PIM starves */
    CASE("between two refreshes", (k->tWR = 4000));
    CASE("address field", (k->map_bits[2] = 5));      /* bank group: 32 values of 4 */
    CASE("address field", (k->map_bits[4] = 30));     /* channel */
    CASE("channels x pseudo_channels", (k->channels = 1 << 30, k->pseudo_channels = 4));
    CASE("banks per channel", (k->ranks = 8, k->bankgroups = 1 << 29, k->banks_per_group = 8));
    CASE("queue_depth", (k->queue_depth = 1 << 30));
    CASE("bank_queue_depth", (k->bank_queue_depth = 1 << 30));
    CASE("timing parameters must be >= 0", (k->tWR = -5));
    CASE("offset_bits", (k->offset_bits = 70));
    CASE("epoch_cap", (k->epoch_cap = -1));
    CASE("host_epoch_cap", (k->host_epoch_cap = -1));
    CASE("CL + burst + tRTRS", (k->CWL = 2147483647, k->refresh = 0));
    CASE("arbitration must be", (k->arbitration = 7));
#undef CASE
    for (int i = 0; i < n; i++) {
        err[0] = 0;
        mc_sim *sim = mc_new(&cases[i].k, err, sizeof err);
        CHECK(sim == NULL && strstr(err, cases[i].what), "case %d: '%s' expected, got: %s", i,
              cases[i].what, sim ? "(accepted)" : err);
        mc_free(sim);
    }
    /* NULL config, negative or zero errlen, NULL err: no write past the buffer */
    char small[4] = {'x', 'x', 'x', 'x'};
    CHECK(mc_new(NULL, err, sizeof err) == NULL && strstr(err, "NULL"), "NULL cfg: %s", err);
    mc_config k = hbm2("authority");
    k.tREFI = 1;
    CHECK(mc_new(&k, small, -5) == NULL && small[0] == 'x', "negative errlen wrote");
    CHECK(mc_new(&k, small, 0) == NULL && small[0] == 'x', "zero errlen wrote");
    CHECK(mc_new(&k, NULL, 100) == NULL, "NULL err");
    CHECK(mc_new(&k, small, 4) == NULL && small[3] == 0, "short err not terminated");
}

static void api_arguments(void)
{
    char err[256];
    mc_config k = hbm2("authority");
    mc_sim *sim = mc_new(&k, err, sizeof err);
    mc_record r[2] = {{0, 0, 0, MC_READ, MC_HOST, 0}, {10, 0x40, 0, MC_WRITE, MC_PIM, 0}};
    uint64_t consumed = 7, v = 99;
    CHECK(mc_feed(sim, r, 2, 0, NULL) == MC_ERR_ARG, "NULL consumed");
    CHECK(mc_feed(sim, NULL, 2, 0, &consumed) == MC_ERR_ARG, "NULL records");
    CHECK(mc_feed(NULL, r, 2, 0, &consumed) == MC_ERR_ARG, "NULL sim");
    CHECK(mc_finish(NULL) == MC_ERR_ARG, "finish NULL");
    /* (the argument errors above left a message but do not stop the simulation) */
    CHECK(run_all(sim, r, 2) == MC_OK, "run: %s", mc_error(sim));
    CHECK(mc_feed(sim, r, 2, 1, &consumed) == MC_ERR_ARG && strstr(mc_error(sim), "after mc_finish"),
          "feed after finish: %s", mc_error(sim));
    mc_chan_stats cs;
    CHECK(mc_get_chan_stats(sim, 0, 8, &cs) == MC_ERR_ARG, "channel 8 of 8");
    CHECK(mc_get_chan_stats(sim, 0, -1, &cs) == MC_ERR_ARG, "channel -1");
    CHECK(mc_get_chan_stats(sim, 5, 0, &cs) == MC_ERR_ARG, "requestor 5");
    CHECK(mc_get_chan_stats(sim, 0, 0, NULL) == MC_ERR_ARG, "NULL stats");
    CHECK(mc_get_chan_stats(sim, 0, 0, &cs) == MC_OK && cs.reads == 1, "channel 0 reads %llu",
          (unsigned long long)cs.reads);
    CHECK(mc_latency_percentile(sim, 2, -1, 0.5, &v) == MC_ERR_ARG && v == 99, "requestor 2");
    CHECK(mc_latency_percentile(sim, 0, 64, 0.5, &v) == MC_ERR_ARG, "channel 64");
    CHECK(mc_latency_percentile(sim, 0, -1, 0.0 / 0.0, &v) == MC_ERR_ARG, "q NaN");
    CHECK(mc_latency_percentile(sim, 0, -1, 0.5, NULL) == MC_ERR_ARG, "NULL out");
    CHECK(mc_latency_percentile(sim, 0, -1, 1.0, &v) == MC_OK && v > 0, "p100 %llu",
          (unsigned long long)v);
    CHECK(mc_mode_switches(sim, 9, &v) == MC_ERR_ARG && mc_mode_switches(sim, 0, NULL) == MC_ERR_ARG,
          "mode switches");
    CHECK(mc_mode_switches(sim, 0, &v) == MC_OK && v == 1, "mode switches of channel 0: %llu",
          (unsigned long long)v);
    CHECK(mc_get_summary(sim, NULL) == MC_ERR_ARG && mc_get_summary(NULL, NULL) == MC_ERR_ARG,
          "summary NULL");
    CHECK(mc_decode(sim, 0, NULL) == MC_ERR_ARG, "decode NULL");
    uint64_t a, b, c;
    CHECK(mc_layer_span(sim, 0, &a, NULL, &c) == MC_ERR_ARG && mc_layer_span(sim, 5, &a, &b, &c) == MC_OK,
          "layer span");
    mc_layer_stats ls;
    CHECK(mc_get_layer_stats(sim, 0, 0, NULL) == MC_ERR_ARG && mc_get_layer_stats(sim, 0, 2, &ls) ==
          MC_ERR_ARG && mc_get_layer_stats(NULL, 0, 0, &ls) == MC_ERR_ARG, "layer stats NULL");
    CHECK(mc_get_layer_stats(sim, 77, 1, &ls) == MC_OK && ls.reads == 0 && ls.row_hits == 0,
          "layer stats of an unused id");
    CHECK(mc_cmdlog_take(sim, NULL, 10) == 0 && mc_completions_take(NULL, &a, &b, &c, 1) == 0,
          "take NULL");
    CHECK(strstr(mc_error(NULL), "NULL") != NULL, "mc_error(NULL)");
    mc_free(sim);
    /* arrival cycles beyond the simulator's range */
    sim = mc_new(&k, err, sizeof err);
    mc_record far[2] = {{0, 0, 0, MC_READ, MC_HOST, 0}, {(uint64_t)1 << 63, 0x40, 0, MC_READ, MC_HOST, 0}};
    int rc = run_all(sim, far, 2);
    CHECK(rc == MC_ERR_TRACE && strstr(mc_error(sim), "record 1: arrival cycle 9223372036854775808"),
          "2^63: rc %d %s", rc, mc_error(sim));
    mc_free(sim);
}

/* issue 39: records offered after a call with last set took them all are refused (a second
 * mc_feed(..., last=1) before mc_finish used to spin in the refresh steps for ever: the
 * cursors had stopped at the end of the records); an empty call after it (a resume) is fine,
 * and the run then finishes with the records of the first call */
static void feed_after_last_is_refused(void)
{
    const char *policies[] = {"serial", "authority"};
    for (int p = 0; p < 2; p++) {
        char err[256];
        mc_config k = hbm2(policies[p]);
        mc_sim *sim = mc_new(&k, err, sizeof err);
        mc_record r[2] = {{0, 0, 0, MC_READ, MC_HOST, 0}, {10, 0x40, 0, MC_WRITE, MC_PIM, 0}};
        uint64_t consumed = 0;
        int rc = mc_feed(sim, r, 2, 1, &consumed);
        CHECK(rc == MC_OK && consumed == 2, "%s: first last feed rc %d", policies[p], rc);
        CHECK(mc_feed(sim, NULL, 0, 1, &consumed) == MC_OK && consumed == 0,
              "%s: empty feed after last: %s", policies[p], mc_error(sim));
        for (int last = 0; last < 2; last++) {
            consumed = 7;
            rc = mc_feed(sim, r, 2, last, &consumed);
            CHECK(rc == MC_ERR_ARG && consumed == 0 &&
                      strstr(mc_error(sim), "after the last records"),
                  "%s: feed (last %d) after last: rc %d %s", policies[p], last, rc, mc_error(sim));
        }
        CHECK(mc_finish(sim) == MC_OK, "%s: finish after the refused feed: %s", policies[p],
              mc_error(sim));
        mc_summary s;
        mc_get_summary(sim, &s);
        CHECK(s.requests == 2 && s.records == 2, "%s: %llu requests, %llu records", policies[p],
              (unsigned long long)s.requests, (unsigned long long)s.records);
        mc_free(sim);
    }
}

/* issue 39: mc_decode of an address at or beyond the capacity is refused with a message (it
 * returned MC_OK with the fields of the address's low bits) */
static void decode_beyond_capacity(void)
{
    char err[256];
    mc_config k = hbm2("authority");
    mc_sim *sim = mc_new(&k, err, sizeof err);
    const uint64_t cap = (uint64_t)64 << 27; /* 2^(6 + 15 + 2 + 2 + 3 + 5) bytes */
    int64_t f[MC_F_COUNT], g[MC_F_COUNT];
    for (int i = 0; i < MC_F_COUNT; i++) f[i] = g[i] = -7;
    CHECK(mc_decode(sim, cap - 64, f) == MC_OK && f[MC_F_ROW] == 32767 && f[MC_F_COLUMN] == 31,
          "last address: row %lld column %lld", (long long)f[MC_F_ROW], (long long)f[MC_F_COLUMN]);
    const uint64_t bad[] = {cap, cap + 64, UINT64_MAX};
    for (int i = 0; i < 3; i++) {
        int rc = mc_decode(sim, bad[i], g);
        CHECK(rc == MC_ERR_ARG && strstr(mc_error(sim), "beyond the capacity") && g[0] == -7,
              "decode 0x%llx: rc %d %s", (unsigned long long)bad[i], rc, mc_error(sim));
    }
    CHECK(mc_decode(NULL, 0, f) == MC_ERR_ARG, "decode NULL sim");
    mc_free(sim);
}

/* a channel count that is not a power of two (a GPU's five stacks: 40 channels): the address
 * is the fields' digits in mixed radix, least significant first; the capacity is their
 * product; a radix that is not its field's count is refused; a trace over every channel runs */
static void mixed_radix_channels(void)
{
    char err[256];
    mc_config k = hbm2("serial");
    k.channels = 40;
    k.map_bits[4] = 0;
    k.map_radix[4] = 40; /* ro ra bg ba ch pc co: the channel above the 32 columns */
    mc_sim *sim = mc_new(&k, err, sizeof err);
    CHECK(sim != NULL, "40 channels: %s", err);
    if (!sim) return;
    const uint64_t cap = (uint64_t)64 * 32 * 40 * 4 * 4 * 32768;
    int64_t f[MC_F_COUNT];
    CHECK(mc_decode(sim, cap - 64, f) == MC_OK && f[MC_F_ROW] == 32767 &&
          f[MC_F_CHANNEL] == 39 && f[MC_F_COLUMN] == 31 && f[MC_F_BANK] == 3,
          "last address: row %lld channel %lld", (long long)f[MC_F_ROW],
          (long long)f[MC_F_CHANNEL]);
    CHECK(mc_decode(sim, cap, f) == MC_ERR_ARG, "the capacity is 40 channels' worth");
    int bad = 0;
    for (uint64_t line = 0; line < 40 * 32 * 20; line += 7) {
        const uint64_t x = line, col = x % 32, ch = x / 32 % 40, ba = x / 32 / 40 % 4,
                       bg = x / 32 / 40 / 4 % 4, ro = x / 32 / 40 / 16;
        if (mc_decode(sim, line * 64 + 5, f) != MC_OK || (uint64_t)f[MC_F_COLUMN] != col ||
            (uint64_t)f[MC_F_CHANNEL] != ch || (uint64_t)f[MC_F_BANK] != ba ||
            (uint64_t)f[MC_F_BANKGROUP] != bg || (uint64_t)f[MC_F_ROW] != ro)
            bad++;
    }
    CHECK(bad == 0, "%d addresses decoded off their mixed-radix digits", bad);
    enum { N = 40 * 32 * 4 };
    mc_record *r = calloc(N, sizeof *r);
    for (int i = 0; i < N; i++) {
        r[i].cycle = (uint64_t)(i / 8);
        r[i].addr = (uint64_t)i * 64;
        r[i].op = MC_READ;
    }
    uint64_t used = 0;
    CHECK(mc_feed(sim, r, N, 1, &used) == MC_OK && mc_finish(sim) == MC_OK && used == N,
          "a trace over 40 channels: %s", mc_error(sim));
    mc_summary s;
    mc_get_summary(sim, &s);
    int quiet = 0; /* every channel served its 128 reads */
    for (int c = 0; c < 40; c++) {
        mc_chan_stats cs;
        mc_get_chan_stats(sim, MC_HOST, c, &cs);
        quiet += cs.reads != N / 40;
    }
    CHECK(s.requests == N && quiet == 0, "40 channels served %llu of %d (%d channels off)",
          (unsigned long long)s.requests, N, quiet);
    free(r);
    mc_free(sim);
    k.map_radix[4] = 24; /* not the field's count */
    CHECK(mc_new(&k, err, sizeof err) == NULL && strstr(err, "radix 24, not its count 40"),
          "radix 24: %s", err);
}

/* tWR near INT_MAX: the PIM precharge after a PIM write waits CWL + burst + tWR, summed in 64
 * bits (it came 20 cycles after the write when the int sum wrapped) */
static void huge_twr_sums_in_64_bits(void)
{
    char err[256];
    mc_config k = hbm2("authority");
    k.tWR = 2147483647;
    k.refresh = 0;
    mc_sim *sim = mc_new(&k, err, sizeof err);
    CHECK(sim != NULL, "tWR INT_MAX, no refresh: %s", err);
    if (!sim) return;
    mc_cmdlog_enable(sim, 1000);
    /* PIM write to row 0, then a PIM read of row 1 (same channel): PIM_PRE between */
    mc_record r[2] = {{0, 0, 0, MC_WRITE, MC_PIM, 0}, {0, (uint64_t)1 << 18, 0, MC_READ, MC_PIM, 0}};
    uint64_t consumed;
    int rc = mc_feed(sim, r, 2, 1, &consumed);
    if (rc == MC_OK) rc = mc_finish(sim);
    CHECK(rc == MC_OK, "tWR INT_MAX run: rc %d %s", rc, mc_error(sim));
    tick wr = -1, pre = -1;
    mc_cmd buf[64];
    uint64_t m = mc_cmdlog_take(sim, buf, 64);
    for (uint64_t i = 0; i < m; i++) {
        if (buf[i].command == MC_CMD_PIM_WR) wr = (tick)buf[i].cycle;
        if (buf[i].command == MC_CMD_PIM_PRE && buf[i].requestor == MC_BY_PIM) pre = (tick)buf[i].cycle;
    }
    CHECK(wr >= 0 && pre >= wr + k.CWL + k.burst + (tick)k.tWR, "PIM_WR %lld, PIM_PRE %lld",
          (long long)wr, (long long)pre);
    mc_free(sim);
}

/* random configurations through mc_new and a short run (under ASan/UBSan with `make
 * sanitize`): each is refused with a message or runs every request to completion */
static int rnd(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return (int)((*s >> 8) & 0x7fffff);
}

static void random_configs(void)
{
    unsigned s = 12345;
#define RND() rnd(&s)
    const int pick[] = {0, 1, 2, 3, 4, 7, 8, 16, 31, 64, 100, 4000, 65536, 2147483647, -1,
                        -2147483647 - 1};
    const int np = (int)(sizeof pick / sizeof pick[0]);
    int accepted = 0, refused = 0, bad = 0;
    mc_record *r = make_trace(300, 1, 3);
    for (int i = 0; i < 400; i++) {
        mc_config k = hbm2(i % 3 == 0 ? "serial" : i % 3 == 1 ? "authority" : "bank_partition");
        k.keep_completions = 0;
        int *fields[] = {&k.channels, &k.ranks, &k.bankgroups, &k.banks_per_group, &k.CL,
                         &k.CWL, &k.tRCDRD, &k.tRP, &k.tRAS, &k.tRC, &k.tFAW, &k.tWR, &k.tRTRS,
                         &k.tREFI, &k.tRFC, &k.queue_depth, &k.bank_queue_depth, &k.write_high,
                         &k.write_low, &k.issue_width, &k.map_bits[RND() % 7], &k.offset_bits,
                         &k.mode_switch_cycles, &k.pim_column_cycles, &k.burst, &k.row_hit_cap};
        const int nf = (int)(sizeof fields / sizeof fields[0]);
        int changes = 1 + RND() % 3;
        for (int j = 0; j < changes; j++) {
            int f = RND() % nf;
            *fields[f] = pick[RND() % np];
        }
        if (RND() % 2) k.refresh = 0;
        char err[256] = "";
        mc_sim *sim = mc_new(&k, err, sizeof err);
        if (!sim) {
            refused++;
            bad += err[0] == 0;
            continue;
        }
        accepted++;
        int rc = run_all(sim, r, 300);
        /* addresses beyond a smaller capacity are a clear trace error; nothing else may fail */
        bad += !(rc == MC_OK || (rc == MC_ERR_TRACE && strstr(mc_error(sim), "capacity")));
        if (rc != MC_OK && rc != MC_ERR_TRACE) fprintf(stderr, "config %d: rc %d %s\n", i, rc, mc_error(sim));
        mc_free(sim);
    }
    free(r);
    CHECK(bad == 0 && accepted > 20 && refused > 20, "random configs: %d accepted, %d refused, %d bad",
          accepted, refused, bad);
#undef RND
}

/* An idle gap crossed in one step accounts for its refreshes exactly as simulating them: the
 * same trace with the command log on (every refresh simulated) and off (skipped) */
static void idle_gap_both_ways(void)
{
    const char *policies[] = {"authority", "serial", "bank_partition"};
    for (int pi = 0; pi < 3; pi++) {
        for (int mode = 1; mode <= 4; mode++) { /* ranks 1, 2; refresh per rank, per bank */
            int ranks = 1 + (mode - 1) % 2, refresh = mode <= 2 ? 1 : 2;
            mc_summary sum[2];
            mc_chan_stats cs[2][8][2];
            for (int logged = 0; logged < 2; logged++) {
                char err[256];
                mc_config k = hbm2(policies[pi]);
                k.ranks = ranks;
                k.refresh = refresh;
                k.tRFCb = 12; /* (short: with PIM units every bank's refresh blocks them) */
                k.tRREFD = 8;
                k.map_bits[1] = ranks - 1;
                k.map_bits[0] = 15 - (ranks - 1);
                mc_sim *sim = mc_new(&k, err, sizeof err);
                if (!sim) { CHECK(0, "gap config: %s", err); return; }
                if (logged) mc_cmdlog_enable(sim, 1 << 20);
                mc_record r[6] = {{0, 0, 0, MC_READ, MC_HOST, 0},
                                  {5, 0x100040, 0, MC_WRITE, MC_PIM, 0},
                                  {200000, 0x2000, 0, MC_READ, MC_HOST, 0},
                                  {200003, 0x100000, 0, MC_READ, MC_PIM, 0},
                                  {200010, 0x40000, 0, MC_WRITE, MC_HOST, 0},
                                  {431234, 0x40, 0, MC_READ, MC_HOST, 0}};
                int rc = run_all(sim, r, 6);
                CHECK(rc == MC_OK, "gap run: %s", mc_error(sim));
                mc_get_summary(sim, &sum[logged]);
                for (int c = 0; c < 8; c++)
                    for (int q = 0; q < 2; q++) mc_get_chan_stats(sim, q, c, &cs[logged][c][q]);
                mc_free(sim);
            }
            CHECK(memcmp(&sum[0], &sum[1], sizeof sum[0]) == 0 &&
                      memcmp(cs[0], cs[1], sizeof cs[0]) == 0 && sum[0].refreshes > 800,
                  "%s, %d ranks, refresh %d: skipped gap differs from the simulated one (%llu "
                  "vs %llu refreshes, %llu vs %llu cycles)", policies[pi], ranks, refresh,
                  (unsigned long long)sum[0].refreshes, (unsigned long long)sum[1].refreshes,
                  (unsigned long long)sum[0].cycles, (unsigned long long)sum[1].cycles);
        }
    }
    /* a gap of 10^12 cycles takes no time (it took forever refresh by refresh) */
    char err[256];
    mc_config k = hbm2("authority");
    mc_sim *sim = mc_new(&k, err, sizeof err);
    mc_record r[2] = {{0, 0, 0, MC_READ, MC_HOST, 0}, {1000000000000ull, 0x40, 0, MC_READ, MC_HOST, 0}};
    mc_summary s;
    CHECK(run_all(sim, r, 2) == MC_OK, "far gap: %s", mc_error(sim));
    mc_get_summary(sim, &s);
    CHECK(s.refreshes == 8 * (1000000000000ull / 3900) + 8 || s.refreshes == 8 * (1000000000000ull / 3900),
          "far gap: %llu refreshes", (unsigned long long)s.refreshes);
    mc_free(sim);
}

/* A write the write buffer keeps (below its low watermark, nothing makes it drain) stops
 * neither the skip of an idle gap (a read 2^50 cycles on, handed in with the last records:
 * it was simulated refresh by refresh, a hang) nor the check for a WAIT nothing can end (it
 * waited for the write, which only the end of the stream drains: a hang). */
static void kept_write_neither_hangs_nor_hides_a_dead_wait(void)
{
    char err[256];
    mc_config k = hbm2("authority");
    mc_sim *sim = mc_new(&k, err, sizeof err);
    if (!sim) { CHECK(0, "kept write config: %s", err); return; }
    mc_record far[2] = {{0, 0x140, 0, MC_WRITE, MC_HOST, 0},
                        {(uint64_t)1 << 50, 0x240, 0, MC_READ, MC_HOST, 0}};
    mc_summary s;
    CHECK(run_all(sim, far, 2) == MC_OK, "kept write, far read: %s", mc_error(sim));
    mc_get_summary(sim, &s);
    CHECK(s.requests == 2 && s.refreshes >= 8 * (((uint64_t)1 << 50) / 3900),
          "kept write, far read: %llu requests, %llu refreshes", (unsigned long long)s.requests,
          (unsigned long long)s.refreshes);
    mc_free(sim);
    sim = mc_new(&k, err, sizeof err);
    if (!sim) return;
    mc_record dead[2] = {{0, 0x140, 0, MC_WRITE, MC_HOST, 0}, {0, 0, 2, MC_WAIT, MC_HOST, 0}};
    int rc = run_all(sim, dead, 2);
    CHECK(rc == MC_ERR_TRACE && strstr(mc_error(sim), "WAIT for event 2, which nothing signals"),
          "kept write, dead wait: rc %d: %s", rc, mc_error(sim));
    mc_free(sim);
}

/* COMPUTE: the requests after it issue while it computes; a SIGNAL waits for the computing.
 * 2000 reads (about 130 cycles of bus on one stack) under a 3000-cycle COMPUTE end at 3000, the
 * same reads after a 3000-cycle DELAY after 3000 + their own time; two COMPUTEs add up. */
static uint64_t compute_run(int op, int twice)
{
    mc_config k = hbm2("serial");
    char err[256];
    mc_sim *sim = mc_new(&k, err, sizeof err);
    if (!sim) return 0;
    enum { N = 2004 };
    mc_record *r = calloc(N, sizeof *r);
    r[0].op = (uint8_t)op; r[0].value = 3000;
    for (int i = 1; i < 2001; i++) { r[i].op = MC_READ; r[i].addr = (uint64_t)i * 64; }
    r[2001].op = twice ? (uint8_t)op : MC_DELAY; r[2001].value = twice ? 3000 : 0;
    r[2002].op = MC_DELAY; r[2002].value = 0;
    r[2003].op = MC_SIGNAL; r[2003].value = 1;
    int rc = run_all(sim, r, N);
    uint64_t reached = 0, fired = 0;
    mc_event(sim, 1, &reached, &fired);
    CHECK(rc == MC_OK, "compute: rc %d: %s", rc, mc_error(sim));
    free(r);
    mc_free(sim);
    return fired;
}

static void compute_overlaps_the_requests_after_it(void)
{
    uint64_t c = compute_run(MC_COMPUTE, 0), d = compute_run(MC_DELAY, 0);
    uint64_t c2 = compute_run(MC_COMPUTE, 1);
    CHECK(c == 3000, "compute: the reads under a COMPUTE end with it: %llu", (unsigned long long)c);
    CHECK(d > 3000 + 100, "compute: after a DELAY the reads add their time: %llu",
          (unsigned long long)d);
    CHECK(c2 == 6000, "compute: a second COMPUTE starts when the first ends: %llu",
          (unsigned long long)c2);
}

/* ---- mc_clone ------------------------------------------------------------------------- */

/* feed records [from, to) (last: the trace ends there), then finish when last */
static int feed_range(mc_sim *sim, const mc_record *r, uint64_t from, uint64_t to, int last)
{
    uint64_t done = from, consumed = 0;
    int rc = MC_PAUSED;
    while (rc == MC_PAUSED || (rc == MC_OK && done < to)) {
        rc = mc_feed(sim, r + done, to - done, last, &consumed);
        done += consumed;
    }
    if (rc != MC_OK || !last) return rc;
    do rc = mc_finish(sim); while (rc == MC_PAUSED);
    return rc;
}

/* a run's results: its summary, then every completion (index, cycle, issue) in order */
static uint64_t results(mc_sim *sim, uint64_t *out, uint64_t cap)
{
    mc_summary s;
    mc_get_summary(sim, &s);
    uint64_t head[] = {s.cycles, s.drain_cycles, s.requests, s.commands, s.refreshes,
                       s.mode_switches, s.epochs, s.records, s.layers};
    uint64_t n = 0;
    for (size_t i = 0; i < sizeof head / sizeof head[0] && n < cap; i++) out[n++] = head[i];
    uint64_t idx[256], cyc[256], iss[256], m;
    while ((m = mc_completions_take(sim, idx, cyc, iss, 256)) > 0)
        for (uint64_t i = 0; i < m && n + 3 <= cap; i++) {
            out[n++] = idx[i];
            out[n++] = cyc[i];
            out[n++] = iss[i];
        }
    return n;
}

/* A copy taken part way through a run, fed the rest of the records, gives the cycles of the
 * whole run in one piece; the original, fed the same, too (nothing is shared between them,
 * and the records' chunks do not matter); a copy of a copy as well; a finished run is not
 * copied. */
static void clone_runs_on_alone(void)
{
    const char *policies[] = {"serial", "authority", "bank_partition"};
    const uint64_t n = 6000, cap = 3 * 6000 + 16;
    mc_record *r = make_trace((int)n, 1, 11);
    uint64_t *want = malloc(cap * sizeof *want), *got = malloc(cap * sizeof *got);
    char err[256];
    for (int p = 0; p < 3; p++) {
        mc_config k = hbm2(policies[p]);
        mc_sim *whole = mc_new(&k, err, sizeof err);
        int rc = feed_range(whole, r, 0, n, 1);
        CHECK(rc == MC_OK, "clone %s: whole run rc %d: %s", policies[p], rc, mc_error(whole));
        uint64_t nw = results(whole, want, cap);
        mc_free(whole);
        /* (1, 1002, 3004: just after a BARRIER, where a cursor another cursor let through
         * took a second turn in its cycle when the records ran out there) */
        const uint64_t cuts[] = {1, 1002, 2000, 3004, 4500, n - 2};
        for (size_t ci = 0; ci < sizeof cuts / sizeof cuts[0]; ci++) {
            const uint64_t cut = cuts[ci];
            mc_sim *sim = mc_new(&k, err, sizeof err);
            rc = feed_range(sim, r, 0, cut, 0);
            mc_sim *copy = rc == MC_OK ? mc_clone(sim, err, sizeof err) : NULL;
            CHECK(copy != NULL, "clone %s at %llu: %s", policies[p], (unsigned long long)cut, err);
            mc_sim *copy2 = copy ? mc_clone(copy, err, sizeof err) : NULL;
            mc_sim *runs[] = {copy, sim, copy2};
            for (int i = 0; i < 3; i++) {
                if (!runs[i]) continue;
                rc = feed_range(runs[i], r, cut, n, 1);
                uint64_t ng = results(runs[i], got, cap);
                CHECK(rc == MC_OK && ng == nw && memcmp(got, want, nw * sizeof *got) == 0,
                      "clone %s at %llu: run %d (0 copy, 1 original, 2 copy of copy) differs "
                      "from the whole run (rc %d, %llu vs %llu results)", policies[p],
                      (unsigned long long)cut, i, rc, (unsigned long long)ng,
                      (unsigned long long)nw);
            }
            CHECK(mc_clone(sim, err, sizeof err) == NULL && strstr(err, "over"),
                  "clone %s: a finished run copied (%s)", policies[p], err);
            mc_free(copy2);
            mc_free(copy);
            mc_free(sim);
        }
    }
    CHECK(mc_clone(NULL, err, sizeof err) == NULL, "clone of NULL");
    free(want);
    free(got);
    free(r);
}

int main(void)
{
    const char *policies[] = {"serial", "authority", "bank_partition"};
    for (int i = 0; i < 3; i++) {
        run_policy(policies[i], 0);
        run_policy(policies[i], 1);
    }
    silent_requestor_is_bounded();
    wait_reads_past_the_window();
    text_reader();
    bad_config();
    bad_records();
    lone_write_drains_at_the_end();
    drained_writes_do_not_clog_a_bank();
    round_robin_takes_turns();
    short_epoch_cap_progresses();
    host_epoch_cap_lengthens_the_hosts_epochs();
    watermark_beyond_int_is_refused();
    long_gap_with_log_is_refused();
    watchdog_reports_livelock();
    refused_configs();
    api_arguments();
    feed_after_last_is_refused();
    decode_beyond_capacity();
    mixed_radix_channels();
    huge_twr_sums_in_64_bits();
    random_configs();
    idle_gap_both_ways();
    compute_overlaps_the_requests_after_it();
    kept_write_neither_hangs_nor_hides_a_dead_wait();
    clone_runs_on_alone();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
