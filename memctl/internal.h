/* memctl internals: the state of banks, ranks, channels and the front end. */
#ifndef MEMCTL_INTERNAL_H
#define MEMCTL_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "idmap.h"
#include "memctl.h"

typedef int64_t tick;
#define NEVER ((tick)INT64_MAX / 4)
#define MAXT(a, b) ((a) > (b) ? (a) : (b))
#define MINT(a, b) ((a) < (b) ? (a) : (b))
/* min(a, b) for ticks in 0..NEVER without a branch (where which is smaller is hard to guess) */
static inline tick mc_min_branchless(tick a, tick b)
{
    tick d = b - a;
    return a + (d & (d >> 63));
}

enum { DIR_RD = 0, DIR_WR = 1 };
/* classes of host candidates (candidates.c); RD and WR equal DIR_RD and DIR_WR */
enum { CAND_RD = 0, CAND_WR = 1, CAND_ACT = 2, CAND_PRE = 3, CAND_CLASSES = 4,
       CAND_IDLE = 4 /* closed page: the PRE of a row nothing queued wants */ };
enum { WANT_COL = 1, WANT_ROW = 2 };
enum { CLS_HIT = 0, CLS_MISS = 1, CLS_CONFLICT = 2 };

/* one queued request */
typedef struct req {
    tick arrival;
    uint64_t index;   /* position among all requests of the run */
    uint64_t seq;     /* age order inside the controller */
    uint64_t qseq;    /* order of entry into its bank's command queue (host) */
    uint64_t addr;
    uint32_t layer;
    int32_t row, col;
    int32_t next;     /* next slot in its bank list / PIM FIFO, -1 at the end */
    uint16_t bank;    /* bank index in the channel: (rank * bankgroups + bg) * banks_per_group + ba */
    uint8_t op, requestor, cls, pad;
} req;

typedef struct bank {
    int32_t open_row;          /* -1: closed */
    int32_t hits;              /* column commands since the row opened */
    tick next_act, next_pre, next_rd, next_wr;
    tick closed_at;            /* last PRE + tRP: the bank counts as closed from then on */
    int32_t head[2], tail[2];  /* host request lists per direction, oldest first */
    int32_t count[2];
    /* the scheduler's choice for this bank, recomputed only when the bank changed */
    int32_t col_slot[2], col_prev[2]; /* oldest row hit per direction, -1 if none */
    int32_t other_cmd, other_slot;    /* ACT or PRE for the oldest request, -1 if none */
} bank;

typedef struct group {        /* one bank group of one rank */
    tick next_act, next_rd, next_wr;
} group;

typedef struct rank_state {
    tick next_act, next_rd, next_wr;
    tick faw[4];
    int faw_pos;
    tick refresh_due;
    int refresh_pending;
    /* energy (energy.c): commands, and the cycles some bank of the rank had a row open */
    uint64_t acts, reads, writes, refs, pim_acts, pim_reads, pim_writes;
    int open_banks;
    tick open_since;           /* when open_banks last went from 0 to 1 */
    uint64_t active_cycles;    /* closed spans of open_banks > 0 */
    /* per-bank refresh (refresh 2, refresh.c): refresh_due is then when the next bank's
     * refresh falls due, refb_pos that bank's place in the rank's order, refbs the count */
    int refb_pos;
    uint64_t refbs;
    tick refb_ok;              /* the rank's next REFB no earlier (last REFB + tRREFD) */
} rank_state;

#define HIST_EXACT 4096
#define HIST_SUB 16
#define HIST_LOG 48
#define HIST_BINS (HIST_EXACT + HIST_LOG * HIST_SUB)

typedef struct req_stats {
    mc_chan_stats s;
    uint64_t *hist;            /* latency counts: hist_len of the HIST_BINS bins, those
                                * beyond the longest latency so far not yet allocated */
    uint32_t hist_len;
    int state;                 /* 0 idle, 1 active, 2 blocked: for cycle accounting */
    tick state_since;
} req_stats;

