/* Address mapping: the configured fields, msb..lsb, above the byte offset of a request. */
#include "internal.h"

void mc_decode_fields(const mc_sim *sim, uint64_t addr, int64_t *f)
{
    const mc_config *cfg = &sim->cfg;
    for (int i = 0; i < MC_F_COUNT; i++) f[i] = 0;
    addr >>= cfg->offset_bits;
    for (int i = cfg->map_count - 1; i >= 0; i--) {
        int bits = cfg->map_bits[i];
        f[cfg->map_fields[i]] = (int64_t)(addr & ((1ull << bits) - 1));
        addr >>= bits;
    }
}

void mc_decode(const mc_sim *sim, uint64_t addr, int64_t *fields)
{
    mc_decode_fields(sim, addr, fields);
}
