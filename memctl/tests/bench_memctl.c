/* Standalone speed driver for memctl (not part of `make check`): runs a synthetic trace through
 * the C API the way pimrt.memctl.Controller does (64 Ki-record chunks, records a cursor has not
 * consumed offered again with the next chunk) and prints simulated cycles, commands, CPU time
 * and a hash of the command log, so speed work can be profiled and checked without Python.
 *
 *   make -C memctl bench                 # every case, 1 M requests each
 *   ./bench_memctl hbm2 random 1000000   # one case
 *   ./bench_memctl hbm2 file trace.bin   # raw mc_record array (numpy RECORD_DTYPE .tofile())
 *
 * Parts: hbm2, ddr4 (the values make_config() builds from pimrt/memctl/parts). Traces: stream
 * (address 64 i, reads), mix (stream, i % 3 == 2 writes), random (64 x a 26-bit xorshift
 * value, reads: the shape of synthetic.random, not its numbers; for the exact bench trace use
 * `file` with the records dumped from Python). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../memctl.h"

#define CHUNK (1u << 16)

static void map(mc_config *k, const int *f, const int *b)
{
    for (int i = 0; i < 7; i++) {
        k->map_fields[i] = f[i];
        k->map_bits[i] = b[i];
    }
    k->map_count = 7;
    k->offset_bits = 6;
}

static int part_config(const char *name, mc_config *k)
{
    memset(k, 0, sizeof *k);
    k->request_bytes = 64;
    k->queue_depth = 32; k->bank_queue_depth = 8; k->row_hit_cap = 16;
    k->write_high = 32; k->write_low = 8; k->refresh = 1;
    snprintf(k->policy, sizeof k->policy, "serial");
    const char *arb = getenv("BENCH_ARBITRATION"); /* column_first: the old rule, to compare */
    if (arb && strcmp(arb, "column_first") == 0) k->arbitration = MC_ARB_COLUMN_FIRST;
    if (strcmp(name, "hbm2") == 0) { /* HBM2_8Gb_x128, ro_ra_bg_ba_ch_co */
        k->channels = 8; k->pseudo_channels = 1; k->ranks = 1; k->bankgroups = 4;
        k->banks_per_group = 4; k->rows = 32768; k->columns = 64;
        map(k, (const int[]){MC_F_ROW, MC_F_RANK, MC_F_BANKGROUP, MC_F_BANK, MC_F_PCH,
                             MC_F_CHANNEL, MC_F_COLUMN},
            (const int[]){15, 0, 2, 2, 0, 3, 5});
        k->burst = 2; k->CL = 14; k->CWL = 4; k->tRCDRD = 14; k->tRCDWR = 14; k->tRP = 14;
        k->tRAS = 34; k->tRC = 48; k->tCCD_S = 1; k->tCCD_L = 2; k->tRRD_S = 4; k->tRRD_L = 6;
        k->tFAW = 30; k->tWR = 16; k->tWTR_S = 6; k->tWTR_L = 8; k->tRTP = 4; k->tRTRS = 0;
        k->tREFI = 3900; k->tRFC = 260;
        k->dual_command_bus = 1; k->issue_width = 4;
        return 0;
    }
    if (strcmp(name, "ddr4") == 0) { /* DDR4_8Gb_x8_3200, 2 ranks, ro_ch_pc_ra_ba_bg_co */
        k->channels = 1; k->pseudo_channels = 1; k->ranks = 2; k->bankgroups = 4;
        k->banks_per_group = 4; k->rows = 65536; k->columns = 1024;
        map(k, (const int[]){MC_F_ROW, MC_F_PCH, MC_F_CHANNEL, MC_F_RANK, MC_F_BANK,
                             MC_F_BANKGROUP, MC_F_COLUMN},
            (const int[]){16, 0, 0, 1, 2, 2, 7});
        k->burst = 4; k->CL = 22; k->CWL = 16; k->tRCDRD = 22; k->tRCDWR = 22; k->tRP = 22;
        k->tRAS = 52; k->tRC = 74; k->tCCD_S = 4; k->tCCD_L = 8; k->tRRD_S = 4; k->tRRD_L = 8;
        k->tFAW = 34; k->tWR = 24; k->tWTR_S = 4; k->tWTR_L = 12; k->tRTP = 12; k->tRTRS = 1;
        k->tREFI = 12480; k->tRFC = 560;
        k->dual_command_bus = 0; k->issue_width = 1;
        return 0;
    }
    return -1;
}

