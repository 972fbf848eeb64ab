/* A fast reader of the simple text trace formats (pimrt.trace: dramsim3, ramulator,
 * ramulator_dram): whole lines of a block into records. It takes only what is plainly valid
 * and gives up on a block at the first thing that is not (a malformed line, a number that
 * does not fit, an arrival cycle out of order, an address beyond the capacity); the Python
 * per-line parser then reads that block and names the error. For valid input both give the
 * same records (tests check it). mc_run_text reads a whole file with it and feeds the
 * records to a simulator (pimrt memsim's path: no numpy, no round trip to Python a chunk).
 * Not part of the controller model. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memctl.h"

/* byte classes, as bytes.split() and the Python readers see them */
enum { C_TOKEN = 0, C_BLANK, C_NEWLINE, C_HASH, C_HIGH };

static inline int byte_class(unsigned c)
{
    if (c > ' ' && c < 0x80 && c != '#') return C_TOKEN;
    if (c == '\n') return C_NEWLINE;
    if (c == ' ' || (c >= 9 && c <= 13)) return C_BLANK;
    if (c == '#') return C_HASH;
    return c >= 0x80 ? C_HIGH : C_TOKEN;
}

/* a hex digit's value + 1 (0: not a digit), as a table: digits and letters mixed at random
 * would mispredict a branch on every other byte */
static const unsigned char HEX1[256] = {
    ['0'] = 1, ['1'] = 2, ['2'] = 3, ['3'] = 4, ['4'] = 5, ['5'] = 6, ['6'] = 7, ['7'] = 8,
    ['8'] = 9, ['9'] = 10, ['a'] = 11, ['b'] = 12, ['c'] = 13, ['d'] = 14, ['e'] = 15,
    ['f'] = 16, ['A'] = 11, ['B'] = 12, ['C'] = 13, ['D'] = 14, ['E'] = 15, ['F'] = 16,
};

/* the value of a hex digit, or above 15 */
static inline unsigned hex_value(unsigned char c) { return (unsigned)HEX1[c] - 1u; }

/* hex with or without 0x; 0 on success */
static int parse_hex(const unsigned char *s, const unsigned char *e, uint64_t *out)
{
    if (e - s > 2 && s[0] == '0' && (s[1] | 0x20) == 'x') s += 2;
    if (s == e || e - s > 16) return -1;
    uint64_t v = 0;
    for (; s < e; s++) {
        unsigned d = hex_value(*s);
        if (d > 15) return -1;
        v = v << 4 | d;
    }
    *out = v;
    return 0;
}

