/* Address mapping: the configured fields, msb..lsb, above the byte offset of a request. */
#include "internal.h"

/* each field's shift and mask (0: not in the mapping); a field named twice takes its most
 * significant place */
void mc_address_init(mc_sim *sim)
{
    const mc_config *cfg = &sim->cfg;
    int shift = cfg->offset_bits;
    sim->mixed_radix = 0;
    for (int i = 0; i < MC_F_COUNT; i++) {
        sim->field_shift[i] = 0;
        sim->field_mask[i] = 0;
    }
    for (int i = cfg->map_count - 1; i >= 0; i--) {
        int bits = cfg->map_bits[i];
        sim->field_shift[cfg->map_fields[i]] = shift;
        sim->field_mask[cfg->map_fields[i]] = (1ull << bits) - 1;
        shift += bits;
        sim->radix[i] = cfg->map_radix[i] ? (uint64_t)cfg->map_radix[i] : 1ull << bits;
        if (cfg->map_radix[i]) sim->mixed_radix = 1;
    }
}

/* a mapping with a field whose count is not a power of two: the request index's digits in
 * the fields' radices, the least significant field first */
void mc_decode_mixed(const mc_sim *sim, uint64_t addr, int64_t *f)
{
    uint64_t x = addr >> sim->cfg.offset_bits;
    for (int i = 0; i < MC_F_COUNT; i++) f[i] = 0;
    for (int i = sim->cfg.map_count - 1; i >= 0; i--) {
        const uint64_t n = sim->radix[i];
        f[sim->cfg.map_fields[i]] = (int64_t)(x % n);
        x /= n;
    }
}

int mc_decode(const mc_sim *sim, uint64_t addr, int64_t *fields)
{
    if (!sim || !fields) {
        if (sim) mc_set_error((mc_sim *)sim, MC_ERR_ARG, "mc_decode: NULL fields");
        return MC_ERR_ARG;
    }
    if (addr >= sim->capacity) /* (its low bits would decode as some other address) */
        return mc_set_error((mc_sim *)sim, MC_ERR_ARG,
                            "mc_decode: address 0x%llx is beyond the capacity (0x%llx bytes)",
                            (unsigned long long)addr, (unsigned long long)sim->capacity);
    mc_decode_fields(sim, addr, fields);
    return MC_OK;
}
