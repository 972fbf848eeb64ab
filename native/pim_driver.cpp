// pim_driver.cpp: batch driver around the Verilated pim_top (see pim_driver.h).
// The cycle loop does nothing per clock but eval() and a test of busy.
#include <cstring>
#include <type_traits>
#include <utility>

#include "Vpim_top.h"
#include "Vpim_top___024root.h"
#include "verilated.h"

#include "pim_driver.h"

namespace {

// The falling clock edge. Nothing in pim_top is sensitive to it, so when the Verilated model
// keeps the clock's previous value where we can see it (Verilator 5.0xx:
// __Vtrigrprev__TOP__clk), we record the fall there instead of evaluating the model: one
// eval() per clock instead of two. Otherwise (or with -DPIM_SAFE_CLOCK) evaluate it.
template <typename R, typename = void>
struct ClockFall {
    static inline void fall(Vpim_top *t) {
        t->clk = 0;
        t->eval();
    }
};
#ifndef PIM_SAFE_CLOCK
template <typename R>
struct ClockFall<R, std::void_t<decltype(std::declval<R &>().__Vtrigrprev__TOP__clk)>> {
    static inline void fall(Vpim_top *t) {
        t->clk = 0;
        t->rootp->__Vtrigrprev__TOP__clk = 0;
    }
};
#endif

constexpr int kWords = sizeof(Vpim_top::h_wdata) / sizeof(uint32_t);   // lanes

// Threads of the Verilated model (Verilator --threads N): the context must offer as many
// before the model is built.
#ifndef PIM_THREADS
#define PIM_THREADS 1
#endif

struct Driver {
    VerilatedContext ctx;
    Vpim_top *top;
    uint64_t clocks = 0;
    Driver() : top((ctx.threads(PIM_THREADS), new Vpim_top(&ctx))) {}
    ~Driver() { delete top; }

    inline void tick() {
        top->clk = 1;
        top->eval();
        ClockFall<Vpim_top___024root>::fall(top);
        ++clocks;
    }
    auto &mem() { return top->rootp->pim_top__DOT__u_bank__DOT__mem; }
    // mode is registered in pim_top: it acts from the clock after it changes
    inline void set_mode(int m) {
        if (top->mode != m) {
            top->mode = m;
            tick();
        }
    }
    inline void reset() {
        top->rst_n = 0;
        tick();
        top->rst_n = 1;
        tick();
    }
};

Driver *D(void *h) { return static_cast<Driver *>(h); }

inline void note(uint32_t *rec, uint64_t cap, uint64_t *nrec, uint64_t clock, uint32_t word) {
    if (*nrec < cap) {
        rec[2 * *nrec] = static_cast<uint32_t>(clock);
        rec[2 * *nrec + 1] = word;
    }
    ++*nrec;
}

// Run from pc 0 until busy falls or the cap. Recording: before a clock, the read the
// current instruction makes (p_re, combinational); after it, the write it sent (p_we,
// registered), so reads and writes come in program order.
template <bool Rec>
int run(Driver *d, uint64_t max_cycles, uint64_t *cycles, uint32_t *pc, uint32_t *rec,
        uint64_t cap, uint64_t *nrec) {
    Vpim_top *t = d->top;
    d->set_mode(1);
    t->start = 1;
    d->tick();
    t->start = 0;
    uint64_t n = 0;
    while (t->busy) {
        if (n >= max_cycles) {
            *cycles = n;
            *pc = t->pc;
            d->reset();   // abandon the program: busy drops, registers keep their values
            return -1;
        }
        if (Rec && t->p_re) note(rec, cap, nrec, n, t->p_raddr);
        d->tick();
        if (Rec && t->p_we) note(rec, cap, nrec, n, 0x80000000u | t->p_waddr);
        ++n;
    }
    *cycles = n;
    *pc = t->err_code ? t->err_pc : t->pc;
    return t->err_code;
}

}  // namespace

extern "C" {

void *pim_new(void) {
    Driver *d = new Driver();
    Vpim_top *t = d->top;
    t->clk = 0;
    t->rst_n = 0;
    t->mode = 0;
    t->start = 0;
    t->cfg_we = 0;
    t->h_en = 0;
    t->h_we = 0;
    t->eval();
    d->tick();
    d->tick();
    t->rst_n = 1;
    d->tick();
    return d;
}

void pim_free(void *h) { delete D(h); }

uint32_t pim_lanes(void *) { return kWords; }

uint32_t pim_depth(void *h) {
    auto &mem = D(h)->mem();
    return static_cast<uint32_t>(sizeof(mem.m_storage) / sizeof(mem.m_storage[0]));
}

uint64_t pim_clock_count(void *h) { return D(h)->clocks; }

void pim_cfg(void *h, int sel, int idx, uint32_t value) {
    Driver *d = D(h);
    Vpim_top *t = d->top;
    t->cfg_sel = sel;
    t->cfg_idx = idx;
    t->cfg_wdata = value;
    t->cfg_we = 1;
    d->tick();
    t->cfg_we = 0;
}

void pim_bank_write(void *h, uint32_t col, const uint32_t *data, uint32_t ncols, int via_port) {
    Driver *d = D(h);
    Vpim_top *t = d->top;
    if (!via_port) {
        auto &mem = d->mem();
        for (uint32_t i = 0; i < ncols; ++i)
            std::memcpy(mem[col + i].data(), data + (size_t)i * kWords, sizeof(uint32_t) * kWords);
        return;
    }
    d->set_mode(0);
    t->h_en = 1;
    t->h_we = 1;
    for (uint32_t i = 0; i < ncols; ++i) {
        t->h_addr = col + i;
        std::memcpy(t->h_wdata.data(), data + (size_t)i * kWords, sizeof(uint32_t) * kWords);
        d->tick();
    }
    t->h_en = 0;
    t->h_we = 0;
}

void pim_bank_read(void *h, uint32_t col, uint32_t *data, uint32_t ncols, int via_port) {
    Driver *d = D(h);
    Vpim_top *t = d->top;
    if (!via_port) {
        auto &mem = d->mem();
        for (uint32_t i = 0; i < ncols; ++i)
            std::memcpy(data + (size_t)i * kWords, mem[col + i].data(), sizeof(uint32_t) * kWords);
        return;
    }
    d->set_mode(0);
    t->h_en = 1;
    t->h_we = 0;
    for (uint32_t i = 0; i < ncols; ++i) {
        t->h_addr = col + i;
        d->tick();
        std::memcpy(data + (size_t)i * kWords, t->h_rdata.data(), sizeof(uint32_t) * kWords);
    }
    t->h_en = 0;
}

int pim_run(void *h, uint64_t max_cycles, uint64_t *cycles, uint32_t *pc) {
    return run<false>(D(h), max_cycles, cycles, pc, nullptr, 0, nullptr);
}

int pim_run_record(void *h, uint64_t max_cycles, uint64_t *cycles, uint32_t *pc,
                   uint32_t *rec, uint64_t cap, uint64_t *nrec) {
    *nrec = 0;
    return run<true>(D(h), max_cycles, cycles, pc, rec, cap, nrec);
}

}  // extern "C"