static int parse_dec(const unsigned char *s, const unsigned char *e, uint64_t *out)
{
    if (s == e) return -1;
    uint64_t v = 0;
    for (; s < e; s++) {
        unsigned d = (unsigned)*s - '0';
        if (d > 9) return -1;
        if (v > (UINT64_MAX - d) / 10) return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

/* 0x.. hex, else decimal (Ramulator 2.0's load/store addresses) */
static int parse_auto(const unsigned char *s, const unsigned char *e, uint64_t *out)
{
    if (e - s > 2 && s[0] == '0' && (s[1] | 0x20) == 'x') return parse_hex(s, e, out);
    return parse_dec(s, e, out);
}

/* a token equal to word (lower case), ignoring ASCII case as bytes.lower() does */
static int word_is(const unsigned char *s, const unsigned char *e, const char *word, size_t n)
{
    if ((size_t)(e - s) != n) return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        if (c >= 'A' && c <= 'Z') c = (unsigned char)(c + 32);
        if (c != (unsigned char)word[i]) return 0;
    }
    return 1;
}
#define WORD_IS(s, e, w) word_is(s, e, w, sizeof w - 1)

#define MAX_TOK 4
#define FAST_SPAN 64 /* bytes a line of the plain shape reads at most (18 + 1 + 5 + 1 + 19 + 1) */

/* The plain shape of a DRAMsim3 line, "0xHEX READ|WRITE DEC\n" (single spaces, at most 16
 * hex and 19 decimal digits, the op in any case), read without bounds checks: the caller
 * leaves FAST_SPAN bytes after p. Returns the byte after the newline, or NULL for any other
 * shape (the general tokenizer below then reads the line). */
static const unsigned char *dramsim3_plain(const unsigned char *p, uint64_t *addr, int *op,
                                           uint64_t *cycle)
{
    if (p[0] == '0' && (p[1] | 0x20) == 'x') p += 2;
    uint64_t v = 0;
    const unsigned char *s = p;
    for (unsigned d; (d = hex_value(*p)) < 16; p++) v = v << 4 | d;
    if (p == s || p - s > 16 || *p != ' ') return NULL;
    *addr = v;
    p++;
    uint32_t w;
    memcpy(&w, p, 4);
    w |= 0x20202020u; /* lower case (only letters can match below) */
    if (memcmp(&w, "read", 4) == 0 && p[4] == ' ') {
        *op = MC_READ;
        p += 5;
    } else if (memcmp(&w, "writ", 4) == 0 && (p[4] | 0x20) == 'e' && p[5] == ' ') {
        *op = MC_WRITE;
        p += 6;
    } else {
        return NULL;
    }
    v = 0;
    s = p;
    for (unsigned d; (d = (unsigned)*p - '0') <= 9; p++) v = v * 10 + d;
    if (p == s || p - s > 19 || *p != '\n') return NULL;
    *cycle = v;
    return p + 1;
}

int mc_text_parse(int format, const char *text, uint64_t len, uint64_t capacity,
                  uint64_t last_cycle, mc_record *out, uint64_t max, uint64_t *count,
                  uint64_t *used, uint64_t *lines, uint64_t *last_line)
{
    const unsigned char *p = (const unsigned char *)text, *end = p + len;
    uint64_t n = 0, line = 0;
    *count = *used = *lines = 0;
    *last_line = UINT64_MAX;
    while (p < end) {
        if (format == MC_TEXT_DRAMSIM3 && end - p >= FAST_SPAN && n < max) {
            uint64_t addr, cycle;
            int op;
            const unsigned char *next = dramsim3_plain(p, &addr, &op, &cycle);
            if (next) {
                if (cycle < last_cycle || (capacity && addr >= capacity)) return -1;
                last_cycle = cycle;
                mc_record *r = &out[n++];
                memset(r, 0, sizeof *r);
                r->requestor = MC_HOST;
                r->op = (uint8_t)op;
                r->cycle = cycle;
                r->addr = addr;
                *last_line = line++;
                p = next;
                continue;
            }
        }
        const unsigned char *start = p, *ts[MAX_TOK], *te[MAX_TOK];
        int k = 0;
        /* one pass over the line: tokens up to its newline, a '#' ends the data */
        for (;;) {
            while (p < end && byte_class(*p) == C_BLANK) p++;
            if (p == end || *p == '\n') break;
            if (*p == '#') {
                const unsigned char *nl = memchr(p, '\n', (size_t)(end - p));
                p = nl ? nl : end;
                break;
            }
            if (k == MAX_TOK) return -1;
            ts[k] = p;
            int c;
            while (p < end && (c = byte_class(*p)) != C_BLANK && c != C_NEWLINE && c != C_HASH) {
                if (c == C_HIGH) return -1;
                p++;
            }
            te[k++] = p;
        }
        if (k) {
            if (n == max) { /* out is full: this line starts the next call */
                p = start;
                break;
            }
            mc_record *r = &out[n];
            memset(r, 0, sizeof *r);
            r->requestor = MC_HOST;
            uint64_t addr, cycle = 0;
            switch (format) {
            case MC_TEXT_DRAMSIM3:
                if (k != 3 || parse_hex(ts[0], te[0], &addr) || parse_dec(ts[2], te[2], &cycle))
                    return -1;
                if (WORD_IS(ts[1], te[1], "read") || WORD_IS(ts[1], te[1], "p_mem_rd"))
                    r->op = MC_READ;
                else if (WORD_IS(ts[1], te[1], "write") || WORD_IS(ts[1], te[1], "p_mem_wr"))
                    r->op = MC_WRITE;
                else return -1;
                if (cycle < last_cycle) return -1;
                last_cycle = cycle;
                break;
            case MC_TEXT_RAMULATOR:
                if (k != 2 || parse_auto(ts[1], te[1], &addr)) return -1;
                if (WORD_IS(ts[0], te[0], "ld")) r->op = MC_READ;
                else if (WORD_IS(ts[0], te[0], "st")) r->op = MC_WRITE;
                else return -1;
                break;
            case MC_TEXT_RAMULATOR_DRAM:
                if (k > 2 || parse_hex(ts[0], te[0], &addr)) return -1;
                if (k == 1 || WORD_IS(ts[1], te[1], "r")) r->op = MC_READ;
                else if (WORD_IS(ts[1], te[1], "w")) r->op = MC_WRITE;
                else return -1;
                break;
            default:
                return -1;
            }
            if (capacity && addr >= capacity) return -1;
            r->cycle = cycle;
            r->addr = addr;
            n++;
            *last_line = line;
        }
        line++;
        if (p < end) p++; /* past the newline */
    }
    *count = n;
    *used = (uint64_t)(p - (const unsigned char *)text);
    *lines = line;
    return 0;
}

/* feed n records, waiting out pauses (there are none without a command log) */
static int feed_all(mc_sim *sim, const mc_record *recs, uint64_t n)
{
    uint64_t done = 0, consumed;
    for (;;) {
        int rc = mc_feed(sim, recs + done, n - done, 0, &consumed);
        done += consumed;
        if (rc != MC_OK && rc != MC_PAUSED) return rc;
        if (rc == MC_OK && done == n) return MC_OK;
    }
}

#define RUN_BLOCK (1u << 20)  /* bytes read at a time (as pimrt.trace's BLOCK_BYTES) */
#define RUN_RECORDS 8192u     /* records handed to mc_feed at a time */

int mc_run_text(mc_sim *sim, int format, const char *path, uint64_t capacity,
                uint64_t last_cycle, mc_text_pos *pos)
{
    if (!sim || !path || !pos) return MC_ERR_ARG;
    if (format < MC_TEXT_DRAMSIM3 || format > MC_TEXT_RAMULATOR_DRAM) return MC_ERR_ARG;
    memset(pos, 0, sizeof *pos);
    pos->line = 1;
    pos->last_cycle = last_cycle;
    FILE *f = fopen(path, "rb");
    if (!f) return MC_TEXT_STOPPED; /* the caller's reader names why */
    char *buf = malloc(RUN_BLOCK + 1);
    mc_record *recs = malloc(RUN_RECORDS * sizeof *recs);
    int rc = MC_TEXT_STOPPED;
    if (!buf || !recs) goto out;
    uint64_t have = 0;  /* bytes in buf, from the file offset pos->offset */
    int eof = 0;
    for (;;) {
        if (!eof && have < RUN_BLOCK) {
            size_t got = fread(buf + have, 1, RUN_BLOCK - have, f);
            if (got < RUN_BLOCK - have) {
                if (ferror(f)) goto out;
                eof = 1;
            }
            have += got;
        }
        /* whole lines only, unless the file ends without a newline */
        uint64_t whole = have;
        if (!eof) {
            while (whole && buf[whole - 1] != '\n') whole--;
            if (!whole) goto out; /* a line longer than the block: the caller names it */
        }
        if (!whole) break;
        uint64_t at = 0;
        while (at < whole) {
            uint64_t n, used, lines, last;
            if (mc_text_parse(format, buf + at, whole - at, capacity, pos->last_cycle, recs,
                              RUN_RECORDS, &n, &used, &lines, &last))
                goto out; /* pos: the start of this piece */
            if (n) {
                rc = feed_all(sim, recs, n);
                if (rc != MC_OK) goto out;
                rc = MC_TEXT_STOPPED;
                if (format == MC_TEXT_DRAMSIM3) pos->last_cycle = recs[n - 1].cycle;
                pos->last_line = pos->line + last;
                pos->records += n;
            }
            at += used;
            pos->offset += used;
            pos->line += lines;
        }
        memmove(buf, buf + whole, have - whole);
        have -= whole;
        if (eof && !have) break;
    }
    rc = MC_OK;
out:
    free(buf);
    free(recs);
    fclose(f);
    return rc;
}
