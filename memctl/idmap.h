/* A map from 32-bit ids (event ids, layer ids) to dense indices given in order of first use.
 * Open addressing with linear probing, kept at most half full: a trace's sparse ids cost
 * what it uses, not its largest id. */
#ifndef MEMCTL_IDMAP_H
#define MEMCTL_IDMAP_H

#include <stdint.h>
#include <stdlib.h>

typedef struct idmap {
    uint32_t *keys;
    uint64_t *vals;            /* index + 1; 0: empty slot */
    uint64_t cap, len;         /* cap: a power of two, or 0 before the first put */
} idmap;

static inline uint64_t idmap_slot(uint32_t id, uint64_t cap)
{
    return (uint64_t)((id * 0x9E3779B97F4A7C15ull) >> 20) & (cap - 1);
}

/* the index of id, or -1 */
static inline int64_t idmap_get(const idmap *m, uint32_t id)
{
    if (!m->cap) return -1;
    for (uint64_t s = idmap_slot(id, m->cap);; s = (s + 1) & (m->cap - 1)) {
        if (!m->vals[s]) return -1;
        if (m->keys[s] == id) return (int64_t)(m->vals[s] - 1);
    }
}

static inline void idmap_insert(uint32_t *keys, uint64_t *vals, uint64_t cap, uint32_t id,
                                uint64_t val)
{
    uint64_t s = idmap_slot(id, cap);
    while (vals[s]) s = (s + 1) & (cap - 1);
    keys[s] = id;
    vals[s] = val;
}

/* add id (not present) with the given index; 0, or -1 out of memory */
static inline int idmap_put(idmap *m, uint32_t id, uint64_t index)
{
    if (2 * (m->len + 1) > m->cap) {
        uint64_t cap = m->cap ? 2 * m->cap : 64;
        uint32_t *keys = malloc(cap * sizeof *keys);
        uint64_t *vals = calloc(cap, sizeof *vals);
        if (!keys || !vals) {
            free(keys);
            free(vals);
            return -1;
        }
        for (uint64_t s = 0; s < m->cap; s++)
            if (m->vals[s]) idmap_insert(keys, vals, cap, m->keys[s], m->vals[s]);
        free(m->keys);
        free(m->vals);
        m->keys = keys;
        m->vals = vals;
        m->cap = cap;
    }
    idmap_insert(m->keys, m->vals, m->cap, id, index + 1);
    m->len++;
    return 0;
}

static inline void idmap_free(idmap *m)
{
    free(m->keys);
    free(m->vals);
    m->keys = NULL;
    m->vals = NULL;
    m->cap = m->len = 0;
}

#endif
