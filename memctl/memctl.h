/* memctl: a cycle-level model of a DRAM memory controller shared by a host and PIM units.
 *
 * Public API, used by pimrt through cffi (native/memctl_build.py). Every function that can
 * fail returns MC_OK or an error code and leaves a message in mc_error(sim); nothing aborts.
 */
#ifndef MEMCTL_H
#define MEMCTL_H

#include <stdint.h>

#define MC_OK 0
#define MC_ERR_CONFIG 1    /* impossible configuration */
#define MC_ERR_TRACE 2     /* a record the controller cannot take (bad op, address too large) */
#define MC_ERR_STATE 3     /* internal invariant broken (a bug): message says which */
#define MC_ERR_MEMORY 4
#define MC_PAUSED 5        /* mc_feed returned early so the caller can drain the command log */
#define MC_ERR_ARG 6       /* a bad argument to a getter (index out of range, NULL pointer) */
#define MC_ERR_STUCK 7     /* the watchdog: requests wait and none is served (a livelock) */

#define MC_MAX_CHANNELS 64
#define MC_MAX_BANKS 64    /* banks per channel (ranks x bank groups x banks) */
#define MC_NUM_REQ 2       /* requestors: 0 host, 1 pim */
#define MC_DEFAULT_WINDOW 1048576 /* records one cursor may read ahead of the other (mc_set_window) */
#define MC_MAX_QUEUE 65536 /* queue_depth, host_queue_depth, bank_queue_depth */
#define MC_ARB_ROUND_ROBIN 0 /* mc_config.arbitration */
#define MC_ARB_COLUMN_FIRST 1
/* the latest arrival cycle (and epoch cap) the simulator represents: 2^60, far enough below
 * its internal "never" (2^61) that no timing sum after it reaches that */
#define MC_MAX_CYCLE 1152921504606846976LL
#define MC_LOG_GAP_REFRESHES 1000000 /* refresh intervals an idle gap may hold with the log on */

/* record ops (pimrt.trace.records) */
enum {
    MC_READ = 0, MC_WRITE = 1, MC_LAYER = 2, MC_PARAM = 3, MC_BARRIER = 4,
    MC_DELAY = 5,   /* the requestor's stream pauses `value` cycles (compute time) */
    MC_SIGNAL = 6,  /* event `value` fires once the requestor's earlier requests completed */
    MC_WAIT = 7,    /* the requestor's stream waits until event `value` has fired */
    MC_COMPUTE = 8  /* the requestor computes `value` cycles while its stream goes on: the
                     * requests after it issue meanwhile; its next COMPUTE, DELAY, SIGNAL,
                     * WAIT or BARRIER waits until the computing is done */
};
enum { MC_HOST = 0, MC_PIM = 1 };
/* PARAM ids */
enum {
    MC_P_HIGH_WATERMARK = 1, MC_P_HOST_HWM = 2, MC_P_PIM_HWM = 3, MC_P_EPOCH_CAP = 4,
    MC_P_MIN_EPOCH = 5, MC_P_LOW_WATERMARK = 6, MC_P_HOST_LWM = 7, MC_P_PIM_LWM = 8,
    MC_P_HOST_EPOCH_CAP = 9
};
/* address fields */
enum { MC_F_ROW = 0, MC_F_RANK, MC_F_BANKGROUP, MC_F_BANK, MC_F_CHANNEL, MC_F_PCH, MC_F_COLUMN,
       MC_F_COUNT };
/* commands (command log) */
enum {
    MC_CMD_ACT = 0, MC_CMD_PRE, MC_CMD_RD, MC_CMD_WR, MC_CMD_REF,
    MC_CMD_PIM_ENTER, MC_CMD_PIM_EXIT, MC_CMD_PIM_ACT, MC_CMD_PIM_RD, MC_CMD_PIM_WR,
    MC_CMD_PIM_PRE, MC_CMD_REFB, MC_CMD_COUNT /* REFB: one bank's refresh (refresh 2) */
};
enum { MC_BY_HOST = 0, MC_BY_PIM = 1, MC_BY_CTRL = 2 };

