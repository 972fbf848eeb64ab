/* The host's candidate commands: each bank's FR-FCFS choice (its oldest row hit per direction,
 * else an ACT or PRE for its oldest request, or for its oldest write while its command queue
 * is full), recomputed only when the bank changed, and the scan that finds the oldest
 * candidate of a kind that can issue at a given cycle.
 *
 * A candidate's ready cycle is the max of its bank and bank-group terms, kept per bank and
 * class in channel.ready_at (timing.c updates them as commands issue), and its rank and bus
 * terms, shared by every bank of a rank and computed once per scan. The scan itself is then a
 * few loads and compares per bank. The choices and the scan are in candidates.h, to be inlined
 * into the scheduler (frfcfs), which runs them several times per simulated request. */
#include "candidates.h"

/* is a read of w's address older than w in the list starting at h? (writes never overtake
 * earlier reads of their address: write-after-read order) */
int mc_older_read(const channel *c, int32_t h, const req *w)
{
    for (; h >= 0; h = c->slots[h].next)
        if (c->slots[h].addr == w->addr && c->slots[h].seq < w->seq) return 1;
    return 0;
}

/* the scan as picks, the choices brought up to date first (the scheduler's scan after a PIM
 * command; its usual scan calls mc_host_scan_keys directly) */
void mc_host_scan(const mc_sim *sim, channel *c, tick t, int want, mc_pick *col, mc_pick *row,
                  tick *wake)
{
    uint64_t kc, kr;
    int cc, cr, idle;
    mc_update_choices(sim, c);
    mc_host_scan_keys(sim, c, t, want, &kc, &cc, &kr, &cr, &idle, wake);
    *col = mc_pick_of(kc, cc);
    *row = mc_pick_of(kr, cr);
    if (idle >= 0) {
        row->bank = idle;
        row->cls = CAND_IDLE;
    }
}
