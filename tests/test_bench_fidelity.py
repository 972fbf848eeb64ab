"""`pimrt bench fidelity`: the generated activation-bound cases, and (with a DRAMsim3 driver
named by PIMRT_DRAMSIM3_DRIVE / PIMRT_DRAMSIM3_CONFIGS) memctl within 5% of it, live."""
import argparse
import json
import os
import pathlib

import numpy as np
import pytest

from pimrt.bench import fidelity as bench
from pimrt.errors import ConfigError
from pimrt.memctl.config import decode_address, load_part

DDR4 = load_part("ddr4")
HBM2 = load_part("hbm2")


def test_banks_stride_across_banks_then_ranks():
    addr, write, cycle = bench.generate(DDR4, "banks", 200)
    d = decode_address(DDR4, addr)
    i = np.arange(200)
    assert (d["bank"] == i % 4).all() and (d["bankgroup"] == i // 4 % 4).all()
    assert (d["rank"] == i // 16 % 2).all()
    assert not write.any() and not cycle.any()
    assert len(set(d["row"].tolist())) > 150   # a new row nearly every time


def test_ranks_alternate_or_pseudo_channels_on_hbm2():
    d = decode_address(DDR4, bench.generate(DDR4, "ranks", 100)[0])
    assert (d["rank"] == np.arange(100) % 2).all()
    d = decode_address(HBM2, bench.generate(HBM2, "ranks", 100)[0])
    assert (d["pseudo_channel"] == np.arange(100) % HBM2.org["pseudo_channels"]).all()


def test_bankgroup_rw_and_bursts():
    d = decode_address(HBM2, bench.generate(HBM2, "bankgroup", 300)[0])
    for f in ("channel", "pseudo_channel", "rank", "bankgroup"):
        assert (d[f] == 0).all()
    assert set(d["bank"].tolist()) == {0, 1, 2, 3}
    addr, write, _ = bench.generate(DDR4, "rw-random", 3000)
    assert 0.28 < write.mean() < 0.39 and (addr < DDR4.capacity_bytes).all()
    _, _, cycle = bench.generate(DDR4, "bursts", 200)
    assert cycle.tolist() == [k // 64 * 320 for k in range(200)]
    with pytest.raises(ValueError, match="unknown case"):
        bench.generate(DDR4, "nope", 10)


def _args(tmp_path, drive, configs=None, only=None, requests=3000):
    return argparse.Namespace(dramsim3=pathlib.Path(drive), dramsim3_configs=configs,
                              requests=requests, only=only, seed=11, set=[],
                              json=tmp_path / "out.json")


def test_bad_arguments(tmp_path):
    with pytest.raises(ConfigError, match="--dramsim3 .*no such file"):
        bench.run(_args(tmp_path, tmp_path / "none"))
    with pytest.raises(ConfigError, match="--only: unknown case 'ddr5-banks'"):
        bench.run(_args(tmp_path, tmp_path / "none", only="ddr5-banks"))
    with pytest.raises(ConfigError, match="--requests must be >= 1"):
        bench.run(_args(tmp_path, tmp_path / "none", requests=0))


DRIVE = os.environ.get("PIMRT_DRAMSIM3_DRIVE")


@pytest.mark.skipif(not DRIVE, reason="needs PIMRT_DRAMSIM3_DRIVE (scripts/dramsim3_drive.cc "
                                      "built against DRAMsim3) and PIMRT_DRAMSIM3_CONFIGS")
def test_live_within_5_percent(tmp_path):
    configs = pathlib.Path(os.environ["PIMRT_DRAMSIM3_CONFIGS"])
    assert bench.run(_args(tmp_path, DRIVE, configs, requests=20000)) == 0
    rows = json.loads((tmp_path / "out.json").read_text())
    assert len(rows) == 11
    for r in rows:
        assert abs(r["cycles"] / r["dramsim3_cycles"] - 1) <= 0.05, r
    step = rows[-1]      # a real CNN step's GPU-only trace (issue 40)
    assert step["case"] == "hbm2-cnn-step" and step["requests"] == 1_212_747