typedef struct channel {
    /* (the scalars the scheduler reads every step come first, a few cache lines; the per-bank
     * arrays after them) */
    int index;
    uint8_t log_channel, log_pch; /* index / pseudo_channels, index % pseudo_channels */
    group *groups;             /* ranks * bankgroups */
    rank_state *ranks;
    req *slots;
    int32_t free_head;
    int qcount[MC_NUM_REQ][2];
    int txq_count[2];
    int drain_left;            /* writes still to move in the current write drain */
    uint64_t txq_banks[2];     /* banks with entries in each transaction queue */
    uint64_t full_mask;        /* banks whose command queue is full */
    uint64_t pending_mask[2];  /* banks with host reads / writes in their command queues */
    uint64_t open_mask;        /* banks with an open row */
    uint64_t dirty_mask;       /* banks whose choice must be recomputed */
    uint64_t col_mask[2];      /* banks whose choice includes a RD / WR row hit */
    uint64_t act_mask, pre_mask; /* banks whose choice is ACT / PRE */
    int32_t pim_head, pim_tail;
    int pim_count;
    /* sharing */
    int mode;                  /* 0 normal, 1 all-bank PIM */
    int owner;                 /* requestor holding access authority */
    int switching;             /* 1 while handing authority over */
    tick mode_ready;           /* no command before this (mode-switch latency) */
    tick epoch_start;          /* when the current owner could first issue */
    uint64_t epoch_served;     /* requests the owner completed in this epoch */
    int32_t pim_row;           /* row open in every bank of the PIM scope, -1 none */
    tick pim_next_col;
    /* the max over the banks of the PIM scope (mc_sim.pim_scope) of each bank term an
     * all-bank command waits for, so that its ready cycle costs O(1) (mc_scope_ready). Kept
     * exact by timing.c, the only writer of the bank terms: every issue to a bank of the scope
     * folds the bank's new terms in (they only grow; the one assignment, closed_at at a PRE,
     * is handled there), and an all-bank command updates them directly. Not kept (and never
     * read) when the part has no PIM units (mc_sim.scope_kept) */
    tick scope_next_act, scope_next_rd, scope_next_wr, scope_next_pre, scope_closed_at;
    /* scheduling */
    tick next_row, next_col;   /* command bus free for row (ACT/PRE/REF) / column commands */
    tick next_event;
    int rr_next;               /* round-robin arbitration: the bank whose turn comes first */
    uint64_t qseq_next;        /* the next request's entry order into a command queue */
    /* refresh at a glance (the ranks' refresh_pending / refresh_due, kept by scheduler.c and
     * timing.c): ranks with a refresh pending, and the earliest refresh_due of all ranks */
    int refreshing;
    tick refresh_next;
    int scan_valid;            /* scan_ready holds since the last full scan: nothing issued */
    tick scan_ready;           /* earliest cycle any candidate of that scan can issue */
    uint64_t mode_switches, epochs;
    /* the watchdog (scheduler.c): refreshes and hand-overs since the channel last served a
     * request while it had work it must serve, and the cycle of that last service */
    uint64_t stuck_rounds;
    tick served_at;
    uint64_t refb_mask;        /* banks whose per-bank refresh is pending (refresh.c): they wait */
    /* the arrays */
    bank banks[MC_MAX_BANKS];
    /* host transaction queues (read queue, write buffer), kept as one FIFO per bank (a request's
     * bank follows from its address, and the queue's order is the requests' age, seq) */
    int32_t txq_head[2][MC_MAX_BANKS], txq_tail[2][MC_MAX_BANKS];
    uint16_t txq_nb[2][MC_MAX_BANKS]; /* transaction-queue entries per bank */
    /* per class (CAND_*) and bank: the bank and bank-group terms of the ready cycle of the
     * bank's candidate of that class, and the candidate's key (seq << 6 | bank: the oldest
     * has the smallest). ready_at is kept for every bank (the terms only grow, so a moved
     * bank-group term is folded in with a max, timing.c); ready_key is valid for the banks of
     * the class's mask (col_mask[d], act_mask, pre_mask) once mc_update_choices ran */
    tick ready_at[CAND_CLASSES][MC_MAX_BANKS];
    uint64_t ready_key[CAND_CLASSES][MC_MAX_BANKS];
    req_stats rs[MC_NUM_REQ];
} channel;