typedef struct mc_record {
    uint64_t cycle;
    uint64_t addr;
    uint32_t value;
    uint8_t op;
    uint8_t requestor;
    uint16_t param;
} mc_record;

typedef struct mc_config {
    /* organisation */
    int channels, pseudo_channels, ranks, bankgroups, banks_per_group, rows, columns;
    int request_bytes;
    /* address mapping: fields msb..lsb, with their bit counts; offset_bits below them. A
     * field whose count is not a power of two (a GPU's 5 or 6 stacks: 40 or 48 channels) gives
     * it in map_radix (0: 1 << map_bits) and the address decodes digit by digit in that mixed
     * radix, the least significant field first */
    int map_fields[MC_F_COUNT];
    int map_bits[MC_F_COUNT];
    int map_radix[MC_F_COUNT];
    int map_count;
    int offset_bits;
    /* timing, memory cycles */
    int burst, CL, CWL, tRCDRD, tRCDWR, tRP, tRAS, tRC, tCCD_S, tCCD_L, tRRD_S, tRRD_L, tFAW;
    int tWR, tWTR_S, tWTR_L, tRTP, tRTRS, tREFI, tRFC;
    /* controller */
    int queue_depth;          /* transaction queue per requestor, channel and direction */
    int host_queue_depth;     /* the host's (requests it may have in flight); 0: queue_depth */
    int bank_queue_depth;     /* command queue per bank (host); 0: as deep as needed */
    int dual_command_bus;     /* a row and a column command may issue in the same cycle (HBM) */
    int row_hit_cap;
    int arbitration;          /* among the banks' commands: MC_ARB_ROUND_ROBIN (0, DRAMsim3's:
                               * banks in turn from the one after the last that issued, each
                               * offering its first ready command, row or column alike) or
                               * MC_ARB_COLUMN_FIRST (1: a ready row hit first, else the oldest) */
    int write_high, write_low;
    int closed_page;          /* 0 open-page, 1 closed-page */
    int refresh;              /* 0 none, 1 per rank (all-bank), 2 per bank (tRFCb; refresh.c) */
    int issue_width;          /* front end: requests offered per cycle */
    /* PIM */
    int pim_enabled;
    int pim_column_cycles;    /* between two all-bank column commands */
    int mode_switch_cycles;
    /* sharing policy by name: "serial", "bank_partition", "authority" */
    char policy[32];
    uint64_t pim_bank_mask;   /* bank_partition: banks (index in channel) that belong to the PIM */
    /* authority defaults (PARAM records change them) */
    int host_hwm, pim_hwm;    /* 0: 3/4 of queue_depth */
    int host_lwm, pim_lwm;    /* 0: 1/4 of queue_depth; -1: none */
    int64_t epoch_cap, min_epoch;
    int64_t host_epoch_cap;   /* the host's own epochs' cap (0: epoch_cap for both sides) */
    int keep_completions;     /* record (request index, finish cycle) for tests */
    /* energy (DRAMsim3's model, energy.c): the currents of one device in mA, VDD in V, tCK in
     * ns, devices per rank (bus_width / device_width). energy 0: the part gives no currents,
     * mc_get_energy then reports the counts only (available 0) */
    int energy;
    double tCK_ns, VDD, IDD0, IDD2N, IDD3N, IDD4R, IDD4W, IDD5AB, devices_per_rank;
    /* the bank's share of a column access's energy (IDD4R/W - IDD3N), the rest being the
     * interface: what one bank's PIM_RD / PIM_WR costs (all-bank commands move no data over
     * the I/O) */
    double pim_column_share;
    /* per-bank refresh (refresh 2, refresh.c): one bank's refresh blocks it tRFCb cycles; the
     * rank refreshes its next bank every tREFI / banks per rank. IDD5B: its current (mA) */
    int tRFCb;
    int tRREFD;               /* after a REFB, the rank's next ACT or REFB (other banks) */
    double IDD5B;
} mc_config;

