/* pim_driver.h: C interface of the batch driver around the Verilated pim_top model
 * (native/pim_driver.cpp). Python reaches it through cffi (pimrt/pim/driver.py). One handle
 * is one unit beside one bank; no call is made per clock cycle: pim_run clocks the model in
 * C++ until the unit drops busy or the cycle cap is reached. */
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

void *pim_new(void);
void pim_free(void *h);
uint32_t pim_lanes(void *h);
uint32_t pim_depth(void *h);
/* host configuration port: sel 0 CRF, 1 SRF, 2 PTR, 3 CNT */
void pim_cfg(void *h, int sel, int idx, uint32_t value);
/* ncols columns of lanes uint32 words each; via_port 1 clocks them through the host port
 * (one column per cycle), 0 copies them straight into the bank array (a backdoor) */
void pim_bank_write(void *h, uint32_t col, const uint32_t *data, uint32_t ncols, int via_port);
void pim_bank_read(void *h, uint32_t col, uint32_t *data, uint32_t ncols, int via_port);
/* run from pc 0: returns 0 on EXIT, the fault code (1..5) on a fault, -1 at the cycle cap;
 * *cycles: cycles the unit was busy; *pc: the faulting pc, or the pc at the cap */
int pim_run(void *h, uint64_t max_cycles, uint64_t *cycles, uint32_t *pc);
/* pim_run that also records the unit's bank-port accesses, in program order: rec[2*i] is the
 * clock (0 = the first clock of the run), rec[2*i+1] the column address with bit 31 set for
 * a write. At most cap records are stored; *nrec is the number made (more than cap: some
 * were dropped). */
int pim_run_record(void *h, uint64_t max_cycles, uint64_t *cycles, uint32_t *pc,
                   uint32_t *rec, uint64_t cap, uint64_t *nrec);
/* clock cycles simulated by this handle so far (all ports, all runs) */
uint64_t pim_clock_count(void *h);

#ifdef __cplusplus
}
#endif
