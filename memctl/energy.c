/* DRAM energy: DRAMsim3's model (its Config::InitPowerParams and SimpleStats), computed from
 * the counts the timing keeps per rank (timing.c) at the end of the run.
 *
 * Per command, on every device of the rank, V x mA x cycles x tCK (ns) = pJ:
 *   ACT  VDD x (IDD0 x tRC - (IDD3N x tRAS + IDD2N x tRP))
 *   RD   VDD x (IDD4R - IDD3N) x burst        WR  VDD x (IDD4W - IDD3N) x burst
 *   REF  VDD x (IDD5AB - IDD3N) x tRFC        (all-bank, refresh = "rank")
 *   REFB VDD x (IDD5B - IDD3N) x tRFCb        (one bank, refresh = "bank"; refresh.c)
 * and per cycle of each rank VDD x IDD3N while some bank of it has a row open (active
 * standby), VDD x IDD2N while none has (precharged standby). memctl models no power-down or
 * self-refresh. DRAMsim3 leaves out tCK (its figures are V x mA x cycles): the same only at
 * tCK = 1 ns. PIM all-bank commands: a PIM_ACT costs an ACT in every bank it opens, a
 * PIM_RD / PIM_WR the bank's share (pim_column_share) of a RD / WR in every bank of its scope.
 */
#include "internal.h"

static void add_rank(const mc_sim *sim, const rank_state *rk, tick end, mc_energy *e)
{
    e->acts += rk->acts;
    e->reads += rk->reads;
    e->writes += rk->writes;
    e->refreshes += rk->refs;
    e->bank_refreshes += rk->refbs;
    e->pim_acts += rk->pim_acts;
    e->pim_reads += rk->pim_reads;
    e->pim_writes += rk->pim_writes;
    uint64_t active = rk->active_cycles;
    if (rk->open_banks > 0 && end > rk->open_since) active += (uint64_t)(end - rk->open_since);
    active = active < (uint64_t)end ? active : (uint64_t)end;
    e->active_cycles += active;
    e->precharged_cycles += (uint64_t)end - active;
    (void)sim;
}

int mc_get_energy(const mc_sim *sim, int channel, int rank, mc_energy *out)
{
    if (!sim || !out) {
        if (sim) mc_set_error((mc_sim *)sim, MC_ERR_ARG, "mc_get_energy: NULL pointer");
        return MC_ERR_ARG;
    }
    const mc_config *k = &sim->cfg;
    if (channel < -1 || channel >= sim->nch || rank < -1 || rank >= k->ranks) {
        mc_set_error((mc_sim *)sim, MC_ERR_ARG,
                     "mc_get_energy: channel %d / rank %d out of range (channels 0..%d, ranks "
                     "0..%d, -1 for all)", channel, rank, sim->nch - 1, k->ranks - 1);
        return MC_ERR_ARG;
    }
    mc_energy e = {0};
    const tick end = sim->end >= 0 ? sim->end : sim->now;
    e.cycles = (uint64_t)end;
    for (int ci = 0; ci < sim->nch; ci++) {
        if (channel >= 0 && ci != channel) continue;
        for (int r = 0; r < k->ranks; r++)
            if (rank < 0 || r == rank) add_rank(sim, &sim->ch[ci].ranks[r], end, &e);
    }
    e.available = k->energy;
    if (k->energy) {
        const double s = k->VDD * k->tCK_ns * k->devices_per_rank; /* mA x cycles -> pJ */
        const double act = s * (k->IDD0 * k->tRC - (k->IDD3N * k->tRAS + k->IDD2N * k->tRP));
        const double rd = s * (k->IDD4R - k->IDD3N) * k->burst;
        const double wr = s * (k->IDD4W - k->IDD3N) * k->burst;
        e.act_pj = act * (double)e.acts;
        e.read_pj = rd * (double)e.reads;
        e.write_pj = wr * (double)e.writes;
        e.refresh_pj = s * (k->IDD5AB - k->IDD3N) * k->tRFC * (double)e.refreshes;
        e.refresh_bank_pj = e.bank_refreshes ? /* (a part without IDD5B issues none) */
            s * (k->IDD5B - k->IDD3N) * k->tRFCb * (double)e.bank_refreshes : 0.0;
        e.pim_act_pj = act * (double)e.pim_acts;
        e.pim_read_pj = rd * k->pim_column_share * (double)e.pim_reads;
        e.pim_write_pj = wr * k->pim_column_share * (double)e.pim_writes;
        e.active_standby_pj = s * k->IDD3N * (double)e.active_cycles;
        e.precharged_standby_pj = s * k->IDD2N * (double)e.precharged_cycles;
        e.total_pj = e.act_pj + e.read_pj + e.write_pj + e.refresh_pj + e.pim_act_pj +
                     e.pim_read_pj + e.pim_write_pj + e.active_standby_pj +
                     e.precharged_standby_pj + e.refresh_bank_pj;
    }
    *out = e;
    return MC_OK;
}
