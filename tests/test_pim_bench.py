"""`pimrt bench pim` and the cycles table the timing model reads."""
import json

import pytest

from pimrt import cli
from pimrt.pim import cycles, kernels as K


def test_cycles_table_covers_every_kernel():
    assert set(cycles.kernels()) == set(K.KERNELS)
    for name in K.KERNELS:
        cpe = cycles.cycles_per_element(name)
        acc = cycles.column_accesses_per_element(name)
        assert 0 < cpe < 5 and 0 < acc < 5
    # element-wise kernels: at least one column access per 8 elements per stream
    for name, k in K.STREAM_KERNELS.items():
        assert cycles.column_accesses_per_element(name) >= len(k.streams) / 8 - 1e-9 or k.acc


def test_unknown_kernel_is_a_clear_error():
    from pimrt.pim.errors import PimError
    with pytest.raises(PimError, match="no cycle figures for PIM kernel 'conv'"):
        cycles.cycles_per_element("conv")


@pytest.mark.slow
def test_bench_runs_and_writes_json(tmp_path, capsys):
    from pimrt.pim import testing
    testing.skip_without_verilator()
    out = tmp_path / "bench.json"
    rc = cli.main(["bench", "pim", "--kernels", "relu_fwd,bn_stats", "--elements", "40000",
                   "--pv-elements", "512", "--repeat", "1", "--rows", "8", "--json", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "relu_fwd" in text and "drv/pyv" in text
    doc = json.loads(out.read_text())
    r = {x["kernel"]: x for x in doc["results"]}
    assert r["relu_fwd"]["ratio_driver_over_pyverilator"] > 1
    assert r["relu_fwd"]["cycles_per_element"] > 0.25