static mc_record *make_trace(const char *kind, const char *arg, uint64_t *n)
{
    if (strcmp(kind, "file") == 0) {
        FILE *f = fopen(arg, "rb");
        if (!f) return NULL;
        fseek(f, 0, SEEK_END);
        long bytes = ftell(f);
        fseek(f, 0, SEEK_SET);
        *n = (uint64_t)bytes / sizeof(mc_record);
        mc_record *r = malloc(*n * sizeof *r + 1);
        if (r && fread(r, sizeof *r, *n, f) != *n) {
            free(r);
            r = NULL;
        }
        fclose(f);
        return r;
    }
    *n = strtoull(arg, NULL, 10);
    mc_record *r = calloc(*n + 1, sizeof *r);
    if (!r) return NULL;
    const int random = strcmp(kind, "random") == 0, mix = strcmp(kind, "mix") == 0;
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (uint64_t i = 0; i < *n; i++) {
        if (random) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            r[i].addr = (x >> 38) * 64;
        } else {
            r[i].addr = 64 * i;
            if (mix && i % 3 == 2) r[i].op = MC_WRITE;
        }
    }
    return r;
}

static uint64_t fnv(uint64_t h, const void *p, size_t len)
{
    const unsigned char *s = p;
    for (size_t i = 0; i < len; i++) h = (h ^ s[i]) * 0x100000001b3ull;
    return h;
}

/* drain the command log into the hash (pausing as the Python wrapper does) */
static void drain(mc_sim *sim, mc_cmd *buf, uint64_t *hash, uint64_t *logged)
{
    uint64_t m;
    while ((m = mc_cmdlog_take(sim, buf, CHUNK)) > 0) {
        *hash = fnv(*hash, buf, m * sizeof *buf);
        *logged += m;
    }
}

static int run(const char *part, const char *kind, const char *arg, int log)
{
    mc_config k;
    if (part_config(part, &k)) {
        fprintf(stderr, "unknown part %s (hbm2, ddr4)\n", part);
        return 2;
    }
    uint64_t n;
    mc_record *recs = make_trace(kind, arg, &n);
    if (!recs) {
        fprintf(stderr, "cannot make trace %s %s\n", kind, arg);
        return 2;
    }
    char err[512];
    mc_sim *sim = mc_new(&k, err, sizeof err);
    if (!sim) {
        fprintf(stderr, "mc_new: %s\n", err);
        free(recs);
        return 2;
    }
    mc_cmd *buf = malloc(CHUNK * sizeof *buf);
    uint64_t hash = 0xcbf29ce484222325ull, logged = 0;
    if (log) mc_cmdlog_enable(sim, CHUNK);
    struct timespec t0, t1;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t0);
    uint64_t done = 0;
    int rc = MC_OK;
    /* as Controller.feed / finish: each chunk with the records left over before it, then the
     * last leftovers with `last` set */
    for (uint64_t hi = 0; rc == MC_OK;) {
        int last = hi == n;
        hi = n - hi > CHUNK ? hi + CHUNK : n;
        uint64_t consumed;
        do {
            rc = mc_feed(sim, recs + done, hi - done, last, &consumed);
            done += consumed;
            drain(sim, buf, &hash, &logged);
        } while (rc == MC_PAUSED);
        if (last) break;
    }
    while (rc == MC_OK || rc == MC_PAUSED) {
        rc = mc_finish(sim);
        drain(sim, buf, &hash, &logged);
        if (rc == MC_OK) break;
    }
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t1);
    int status = 0;
    if (rc != MC_OK) {
        fprintf(stderr, "%s %s: error %d: %s\n", part, kind, rc, mc_error(sim));
        status = 1;
    } else {
        mc_summary s;
        mc_get_summary(sim, &s);
        double sec = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        printf("%-5s %-7s %10llu requests %12llu cycles %10llu commands %7.3f s %6.2f Mreq/s",
               part, kind, (unsigned long long)s.requests, (unsigned long long)s.cycles,
               (unsigned long long)s.commands, sec, sec > 0 ? (double)s.requests / sec / 1e6 : 0.0);
        if (log) printf("  log %016llx", (unsigned long long)hash);
        printf("\n");
    }
    mc_free(sim);
    free(buf);
    free(recs);
    return status;
}

int main(int argc, char **argv)
{
    int log = argc > 1 && strcmp(argv[1], "-l") == 0; /* hash the command log too */
    argv += log;
    argc -= log;
    if (argc == 4) return run(argv[1], argv[2], argv[3], log);
    if (argc != 1) {
        fprintf(stderr, "usage: bench_memctl [-l] [PART TRACE N|FILE]\n");
        return 2;
    }
    static const char *cases[][2] = {{"hbm2", "stream"}, {"hbm2", "random"}, {"hbm2", "mix"},
                                     {"ddr4", "stream"}, {"ddr4", "random"}, {"ddr4", "mix"}};
    int status = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        status |= run(cases[i][0], cases[i][1], "1000000", log);
    return status;
}
