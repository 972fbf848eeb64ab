"""Quoted figures memctl is compared against, not live runs: DRAMsim3 (master) and Ramulator
2.1 on the traces of the project's reference generator (1,000,000 requests of 64 B, all
arriving at cycle 0; the front end offers up to W per memory cycle in order), as measured by
whoever wrote the project's reference notes on this kind of machine. SOURCE names them."""

SOURCE = "quoted from shared/reference/dram-reference.md (measured 2026-12-03)"

# (part, trace, W) -> {simulator: total cycles}. "Ramulator 2.1" is its run with timings and
# mapping matched to DRAMsim3's as far as its presets allow ("Ram2.1 m" there).
CYCLES = {
    ("hbm2", "stream", 4): {"DRAMsim3": 271_895, "Ramulator 2.1": 325_174},
    ("hbm2", "random", 4): {"DRAMsim3": 1_037_204, "Ramulator 2.1": 1_063_324},
    ("hbm2", "mix", 4): {"DRAMsim3": 304_174, "Ramulator 2.1": 324_696},
    ("hbm2", "stream", 1): {"DRAMsim3": 1_016_582, "Ramulator 2.1": 1_024_161},
    ("hbm2", "random", 1): {"DRAMsim3": 1_040_627, "Ramulator 2.1": 1_079_248},
    ("hbm2", "mix", 1): {"DRAMsim3": 1_000_041, "Ramulator 2.1": 1_014_694},
    ("ddr4", "stream", 1): {"DRAMsim3": 6_019_920, "Ramulator 2.1": 7_453_447},
    ("ddr4", "random", 1): {"DRAMsim3": 4_957_793, "Ramulator 2.1": 4_673_013},
    ("ddr4", "mix", 1): {"DRAMsim3": 5_981_997, "Ramulator 2.1": 7_014_903},
}
# (part, trace, W) -> {simulator: seconds of a whole process on the 1M-request trace}
PROCESS_SECONDS = {
    ("hbm2", "stream", 4): {"DRAMsim3": 1.88, "Ramulator 2.1": 2.6},
    ("hbm2", "random", 4): {"DRAMsim3": 9.4, "Ramulator 2.1": 8.5},
    ("ddr4", "stream", 1): {"DRAMsim3": 5.9, "Ramulator 2.1": 5.9},
}
REQUESTS = 1_000_000

# (part, trace, W) -> DRAMsim3's energy in microjoules, summed over channels and ranks, as
# dram-reference.md gives it (its DDR4 rows already converted to true energy: x tCK). Keys are
# memctl's component names (pimrt.memctl.energy.COMPONENTS) and "total".
ENERGY_UJ = {
    ("hbm2", "stream", 4): {"act": 26.390, "read": 804.000, "write": 0.0, "refresh": 33.584,
                            "active_standby": 133.563, "precharged_standby": 7.271,
                            "total": 1004.808},
    ("hbm2", "random", 4): {"act": 830.616, "read": 803.998, "write": 0.0, "refresh": 128.981,
                            "active_standby": 509.279, "precharged_standby": 27.902,
                            "total": 2300.775},
    ("hbm2", "mix", 4): {"act": 27.584, "read": 536.000, "write": 355.990, "refresh": 37.477,
                         "active_standby": 149.449, "precharged_standby": 8.113,
                         "total": 1114.613},
    ("ddr4", "stream", 1): {"act": 36.028, "read": 2806.272, "write": 0.0, "refresh": 646.461,
                            "active_standby": 2751.872, "precharged_standby": 736.164,
                            "total": 6976.797},
    ("ddr4", "random", 1): {"act": 4245.619, "read": 2806.266, "write": 0.0,
                            "refresh": 532.458, "active_standby": 2973.041,
                            "precharged_standby": 103.437, "total": 10660.822},
    ("ddr4", "mix", 1): {"act": 36.104, "read": 1870.849, "write": 790.226, "refresh": 642.437,
                         "active_standby": 2785.316, "precharged_standby": 695.395,
                         "total": 6820.327},
}