/* cursor.layer before the cursor met a LAYER record: the layer of id 0, if the trace has one
 * by the time the request completes (stats.c) */
#define LAYER_ID0 UINT32_MAX

/* records held: absolute indices [lowest position of a cursor reading it, hi) in
 * rec[index & mask] */
typedef struct mc_ring {
    mc_record *rec;
    uint64_t mask, hi;
} mc_ring;

typedef struct cursor {
    uint64_t pos;              /* absolute index of the next record to look at (split: in its
                                * side's stream) */
    uint64_t shared;           /* markers every cursor reads (mc_shared_op) passed so far: the
                                * same marker for every cursor, whichever stream holds it */
    uint32_t layer;            /* index into mc_sim.layers, or LAYER_ID0 */
    tick next;                 /* earliest cycle this cursor can act */
    tick cycle;                /* cycle of the last offers */
    uint64_t offers;           /* requests offered in that cycle */
    int blocked;               /* waiting for a queue slot */
    int barrier;               /* waiting at a barrier */
    tick delay_until;          /* in a DELAY until then (0: not in one) */
    tick busy_until;           /* computing (a COMPUTE record) until then */
    int waiting;               /* at a WAIT for an event that has not fired */
} cursor;

typedef struct event {
    uint32_t id;
    uint64_t pos;              /* record index of its SIGNAL */
    tick reached, fired;       /* NEVER until they happen */
    tick max_done;             /* latest completion of the requests it waits for */
    uint64_t pending;          /* of those, still outstanding */
    int requestor, signaled;
} event;

typedef struct layer_span {
    uint32_t id;
    tick start, end;
    uint64_t requests;
    mc_layer_stats by[MC_NUM_REQ];   /* per requestor */
} layer_span;

struct mc_policy;

