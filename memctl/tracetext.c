/* A fast reader of the simple text trace formats (pimrt.trace: dramsim3, ramulator,
 * ramulator_dram): whole lines of a block into records. It takes only what is plainly valid
 * and gives up on a block at the first thing that is not (a malformed line, a number that
 * does not fit, an arrival cycle out of order, an address beyond the capacity); the Python
 * per-line parser then reads that block and names the error. For valid input both give the
 * same records (tests check it). Not part of the controller model. */
#include <stdint.h>
#include <string.h>

#include "memctl.h"

static int is_space(unsigned char c) { return c == ' ' || (c >= 9 && c <= 13); }

static int hex_digit(unsigned char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    c |= 0x20;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* hex with or without 0x; 0 on success */
static int parse_hex(const unsigned char *s, const unsigned char *e, uint64_t *out)
{
    if (e - s > 2 && s[0] == '0' && (s[1] | 0x20) == 'x') s += 2;
    if (s == e) return -1;
    uint64_t v = 0;
    for (; s < e; s++) {
        int d = hex_digit(*s);
        if (d < 0 || v >> 60) return -1;
        v = v << 4 | (uint64_t)d;
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
static int word_is(const unsigned char *s, const unsigned char *e, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(e - s) != n) return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        if (c >= 'A' && c <= 'Z') c = (unsigned char)(c + 32);
        if (c != (unsigned char)word[i]) return 0;
    }
    return 1;
}

#define MAX_TOK 4

int mc_text_parse(int format, const char *text, uint64_t len, uint64_t capacity,
                  uint64_t last_cycle, mc_record *out, uint64_t max, uint64_t *count,
                  uint64_t *used, uint64_t *lines, uint64_t *last_line)
{
    const unsigned char *p = (const unsigned char *)text, *end = p + len;
    uint64_t n = 0, line = 0;
    *count = *used = *lines = 0;
    *last_line = UINT64_MAX;
    while (p < end) {
        const unsigned char *nl = memchr(p, '\n', (size_t)(end - p));
        const unsigned char *le = nl ? nl : end;
        const unsigned char *hash = memchr(p, '#', (size_t)(le - p));
        const unsigned char *ce = hash ? hash : le;
        const unsigned char *ts[MAX_TOK], *te[MAX_TOK];
        int k = 0;
        for (const unsigned char *q = p; q < ce;) {
            while (q < ce && is_space(*q)) q++;
            if (q == ce) break;
            if (k == MAX_TOK) return -1;
            ts[k] = q;
            while (q < ce && !is_space(*q)) {
                if (*q >= 0x80) return -1;
                q++;
            }
            te[k++] = q;
        }
        if (k) {
            if (n == max) break; /* out is full: this line starts the next call */
            mc_record *r = &out[n];
            memset(r, 0, sizeof *r);
            r->requestor = MC_HOST;
            uint64_t addr, cycle = 0;
            switch (format) {
            case MC_TEXT_DRAMSIM3:
                if (k != 3 || parse_hex(ts[0], te[0], &addr) || parse_dec(ts[2], te[2], &cycle))
                    return -1;
                if (word_is(ts[1], te[1], "read") || word_is(ts[1], te[1], "p_mem_rd"))
                    r->op = MC_READ;
                else if (word_is(ts[1], te[1], "write") || word_is(ts[1], te[1], "p_mem_wr"))
                    r->op = MC_WRITE;
                else return -1;
                if (cycle < last_cycle) return -1;
                last_cycle = cycle;
                break;
            case MC_TEXT_RAMULATOR:
                if (k != 2 || parse_auto(ts[1], te[1], &addr)) return -1;
                if (word_is(ts[0], te[0], "ld")) r->op = MC_READ;
                else if (word_is(ts[0], te[0], "st")) r->op = MC_WRITE;
                else return -1;
                break;
            case MC_TEXT_RAMULATOR_DRAM:
                if (k < 1 || k > 2 || parse_hex(ts[0], te[0], &addr)) return -1;
                if (k == 1 || word_is(ts[1], te[1], "r")) r->op = MC_READ;
                else if (word_is(ts[1], te[1], "w")) r->op = MC_WRITE;
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
        p = nl ? nl + 1 : end;
    }
    *count = n;
    *used = (uint64_t)(p - (const unsigned char *)text);
    *lines = line;
    return 0;
}
