"""Published figures memctl is compared against: DRAMsim3 (master) and Ramulator 2.1 on the
traces of the project's reference generator (1,000,000 requests of 64 B, all arriving at cycle
0; the front end offers up to W per memory cycle in order). Source: the project's reference
notes (shared/reference/dram-reference.md), measured on this kind of machine."""

# (part, trace, W) -> {simulator: total cycles}
CYCLES = {
    ("hbm2", "stream", 4): {"DRAMsim3": 271_903, "Ramulator 2.1": 277_358},
    ("hbm2", "random", 4): {"DRAMsim3": 1_037_267, "Ramulator 2.1": 607_089},
    ("hbm2", "mix", 4): {"DRAMsim3": 304_618, "Ramulator 2.1": 322_826},
    ("ddr4", "stream", 1): {"DRAMsim3": 6_019_912, "Ramulator 2.1": 7_463_874},
}
REQUESTS = 1_000_000