struct mc_sim {
    mc_config cfg;
    const struct mc_policy *policy;
    int partition_banks;       /* policy->partition_banks, at hand */
    char err[512];
    int err_code;              /* the code of the error in err (MC_ERR_*); MC_ERR_ARG (a bad
                                * argument of one call) does not stop the simulation */
    int finished;              /* mc_finish ran: no more records */
    int nch;                   /* channels x pseudo-channels */
    int nbanks;                /* banks per channel */
    int pim_scope_count;
    uint64_t pim_scope;        /* banks that PIM commands act on */
    uint64_t scope_kept;       /* banks whose terms timing.c folds into channel.scope_next_*:
                                * pim_scope, or none when the part has no PIM units (then no
                                * PIM request is accepted, and the maxima are never read) */
    uint64_t host_banks;       /* banks the host may use */
    int host_bank_list[MC_MAX_BANKS];
    int host_bank_count;
    uint8_t bank_rank[MC_MAX_BANKS];
    uint16_t bank_group[MC_MAX_BANKS]; /* index into channel.groups */
    uint8_t bank_bg[MC_MAX_BANKS];     /* bank group inside the rank (for the command log) */
    int8_t bank_ba[MC_MAX_BANKS];      /* bank inside the bank group (for the command log) */
    uint64_t rank_banks[8];            /* banks of each rank */
    uint64_t capacity;
    int field_shift[MC_F_COUNT];       /* address fields (address.c) */
    uint64_t field_mask[MC_F_COUNT];
    uint64_t radix[MC_F_COUNT];        /* each mapping entry's count (msb..lsb, as map_fields) */
    int mixed_radix;                   /* some count not a power of two: mc_decode_mixed */
    channel *ch;
    /* authority parameters (current) */
    int hwm[MC_NUM_REQ], lwm[MC_NUM_REQ];
    int host_qd;               /* the host's transaction queue depth (host_queue_depth or queue_depth) */
    tick epoch_cap, min_epoch;
    tick host_epoch_cap;       /* the host's epochs' cap; 0: epoch_cap */
    /* time */
    tick now;
    uint64_t seq;
    /* front end: one cursor per requestor walks the trace (serial: one cursor for both) */
    int cursors;               /* 1 or 2 */
    cursor cur[MC_NUM_REQ];
    /* the records the cursors have not all passed. mc_feed: one stream for every cursor in
     * rings[0]; the leading cursor reads at most `window` records ahead of the lagging one
     * (back-pressure), unless the lagging one waits for an event nothing before the leading
     * one signalled. mc_feed_side (split): each requestor's stream in rings[requestor],
     * each side's cursor holding only what it has not read */
    mc_ring rings[MC_NUM_REQ];
    int split;                 /* fed by mc_feed_side */
    int side_end[MC_NUM_REQ];  /* split: that side's last records are in */
    uint64_t shared_fed[MC_NUM_REQ]; /* split: shared markers (mc_shared_op) fed to each side */
    uint64_t window, held_peak;
    uint64_t base;             /* the lowest cursor's position after the last mc_feed */
    uint64_t param_upto;       /* PARAM records among the first param_upto shared markers (a
                                * cursor's `shared`) have been applied */
    uint64_t requests;
    /* the decoded fields of the last request the controller refused (a full queue): its cursor
     * offers it again once a slot frees, usually a few cycles later (index + 1; 0: none) */
    uint64_t refused_index, refused_addr;
    int refused_who, refused_ch, refused_bank;
    int32_t refused_row, refused_col;
    int fe_end;                /* every record has been handed in (mc_feed with last) */
    int fe_done;               /* the host's stream has ended: fe_end and the host's cursor (serial:
                                * the cursor) past every record; its last writes drain (scheduler.c) */
    int fe_barrier;            /* some cursor waits at a barrier */
    tick fe_at;                /* the front end's last step: its cycle, and the cursor it */
    int fe_from;               /* stopped at (split: one out of records) or `cursors` */
    int fe_last_req;           /* requestor of the last offered request (serial policy) */
    uint64_t outstanding;      /* accepted, not yet completed */
    uint64_t outstanding_by[MC_NUM_REQ];
    tick last_done_by[MC_NUM_REQ];
    event *events;             /* in order of first use; event_map: id -> index */
    uint64_t nevents, events_cap;
    idmap event_map;
    uint64_t *pending_events;  /* indices of signaled events not yet fired */
    uint64_t npending, pending_cap;
    tick last_done;            /* latest completion so far */
    tick last_read_done, last_write_accept;
    tick end;                  /* the end of the run (mc_finish), -1 before */
    /* results */
    uint64_t commands, refreshes;
    int paused;
    mc_cmd *log;
    uint64_t log_len, log_cap, log_limit;
    int log_on;
    uint64_t *mode_cycle;
    uint32_t *mode_channel;
    uint8_t *mode_enter;
    uint64_t mode_len, mode_cap;
    uint64_t *comp_index, *comp_cycle, *comp_issue, *comp_arrival;
    uint64_t comp_len, comp_cap;
    layer_span *layers;        /* in order of first use; layer_map: id -> index */
    uint64_t nlayers, layers_cap;
    idmap layer_map;
};