typedef struct mc_cmd {
    uint64_t cycle;
    int32_t row, column;
    uint8_t channel, pseudo_channel, rank, bankgroup;
    int8_t bank;              /* -1: all banks of the scope (PIM), or a rank command (REF) */
    uint8_t command;
    uint8_t requestor;        /* MC_BY_* */
    uint8_t pad;
} mc_cmd;

typedef struct mc_chan_stats {
    uint64_t reads, writes, bytes;
    uint64_t latency_sum, latency_max;
    uint64_t row_hits, row_misses, row_conflicts;
    uint64_t cycles_idle, cycles_blocked, cycles_active;
    uint64_t p99_latency;     /* filled by mc_get_stats */
} mc_chan_stats;

typedef struct mc_summary {
    uint64_t cycles;          /* last read returned and last write accepted */
    uint64_t drain_cycles;    /* every queued write also issued */
    uint64_t requests, commands, refreshes, mode_switches, epochs;
    uint64_t records;         /* records consumed, markers included */
    uint64_t layers;
} mc_summary;

/* DRAM energy (energy.c) of one rank, one channel's ranks or every rank, from cycle 0 to the
 * end of the run (mc_finish; before it, to the current cycle): command counts, the cycles the
 * rank(s) had a row open (active standby) or none (precharged standby), and their energy in
 * pJ: per command V x (IDD - background) x its cycles x tCK, per cycle V x IDD3N or V x
 * IDD2N x tCK, times the devices of a rank. PIM all-bank commands count once per bank they act
 * on (pim_acts, pim_reads, pim_writes); a PIM_ACT costs what an ACT does, a PIM_RD / PIM_WR
 * the bank's share (pim_column_share) of a RD / WR. */
typedef struct mc_energy {
    int available;            /* 0: the part gives no currents; the pJ are then 0 */
    uint64_t cycles;          /* the window, memory cycles */
    uint64_t acts, reads, writes, refreshes, pim_acts, pim_reads, pim_writes;
    uint64_t active_cycles, precharged_cycles; /* rank-cycles */
    double act_pj, read_pj, write_pj, refresh_pj, pim_act_pj, pim_read_pj, pim_write_pj;
    double active_standby_pj, precharged_standby_pj, total_pj;
    /* per-bank refreshes (refresh 2): VDD x (IDD5B - IDD3N) x tRFCb each */
    uint64_t bank_refreshes;
    double refresh_bank_pj;
} mc_energy;

typedef struct mc_sim mc_sim;

mc_sim *mc_new(const mc_config *cfg, char *err, int errlen);
void mc_free(mc_sim *sim);
/* A copy of the whole simulation as it stands (its state, the records it holds, its results so
 * far), to run on independently: fed the same records as sim from here, each gives the same
 * cycles. A run that failed or finished is not copied; with the command log on, the copy
 * starts with the commands sim has not handed out. NULL (err set) out of memory. */
mc_sim *mc_clone(const mc_sim *sim, char *err, int errlen);
const char *mc_error(const mc_sim *sim); /* errlen <= 0 or err NULL: mc_new writes no text */

/* Offer records in trace order. The host and the PIM each walk the trace with their own
 * cursor (the serial policy: one cursor for both), so one requestor's full queue does not
 * hold the other back. Returns MC_OK when a cursor needs records beyond these (call again
 * with recs starting at the record *consumed says, followed by the next ones; with last set
 * when there are no more), MC_PAUSED when the command log holds more than its limit (drain
 * it, then call again likewise), or an error. recs[0] must be the first record not yet
 * consumed. With last set, MC_OK means every record has been offered; a later call may then
 * offer no records (n 0), and one that offers some is refused (MC_ERR_ARG, nothing taken).
 * After mc_finish, or with sim or consumed NULL (or recs NULL and n > 0), it returns
 * MC_ERR_ARG. Arrival cycles above MC_MAX_CYCLE are refused (MC_ERR_TRACE naming the record). */
int mc_feed(mc_sim *sim, const mc_record *recs, uint64_t n, int last, uint64_t *consumed);
/* The controller copies the records it takes (*consumed) and holds those some cursor has not
 * passed yet. One cursor reads at most `records` (0: MC_DEFAULT_WINDOW) ahead of the other;
 * then it waits for the other to move on (unless the other waits for an event that is not
 * signalled before the leading cursor), so what is held stays bounded whatever the trace. */
