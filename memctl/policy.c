/* Sharing policies, chosen by name. Each decides when access authority passes from the
 * side that holds a channel to the other; bank_partition instead splits the banks.
 * Adding a policy: write its hand_over function and add a line to the table. */
#include <string.h>

#include "internal.h"

static int queued(const channel *c, int r) { return c->qcount[r][0] + c->qcount[r][1]; }

/* serial: the owner keeps the channel until it has nothing queued (the front end also
 * drains everything whenever the trace switches requestor). */
static int serial_hand_over(const mc_sim *sim, const channel *c, tick t, tick *wake)
{
    (void)sim;
    (void)t;
    *wake = NEVER;
    return queued(c, 1 - c->owner) > 0 && queued(c, c->owner) == 0;
}

/* authority: exclusive epochs. The owner hands over when the other side waits and
 *  - the owner has nothing queued, or
 *  - the waiting side's queue has reached its high watermark while the owner's has fallen to
 *    its low watermark, or
 *  - the epoch has reached its cap (bounded waiting): epoch_cap, or for the host's epochs
 *    host_epoch_cap where set (a requestor's own cap).
 * An epoch starts when the mode switch is done; the owner keeps it until it has served at
 * least one request (before any other rule, the cap included: every epoch makes progress)
 * and min_epoch has passed. */
static int authority_hand_over(const mc_sim *sim, const channel *c, tick t, tick *wake)
{
    int o = c->owner, x = 1 - o;
    int qx = queued(c, x), qo = queued(c, o);
    *wake = NEVER;
    if (qx == 0) return 0;
    if (qo == 0) return 1;
    /* progress first: an epoch serves at least one request whatever its cap, or a cap shorter
     * than one request's service would hand authority back and forth forever. Woken when it
     * serves one (the channel steps again after every command) */
    if (c->epoch_served == 0) return 0;
    tick age = t - c->epoch_start;
    tick cap = o == MC_HOST && sim->host_epoch_cap > 0 ? sim->host_epoch_cap : sim->epoch_cap;
    if (age >= cap) return 1; /* bounded waiting */
    if (age < sim->min_epoch) {
        *wake = c->epoch_start + sim->min_epoch;
        return 0;
    }
    if ((qx >= sim->hwm[x] && qo <= sim->lwm[o]) || age >= cap) return 1;
    *wake = c->epoch_start + cap;
    return 0;
}

static int never_hand_over(const mc_sim *sim, const channel *c, tick t, tick *wake)
{
    (void)sim;
    (void)c;
    (void)t;
    *wake = NEVER;
    return 0;
}

static const mc_policy POLICIES[] = {
    {"serial", 0, 1, serial_hand_over},
    {"authority", 0, 0, authority_hand_over},
    {"bank_partition", 1, 0, never_hand_over},
};

const mc_policy *mc_find_policy(const char *name)
{
    for (size_t i = 0; i < sizeof POLICIES / sizeof POLICIES[0]; i++)
        if (strcmp(POLICIES[i].name, name) == 0) return &POLICIES[i];
    return NULL;
}
