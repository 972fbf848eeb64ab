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
        # element-wise kernels: at least one column access per `lanes` elements per fp32
        # stream (2 * lanes for a 16-bit one), and a 64-byte DRAM column per 16 (32)
        for name, k in K.STREAM_KERNELS.items():
            per = [1 if d == "f32" else 2 for s, d in K.stream_dtypes(name).items() if s != "acc"]
            assert cycles.column_accesses_per_element(name, lanes) >= sum(
                1 / (lanes * w) for w in per) - 1e-9
            assert cycles.dram_columns_per_element(name, lanes) >= sum(
                1 / (16 * w) for w in per) - 1e-9
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
    assert r["relu_fwd", 16]["ratio_driver_over_pyverilator"] > 1      # pyverilator at 16 too
    assert all(isinstance(x["meets_target"], bool) for x in doc["results"])
    assert "kernels at 20 M elements/s or more" in text
    st = doc["settings"]                  # when, where and how, for the docs' tables
    assert "UTC" in st["date"] and "CPUs" in st["machine"]
    assert len(st["load_average_before"]) == 3 and len(st["load_average_after"]) == 3
    assert (st["elements"], st["repeat"], st["lanes"], st["rows"]) == (40000, 1, "8,16", 8)
    assert st["units"] >= 1 and st["pyverilator"] and st["pv_elements"] == 512


def test_bench_arguments_are_checked_before_any_build(capsys):
    assert cli.main(["bench", "pim", "--baseline-hw", "/no/such/dir"]) == 2
    assert "--baseline-hw: no directory /no/such/dir" in capsys.readouterr().err
    assert cli.main(["bench", "pim_ops", "--lanes", "8,x"]) == 2
    assert "--lanes wants comma-separated lane counts" in capsys.readouterr().err
    assert cli.main(["bench", "pim_ops", "--clocks", "0"]) == 2
    for bench in ("pim_ops", "pim16"):
        capsys.readouterr()
        assert cli.main(["bench", bench, "--json", "/no/such/dir/x.json"]) == 2
        assert "--json /no/such/dir/x.json: no folder /no/such/dir" in capsys.readouterr().err
    for lanes in ("0", "12", "64"):
        assert cli.main(["bench", "pim", "--lanes", f"8,{lanes}"]) == 2
        assert f"--lanes: {lanes} is not a power of two" in capsys.readouterr().err


@pytest.mark.slow
def test_bench_baseline_and_op_costs(tmp_path, capsys):
    """--baseline-hw times a second build (here the same Verilog copied elsewhere) in turn
    with the current one; pim_ops prints a row per instruction kind."""
    import shutil

    from pimrt.pim import build, testing
    testing.skip_without_verilator()
    hw = tmp_path / "hw"
    shutil.copytree(build.HW_DIR, hw)
    out = tmp_path / "bench.json"
    assert cli.main(["bench", "pim", "--kernels", "sgd", "--elements", "4000", "--repeat", "1",
                     "--rows", "8", "--lanes", "8", "--no-pyverilator", "--baseline-hw", str(hw),
                     "--json", str(out)]) == 0
    (r,) = json.loads(out.read_text())["results"]
    assert r["baseline_driver_elements_per_s"] > 0 and r["pyverilator_elements_per_s"] is None
    assert "base Me/s" in capsys.readouterr().out
    ops = tmp_path / "ops.json"
    assert cli.main(["bench", "pim_ops", "--lanes", "8", "--clocks", "3000",
                     "--json", str(ops)]) == 0
    text = capsys.readouterr().out
    assert all(f"\n{name:12s}" in text for name in ("NOP", "MAD", "ADD A (sum)"))
    doc = json.loads(ops.read_text())
    assert [r["instruction"] for r in doc["rows"]][:2] == ["NOP", "MOV G, G"]
    assert all(r["clocks"] >= 3000 and r["lanes"] == 8 for r in doc["rows"])
    assert doc["settings"]["clocks"] == 3000 and "UTC" in doc["settings"]["date"]


def test_bench_pim16_runs_and_checks_its_arguments(tmp_path, capsys):
    """`pimrt bench pim16`: a row per op, dtype and lane count, the exact cycles per element,
    RTL == golden; bad --ops / --dtypes are errors before any build."""
    from pimrt.pim import testing
    assert cli.main(["bench", "pim16", "--ops", "FOO"]) == 2
    assert "--ops: no op 'FOO'" in capsys.readouterr().err
    assert cli.main(["bench", "pim16", "--dtypes", "f8"]) == 2
    assert "--dtypes: no dtype 'f8'" in capsys.readouterr().err
    testing.skip_without_verilator()
    out = tmp_path / "pim16.json"
    assert cli.main(["bench", "pim16", "--lanes", "8", "--elements", "5000", "--ops", "ADD,WIDEN",
                     "--json", str(out)]) == 0
    r = {(x["op"], x["dtype"]): x for x in json.loads(out.read_text())["results"]}
    assert set(r) == {("ADD", "f32"), ("ADD", "f16"), ("ADD", "bf16"), ("WIDEN", "f16"),
                      ("WIDEN", "bf16")}
    assert all(x["equal_to_golden"] for x in r.values())
    assert json.loads(out.read_text())["settings"]["ops"] == "ADD,WIDEN"
    half = r["ADD", "f16"]["cycles_per_element"] / r["ADD", "f32"]["cycles_per_element"]
    assert abs(half - 0.5) < 0.01            # twice the elements a column (EXIT apart)
    assert "== golden" in capsys.readouterr().out