void mc_set_window(mc_sim *sim, uint64_t records);
/* Feed by side instead (the runs with a cursor per requestor, not the serial policy): each
 * side's stream on its own, `side` MC_HOST or MC_PIM: its own records, and copies of the
 * markers both cursors read (LAYER, PARAM), which both sides' streams hold in the same
 * order, each where it stands among that side's records in the one stream mc_feed would take
 * (a BARRIER is refused, MC_ERR_TRACE: such a run is fed one stream). The run is the same as
 * mc_feed's on that stream fed whole (a PARAM acts when the first cursor reaches it), but each
 * side holds only the records its cursor has not read: a side far behind the other holds
 * nothing of the other's. Every record is taken
 * (*consumed = n); it returns once a cursor needs more of its side's records (mc_hungry says
 * which), or, once both sides ended (last), after every record was offered. Request indices,
 * event positions and record numbers in messages are positions in the side's stream. A run
 * is fed one way only: mc_feed after mc_feed_side, or mc_feed_side after mc_feed took
 * records, is refused (MC_ERR_ARG), as is a record of the other side (MC_ERR_TRACE). */
int mc_feed_side(mc_sim *sim, int side, const mc_record *recs, uint64_t n, int last,
                 uint64_t *consumed);
/* the sides (bit 1 << side) whose cursor read every record fed to it and whose stream has not
 * ended: the run goes on once they have more; 0 when not fed by side */
unsigned mc_hungry(const mc_sim *sim);
/* cursors reading the records: 1 under the serial policy (both sides' records in one order),
 * else 2 (one a requestor; such a run may be fed by side); 0 for NULL */
int mc_cursor_count(const mc_sim *sim);
/* records held now, the most held so far, and the capacity of the buffers holding them (0
 * once mc_finish has run the work out: they are freed) */
void mc_held(const mc_sim *sim, uint64_t *held, uint64_t *peak, uint64_t *capacity);
/* Run until every request has completed (after the last mc_feed). MC_PAUSED as above. */
int mc_finish(mc_sim *sim);

void mc_cmdlog_enable(mc_sim *sim, uint64_t limit);
/* mode switches (always kept): cycle, channel and 1 for PIM_ENTER / 0 for PIM_EXIT */
uint64_t mc_modelog_take(mc_sim *sim, uint64_t *cycle, uint32_t *channel, uint8_t *enter,
                         uint64_t max);
uint64_t mc_cmdlog_take(mc_sim *sim, mc_cmd *out, uint64_t max);

/* The getters check their arguments: MC_ERR_ARG (with a message in mc_error when sim is
 * valid) for a NULL pointer or an index out of range, and then leave *out untouched. */
int mc_get_summary(const mc_sim *sim, mc_summary *out);
/* stats of one requestor on one channel (channel index counts pseudo-channels) */
int mc_get_chan_stats(const mc_sim *sim, int requestor, int channel, mc_chan_stats *out);
/* the q-quantile (0 <= q <= 1) of a requestor's latency (cycles) on one channel, or over all
 * channels (channel -1) */
int mc_latency_percentile(const mc_sim *sim, int requestor, int channel, double q, uint64_t *out);
int mc_mode_switches(const mc_sim *sim, int channel, uint64_t *out);
/* DRAM energy of rank `rank` of channel `channel` (channel counts pseudo-channels); -1 for
 * either sums over every channel / rank */
int mc_get_energy(const mc_sim *sim, int channel, int rank, mc_energy *out);
/* completions, when keep_completions: record index in the trace (markers counted), the cycle
 * the request completed and the cycle its column command issued (UINT64_MAX for a read
 * served from a queued write) */
uint64_t mc_completions_take(mc_sim *sim, uint64_t *index, uint64_t *cycle, uint64_t *issue,
                             uint64_t max);
