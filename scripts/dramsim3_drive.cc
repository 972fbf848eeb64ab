// A trace front end for DRAMsim3, pimrt's own (no DRAMsim3 code; it links DRAMsim3's library):
// requests offered in trace order once their arrival cycle has passed, up to W per memory
// cycle, stopping at the first refused; the run ends when every request was offered and every
// read has returned; then DRAMsim3 writes its stats (dramsim3.json) into OUTDIR. The front
// end of docs/memctl.md and of the reference figures. For `pimrt bench energy --dramsim3`.
// Build (DRAMsim3 checked out and built OUTSIDE this repository, in DIR: cmake, make):
//   g++ -O2 -std=c++11 -I DIR/src scripts/dramsim3_drive.cc -L DIR -ldramsim3 \
//       -Wl,-rpath,DIR -o dramsim3_drive
// usage: dramsim3_drive CONFIG.ini TRACE W OUTDIR   (TRACE: "0xADDR READ|WRITE cycle" lines)
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <vector>
#include <string>
#include "dramsim3.h"

struct Req { uint64_t addr, cycle; bool write; };

int main(int argc, char **argv) {
    if (argc != 5) { fprintf(stderr, "usage: drive CONFIG TRACE W OUTDIR\n"); return 2; }
    FILE *f = fopen(argv[2], "r");
    if (!f) { perror(argv[2]); return 2; }
    std::vector<Req> reqs;
    char op[32];
    unsigned long long a, c;
    while (fscanf(f, "%llx %31s %llu", &a, op, &c) == 3)
        reqs.push_back({a, c, strcmp(op, "WRITE") == 0});
    fclose(f);
    int W = atoi(argv[3]);
    uint64_t outstanding = 0, clk = 0;
    auto rd = [&](uint64_t) { outstanding--; };
    auto wr = [&](uint64_t) {};
    dramsim3::MemorySystem *m = dramsim3::GetMemorySystem(argv[1], argv[4], rd, wr);
    size_t next = 0;
    while (next < reqs.size() || outstanding) {
        for (int k = 0; k < W && next < reqs.size() && reqs[next].cycle <= clk; k++) {
            const Req &r = reqs[next];
            if (!m->WillAcceptTransaction(r.addr, r.write)) break;
            m->AddTransaction(r.addr, r.write);
            if (!r.write) outstanding++;
            next++;
        }
        m->ClockTick();
        clk++;
    }
    printf("cycles %llu requests %zu\n", (unsigned long long)clk, reqs.size());
    m->PrintStats();
    delete m;
    return 0;
}
