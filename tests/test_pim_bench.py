"""`pimrt bench pim` and the cycles table the timing model reads."""
import json

import pytest

from pimrt import cli
from pimrt.pim import cycles, kernels as K


def test_cycles_table_covers_every_kernel_at_8_and_16_lanes():
    assert set(cycles.kernels()) == set(K.KERNELS)
    assert cycles.lanes() == [8, 16]
    for lanes in (8, 16):
        for name in K.KERNELS:
            cpe = cycles.cycles_per_element(name, lanes=lanes)
            acc = cycles.column_accesses_per_element(name, lanes=lanes)
            dram = cycles.dram_columns_per_element(name, lanes=lanes)
            assert 0 < cpe < 5 and 0 < acc < 5 and 0 < dram < 5
        # element-wise kernels: at least one column access per `lanes` elements per stream,
        # and a 64-byte DRAM column per 16 elements per stream
        for name, k in K.STREAM_KERNELS.items():
            assert cycles.column_accesses_per_element(name, lanes) >= len(k.streams) / lanes - 1e-9
            assert cycles.dram_columns_per_element(name, lanes) >= len(k.streams) / 16 - 1e-9
    # twice the lanes: about half the cycles per element
    assert cycles.cycles_per_element("relu_fwd", 16) < 0.6 * cycles.cycles_per_element("relu_fwd")
    # the old per-channel batch norm names are the channel kernels
    assert cycles.cycles_per_element("bn_bwd_apply") == cycles.cycles_per_element("bn_bwd_apply_ch")


def test_unknown_kernel_is_a_clear_error():
    from pimrt.pim.errors import PimError
    with pytest.raises(PimError, match="no cycle figures for PIM kernel 'conv'"):
        cycles.cycles_per_element("conv")
    with pytest.raises(PimError, match="at 4 lanes; measured: 8, 16"):
        cycles.cycles_per_element("relu_fwd", lanes=4)


@pytest.mark.slow
def test_bench_runs_and_writes_json(tmp_path, capsys):
    from pimrt.pim import testing
    testing.skip_without_verilator()
    out = tmp_path / "bench.json"
    rc = cli.main(["bench", "pim", "--kernels", "relu_fwd,bn_stats_ch", "--elements", "40000",
                   "--pv-elements", "512", "--repeat", "1", "--rows", "8", "--lanes", "8,16",
                   "--json", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "relu_fwd" in text and "drv/pyv" in text
    doc = json.loads(out.read_text())
    r = {(x["kernel"], x["lanes"]): x for x in doc["results"]}
    assert r["relu_fwd", 8]["ratio_driver_over_pyverilator"] > 1
    assert r["relu_fwd", 8]["cycles_per_element"] > 0.25
    assert r["relu_fwd", 16]["cycles_per_element"] > 0.125
