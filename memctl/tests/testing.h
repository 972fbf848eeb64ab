/* What the C tests share: the CHECK counters and the HBM2 part they start from. */
#ifndef MEMCTL_TESTING_H
#define MEMCTL_TESTING_H

#include <stdio.h>
#include <string.h>

#include "../memctl.h"

static int passed, failed;
#define CHECK(cond, ...)                                                 \
    do {                                                                 \
        if (cond) passed++;                                              \
        else {                                                           \
            failed++;                                                    \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);         \
            fprintf(stderr, __VA_ARGS__);                                \
            fprintf(stderr, "\n");                                       \
        }                                                                \
    } while (0)

/* DRAMsim3's HBM2_8Gb_x128 with PIM: 8 channels, 4 bank groups x 4 banks, mapping
 * ro ra bg ba ch co, refresh on, the PIM in banks 2 and 3 of every bank group */
static inline mc_config hbm2_base(const char *policy)
{
    mc_config k;
    memset(&k, 0, sizeof k);
    k.channels = 8; k.pseudo_channels = 1; k.ranks = 1; k.bankgroups = 4; k.banks_per_group = 4;
    k.rows = 32768; k.columns = 32; k.request_bytes = 64;
    int f[] = {MC_F_ROW, MC_F_RANK, MC_F_BANKGROUP, MC_F_BANK, MC_F_CHANNEL, MC_F_PCH, MC_F_COLUMN};
    int b[] = {15, 0, 2, 2, 3, 0, 5};
    for (int i = 0; i < 7; i++) { k.map_fields[i] = f[i]; k.map_bits[i] = b[i]; }
    k.map_count = 7; k.offset_bits = 6;
    k.burst = 2; k.CL = 14; k.CWL = 4; k.tRCDRD = 14; k.tRCDWR = 14; k.tRP = 14; k.tRAS = 34;
    k.tRC = 48; k.tCCD_S = 1; k.tCCD_L = 2; k.tRRD_S = 4; k.tRRD_L = 6; k.tFAW = 30; k.tWR = 16;
    k.tWTR_S = 6; k.tWTR_L = 8; k.tRTP = 4; k.tRTRS = 0; k.tREFI = 3900; k.tRFC = 260;
    k.queue_depth = 32; k.bank_queue_depth = 8; k.dual_command_bus = 1;
    k.row_hit_cap = 4; k.write_high = 32; k.write_low = 8;
    k.refresh = 1; k.issue_width = 4;
    k.pim_enabled = 1; k.pim_column_cycles = 8; k.mode_switch_cycles = 24;
    snprintf(k.policy, sizeof k.policy, "%s", policy);
    k.pim_bank_mask = 0xCCCC;
    return k;
}

#endif