typedef struct mc_policy {
    const char *name;
    int partition_banks;   /* host and PIM own separate banks; no PIM mode */
    int barrier_on_switch; /* front end drains everything when the requestor changes */
    /* may authority pass from the owner to the other side at t? sets *wake to the next cycle
     * the answer could change (NEVER if only a queue change can change it). The scheduler asks
     * only while the other side has something queued: authority never passes to an empty side */
    int (*hand_over)(const mc_sim *sim, const channel *c, tick t, tick *wake);
} mc_policy;

const mc_policy *mc_find_policy(const char *name);

/* sim.c */
int64_t mc_refresh_service(const mc_config *k);
/* an error stopped the simulation (every code but MC_ERR_ARG, a bad argument of one call) */
static inline int mc_failed(const mc_sim *sim) { return sim->err_code && sim->err_code != MC_ERR_ARG; }

/* address.c */
void mc_address_init(mc_sim *sim);
/* an address's fields (MC_F_*); inline: the front end decodes every request */
void mc_decode_mixed(const mc_sim *sim, uint64_t addr, int64_t *f);
static inline void mc_decode_fields(const mc_sim *sim, uint64_t addr, int64_t *f)
{
    if (sim->mixed_radix) {
        mc_decode_mixed(sim, addr, f);
        return;
    }
    for (int i = 0; i < MC_F_COUNT; i++)
        f[i] = (int64_t)((addr >> sim->field_shift[i]) & sim->field_mask[i]);
}

/* timing.c: issuing a command updates every level it constrains (and channel.ready_at) */
tick mc_act_ready(const mc_sim *sim, const channel *c, int b);
tick mc_col_ready(const mc_sim *sim, const channel *c, int b, int dir);
void mc_issue_act(mc_sim *sim, channel *c, int b, int32_t row, tick t);
void mc_issue_pre(mc_sim *sim, channel *c, int b, tick t);
void mc_issue_col(mc_sim *sim, channel *c, int b, int dir, tick t);
void mc_issue_ref(mc_sim *sim, channel *c, int r, tick t);
void mc_skip_refreshes(mc_sim *sim, channel *c, int r, uint64_t n);
/* per-bank refresh (refresh.c; the bank terms in timing.c, the hooks in scheduler.c) */
void mc_refb_terms(mc_sim *sim, channel *c, int b, tick t, tick done);
tick mc_refb_interval(const mc_config *k);
void mc_refb_init(const mc_sim *sim, channel *c);
int mc_refb_step(mc_sim *sim, channel *c, tick t, tick *wake);
int mc_refb_skip_ok(const mc_sim *sim, const channel *c, tick t);
uint64_t mc_refb_skip(mc_sim *sim, channel *c, tick stop);
int mc_close_pim_row(mc_sim *sim, channel *c, tick t, tick *wake);
/* bank b of a refresh that falls due: -1 if its row is closed; else the row precharged at t
 * (1) or, not yet allowed to close, its ready cycle into *wake (0) */
int mc_precharge_for_refresh(mc_sim *sim, channel *c, int b, tick t, tick *wake);
void mc_watchdog(mc_sim *sim, channel *c, tick t);
tick mc_scope_ready(const mc_sim *sim, const channel *c, int cmd);
void mc_issue_pim(mc_sim *sim, channel *c, int cmd, int32_t row, tick t);

/* energy.c: a bank of rank rk opened / closed at t (background energy: active standby while
 * any bank of the rank is open) */
static inline void mc_rank_opened(rank_state *rk, tick t)
{
    if (rk->open_banks++ == 0) rk->open_since = t;
}
static inline void mc_rank_closed(rank_state *rk, tick t)
{
    if (--rk->open_banks == 0) rk->active_cycles += (uint64_t)(t - rk->open_since);
}

/* log.c */
void mc_log_cmd_slow(mc_sim *sim, const channel *c, int b, int cmd, int by, int32_t row,
                     int32_t col, tick t);