/* the same with each request's arrival cycle (when its front end offered it to the queue) */
uint64_t mc_completions_take_arrival(mc_sim *sim, uint64_t *index, uint64_t *cycle,
                                     uint64_t *issue, uint64_t *arrival, uint64_t max);
/* decode one address into fields (channel counts pseudo-channels): for tests. MC_ERR_ARG
 * (fields untouched) for a NULL pointer or an address at or beyond the capacity */
int mc_decode(const mc_sim *sim, uint64_t addr, int64_t *fields);
/* event `id`: cycle its SIGNAL was reached and cycle it fired (both UINT64_MAX if not, or
 * with sim NULL; nothing written through NULL pointers, as in mc_held) */
void mc_event(const mc_sim *sim, uint32_t id, uint64_t *reached, uint64_t *fired);
/* events and layers are kept for the ids a trace uses (sparse ids cost what they use): how
 * many, and their ids in order of first use */
uint64_t mc_event_count(const mc_sim *sim);
uint64_t mc_event_ids(const mc_sim *sim, uint32_t *ids, uint64_t max);
uint64_t mc_layer_count(const mc_sim *sim);
uint64_t mc_layer_ids(const mc_sim *sim, uint32_t *ids, uint64_t max);
/* layer `layer` (its id): first arrival and last completion of its requests, and how many;
 * MC_ERR_ARG for a NULL pointer */
int mc_layer_span(const mc_sim *sim, uint64_t layer, uint64_t *start, uint64_t *end,
                  uint64_t *requests);
/* what the requests of layer `layer` (its id) from one requestor did (zeros for a layer the
 * trace did not name); MC_ERR_ARG for a NULL pointer or a requestor that is not 0 or 1 */
typedef struct mc_layer_stats {
    uint64_t reads, writes, latency_sum, row_hits, row_misses, row_conflicts;
} mc_layer_stats;
int mc_get_layer_stats(const mc_sim *sim, uint64_t layer, int requestor, mc_layer_stats *out);


/* pimrt.trace's fast reader of simple text formats (tracetext.c, not part of the model): the
 * whole lines of text[0..len) into out as host requests ('#' comments and blank lines
 * skipped), until out holds max records. Returns 0 with *count records read from
 * text[0..*used), which holds *lines newlines, and *last_line the 0-based line of the last
 * record (UINT64_MAX: none); or -1 at the first thing it does not take as plainly valid (then
 * the caller's per-line parser reads the text and names the error): a malformed line, a
 * number that does not fit 64 bits, an arrival cycle below last_cycle or the one before
 * (dramsim3), an address at or beyond capacity (0: no limit). */
enum { MC_TEXT_DRAMSIM3 = 1, MC_TEXT_RAMULATOR = 2, MC_TEXT_RAMULATOR_DRAM = 3 };
int mc_text_parse(int format, const char *text, uint64_t len, uint64_t capacity,
                  uint64_t last_cycle, mc_record *out, uint64_t max, uint64_t *count,
                  uint64_t *used, uint64_t *lines, uint64_t *last_line);

/* pimrt memsim's path for those formats (tracetext.c): reads the file at `path` a block at a
 * time with mc_text_parse and feeds its records to sim (mc_feed, last 0); the caller then
 * feeds an empty last chunk and calls mc_finish. Returns MC_OK once the whole file was fed, an
 * error code of mc_feed (message in mc_error), MC_ERR_ARG for a NULL pointer or an unknown
 * format, or MC_TEXT_STOPPED where the reader met what it does not take as plainly valid, or
 * could not open or read the file: *pos then says where its records stop (the byte offset
 * and 1-based number of the first line not fed, the arrival cycle (dramsim3; the caller's
 * last_cycle before any) and line of the last request fed, the records fed), so the caller's
 * own reader goes on from there and names what is wrong. */
#define MC_TEXT_STOPPED 8
typedef struct mc_text_pos {
    uint64_t offset, line, last_cycle, last_line, records;
} mc_text_pos;
int mc_run_text(mc_sim *sim, int format, const char *path, uint64_t capacity,
                uint64_t last_cycle, mc_text_pos *pos);

#endif