/* count a command; the mode log and the command log (when on) are kept out of line */
static inline void mc_log_cmd(mc_sim *sim, const channel *c, int b, int cmd, int by, int32_t row,
                              int32_t col, tick t)
{
    sim->commands++;
    if (sim->log_on || cmd == MC_CMD_PIM_ENTER || cmd == MC_CMD_PIM_EXIT)
        mc_log_cmd_slow(sim, c, b, cmd, by, row, col, t);
}

/* stats.c */
void mc_stats_init_channel(mc_sim *sim, channel *c);
void mc_account_slow(mc_sim *sim, channel *c, tick t);
void mc_account_close(mc_sim *sim, channel *c, tick t);
void mc_record_latency(mc_sim *sim, channel *c, const req *r, tick done, tick issue);
int mc_set_error(mc_sim *sim, int code, const char *fmt, ...);

/* candidates.c: the oldest host candidate of a kind that can issue */
typedef struct mc_pick {
    uint64_t seq;              /* UINT64_MAX: none (yet) */
    int bank, cls;             /* bank -1: none */
} mc_pick;
int mc_older_read(const channel *c, int32_t h, const req *w);
void mc_host_scan(const mc_sim *sim, channel *c, tick t, int want, mc_pick *col, mc_pick *row,
                  tick *wake);

/* scheduler.c */
void mc_channel_step(mc_sim *sim, channel *c, tick t);

/* may the requestor use the channel at t? (it holds the authority, in its mode, and the mode
 * switch is done; bank_partition: always) */
static inline int mc_can_serve(const mc_sim *sim, const channel *c, int requestor, tick t)
{
    if (sim->partition_banks) return 1;
    return c->owner == requestor && !c->switching && c->mode == (requestor == MC_PIM) &&
           c->mode_ready <= t;
}

/* a requestor's cycle-accounting state at t: 0 idle (nothing queued), 1 active (queued and
 * allowed), 2 blocked (queued while the other side holds the channel or it switches) */
static inline int mc_account_state(const mc_sim *sim, const channel *c, int r, tick t)
{
    if (c->qcount[r][0] + c->qcount[r][1] == 0) return 0;
    return mc_can_serve(sim, c, r, t) ? 1 : 2;
}

/* stats.c: a requestor's cycle-accounting state may have changed at t; inline: it rarely has */
static inline void mc_account(mc_sim *sim, channel *c, tick t)
{
    for (int r = 0; r < MC_NUM_REQ; r++) {
        if (mc_account_state(sim, c, r, t) != c->rs[r].state) {
            mc_account_slow(sim, c, t);
            return;
        }
    }
}

/* frontend.c */
int mc_frontend_step(mc_sim *sim, tick t);
uint64_t mc_lowest_cursor(const mc_sim *sim);
/* the records cursor k reads: every cursor's one stream, or (split) its side's */
static inline const mc_ring *mc_ring_of(const mc_sim *sim, int k) { return &sim->rings[sim->split ? k : 0]; }
/* cursor k has read every record handed in to it so far */
static inline int mc_at_end(const mc_sim *sim, int k) { return sim->cur[k].pos >= mc_ring_of(sim, k)->hi; }
/* no more records will come for cursor k */
static inline int mc_no_more(const mc_sim *sim, int k) { return sim->split ? sim->side_end[k] : sim->fe_end; }
/* markers that act for every cursor: each cursor reads them (split: both sides' streams hold
 * them, in the same order) */
static inline int mc_shared_op(int op) { return op == MC_LAYER || op == MC_PARAM || op == MC_BARRIER; }
uint64_t mc_feed_room(const mc_sim *sim);
int mc_ring_push(mc_sim *sim, int side, const mc_record *recs, uint64_t n);
/* a copy of ring `side`'s buffer (mc_clone): 0, or -1 out of memory */
int mc_ring_copy(const mc_sim *sim, int side, mc_ring *to);
int64_t mc_layer_index(const mc_sim *sim, uint32_t layer);
void mc_release_slot(mc_sim *sim, channel *c, int32_t slot, tick done, tick t);

#endif
