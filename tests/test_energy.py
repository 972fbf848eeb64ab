"""memctl's DRAM energy from Python: the stats' energy_pj (components non-negative and adding
up to the total, ranks adding up to it, linear in a repeated trace), the parts' [power] and
[pim_energy] checks, and the reference figures (DRAMsim3's model, memctl/energy.c)."""
from __future__ import annotations

import pathlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pimrt.errors import ConfigError
from pimrt.memctl import Controller, Options, load_part
from pimrt.memctl.energy import COMPONENTS
from pimrt.trace import synthetic
from pimrt.trace.records import HOST, PIM, READ, RECORD_DTYPE, WRITE


def _trace(part, n, seed, pim=True, start=0):
    rng = np.random.default_rng(seed)
    rec = np.zeros(n, RECORD_DTYPE)
    rec["cycle"] = start + np.sort(rng.integers(0, 3 * n, n))
    rec["op"] = np.where(rng.random(n) < 0.7, READ, WRITE)
    rec["requestor"] = np.where(pim & (rng.random(n) < 0.3), PIM, HOST)
    rec["addr"] = rng.integers(0, part.capacity_bytes // 64, n).astype(np.uint64) * np.uint64(64)
    return rec


def _stats(part, rec, policy="authority", width=4):
    ctl = Controller(part, Options(policy=policy, issue_width=width))
    ctl.feed(rec)
    ctl.finish()
    return ctl.stats()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 3000), st.integers(0, 2**32 - 1),
       st.sampled_from(["serial", "authority", "bank_partition"]))
def test_components_non_negative_and_add_up(n, seed, policy):
    part = load_part("hbm2_pim")
    e = _stats(part, _trace(part, n, seed), policy)["energy_pj"]
    assert e["available"]
    assert all(e["components"][c] >= 0 for c in COMPONENTS)
    assert e["total"] == pytest.approx(sum(e["components"].values()), rel=1e-12)
    assert sum(r["total"] for r in e["ranks"]) == pytest.approx(e["total"], rel=1e-12)
    assert e["counts"]["active_cycles"] + e["counts"]["precharged_cycles"] == \
        e["cycles"] * part.channel_count * part.org["ranks"]
    assert e["average_power_mw"] == pytest.approx(e["total"] / (e["cycles"] * part.timing["tCK"]))


def test_energy_follows_the_increments():
    """Counts x DRAMsim3's increments (V x mA x cycles x tCK) give each component."""
    part = load_part("ddr4")
    e = _stats(part, _trace(part, 2000, 3, pim=False), "serial", 1)["energy_pj"]
    p, t = part.power, part.timing
    k = part.devices_per_rank * p["VDD"] * t["tCK"]
    c = e["counts"]
    assert e["components"]["act"] == pytest.approx(
        k * (p["IDD0"] * t["tRC"] - p["IDD3N"] * t["tRAS"] - p["IDD2N"] * t["tRP"]) * c["acts"])
    assert e["components"]["read"] == pytest.approx(
        k * (p["IDD4R"] - p["IDD3N"]) * part.burst_cycles * c["reads"])
    assert e["components"]["refresh"] == pytest.approx(
        k * (p["IDD5AB"] - p["IDD3N"]) * t["tRFC"] * c["refreshes"])
    assert e["components"]["precharged_standby"] == pytest.approx(
        k * p["IDD2N"] * c["precharged_cycles"])
    assert c["reads"] + c["writes"] == 2000


def test_stream_matches_dramsim3_reference():
    """HBM2 stream, 1M requests, W=4: DRAMsim3's figures of dram-reference.md (quoted) within
    0.1% per component (memctl's cycles equal DRAMsim3's within one there)."""
    from pimrt.memctl.reference import ENERGY_UJ
    e = _stats(load_part("hbm2"), synthetic.stream(1_000_000).records(), "serial", 4)["energy_pj"]
    ref = ENERGY_UJ[("hbm2", "stream", 4)]
    for name, uj in ref.items():
        got = e["total"] if name == "total" else e["components"][name]
        assert got / 1e6 == pytest.approx(uj, rel=1e-3, abs=1e-6), name


def test_repeated_trace_doubles_the_commands():
    """T, a barrier, T again an idle stretch later: twice T's energy plus the stretch's
    precharged standby and refreshes (closed page: no row stays open over the stretch; within
    1%: the second copy meets its refreshes at other points, memctl/tests/test_energy.c)."""
    part = load_part("hbm2", {"controller.row_policy": "closed"})
    one = _trace(part, 3000, 9, pim=False)
    a = _stats(part, one, "serial")["energy_pj"]
    gap = (a["cycles"] // part.timing["tREFI"] + 3) * part.timing["tREFI"]
    two = np.concatenate([one, np.zeros(1, RECORD_DTYPE), one.copy()])
    two[len(one)]["op"] = 4                                   # BARRIER: drains the writes
    two[len(one) + 1:]["cycle"] += gap
    b = _stats(part, two, "serial")["energy_pj"]
    for c in ("reads", "writes"):
        assert b["counts"][c] == 2 * a["counts"][c]
    assert b["counts"]["acts"] == pytest.approx(2 * a["counts"]["acts"], rel=0.01)
    idle = (gap - a["cycles"]) * part.channel_count
    pre = part.power["VDD"] * part.power["IDD2N"] * part.timing["tCK"] * idle
    extra_refs = b["counts"]["refreshes"] - 2 * a["counts"]["refreshes"]
    ref = part.power["VDD"] * (part.power["IDD5AB"] - part.power["IDD3N"]) * \
        part.timing["tRFC"] * part.timing["tCK"] * extra_refs
    assert b["total"] == pytest.approx(2 * a["total"] + pre + ref, rel=0.01)


def test_part_without_currents_is_unavailable_not_zero():
    from pimrt.commands.memsim import energy_line
    part = load_part("hbm2")
    stats = _stats(part, _trace(part, 50, 1, pim=False), "serial")
    assert energy_line(stats["energy_pj"]).startswith("DRAM energy ")
    bare = load_part(pathlib.Path(__file__).parent / "fuzz/parts/ok_hbm2.toml")
    assert bare.power is None
    e = _stats(bare, _trace(bare, 50, 1, pim=False), "serial")["energy_pj"]
    assert e == {"available": False, "note": e["note"]}
    assert "no [power] currents" in e["note"]
    assert energy_line(e).startswith("DRAM energy: unavailable (")


@pytest.mark.parametrize("over, key, words", [
    ({"power.IDD3N": 30}, "[power] IDD3N", "is below IDD2N"),
    ({"power.IDD2N": 0}, "[power] IDD2N", "must be positive"),
    ({"power.IDD0": -1}, "[power] IDD0", "must be positive"),
    ({"power.IDD4R": 50}, "[power] IDD4R", "is below IDD3N"),
    ({"power.IDD0": 50}, "[power] IDD0", "an ACT's energy would be negative"),
    ({"pim_energy.column_share": 1.5}, "[pim_energy] column_share", "share in (0, 1]"),
    ({"pim_energy.add_pj": 0}, "[pim_energy] add_pj", "must be positive"),
])
def test_bad_currents_name_the_key(over, key, words):
    with pytest.raises(ConfigError) as exc:
        load_part("hbm2_pim", over)
    assert key in str(exc.value) and words in str(exc.value)


def test_pim_energy_needs_pim_units():
    with pytest.raises(ConfigError, match=r"\[pim_energy\]: a part without \[pim\] units"):
        load_part("hbm2", {"pim_energy.column_share": 0.5, "pim_energy.process_nm": 45,
                           "pim_energy.add_pj": 1, "pim_energy.mul_pj": 1,
                           "pim_energy.fma_pj": 1, "pim_energy.compare_pj": 1,
                           "pim_energy.register_file_pj_per_cycle": 1,
                           "pim_energy.sequencer_pj_per_cycle": 1})


def test_pim_columns_cost_their_share():
    part = load_part("hbm2_pim")
    e = _stats(part, _trace(part, 3000, 5), "serial")["energy_pj"]
    c, k = e["counts"], part.power["VDD"] * part.timing["tCK"] * part.devices_per_rank
    assert c["pim_reads"] > 0 and c["pim_acts"] > 0
    rd = k * (part.power["IDD4R"] - part.power["IDD3N"]) * part.burst_cycles
    assert e["components"]["pim_read"] == pytest.approx(
        rd * part.pim_energy["column_share"] * c["pim_reads"])


def test_bench_energy_reference_case(tmp_path, capsys):
    import json
    from pimrt.cli import main
    out = tmp_path / "e.json"
    assert main(["bench", "energy", "--only", "hbm2-stream", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert [r["case"] for r in rows] == ["hbm2-stream"]
    assert rows[0]["within_5pct"] and abs(rows[0]["deviation"]["total"]) < 1e-3
    assert "1 of 1 cases within 5%" in capsys.readouterr().out


def test_bench_energy_needs_the_driver(tmp_path):
    from pimrt.cli import main
    assert main(["bench", "energy", "--only", "ddr4-act", "--dramsim3",
                 str(tmp_path / "nope")]) == 2


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 3000), st.integers(0, 2**32 - 1),
       st.sampled_from(["serial", "authority", "bank_partition"]))
def test_per_bank_refresh_components_add_up(n, seed, policy):
    """refresh = "bank": the per-bank refreshes have their own component (refresh_bank), the
    all-bank one is 0, and the components still add up to the total."""
    part = load_part("hbm2_pim", {"controller.refresh": "bank", "timing.tRFCb": 12})
    e = _stats(part, _trace(part, n, seed, start=4000), policy)["energy_pj"]
    assert e["components"]["refresh"] == 0 and e["counts"]["refreshes"] == 0
    assert e["counts"]["bank_refreshes"] > 0
    assert all(e["components"][c] >= 0 for c in COMPONENTS)
    assert e["total"] == pytest.approx(sum(e["components"].values()), rel=1e-12)
    assert sum(r["total"] for r in e["ranks"]) == pytest.approx(e["total"], rel=1e-12)


def test_per_bank_refresh_energy_follows_its_increment():
    """Each per-bank refresh costs VDD x (IDD5B - IDD3N) x tRFCb x tCK x devices; over a run
    of 16 tREFI every channel refreshes 16 x 16 banks (one every tREFI / 16 = 243 cycles)."""
    part = load_part("hbm2", {"controller.refresh": "bank"})
    rec = np.zeros(2, RECORD_DTYPE)
    rec["op"] = READ
    rec["addr"] = [0, 64]
    rec["cycle"] = [0, 16 * part.timing["tREFI"] - 100]
    e = _stats(part, rec, "serial")["energy_pj"]
    p, t = part.power, part.timing
    per = part.devices_per_rank * p["VDD"] * t["tCK"] * (p["IDD5B"] - p["IDD3N"]) * t["tRFCb"]
    assert per == pytest.approx(1.2 * 19.8 * 160)
    assert e["counts"]["bank_refreshes"] == 8 * 16 * 16
    assert e["components"]["refresh_bank"] == pytest.approx(per * 8 * 16 * 16)
    # the same rows restored: a round of 16 per-bank refreshes costs one all-bank refresh
    # (IDD5B is chosen so, hbm2.toml)
    allbank = part.devices_per_rank * p["VDD"] * t["tCK"] * (p["IDD5AB"] - p["IDD3N"]) * t["tRFC"]
    assert 16 * per == pytest.approx(allbank, rel=1e-3)


def test_memsim_prints_the_per_bank_refresh_energy(tmp_path, capsys):
    from pimrt.cli import main
    trace = tmp_path / "t.trace"
    trace.write_text("0x0 READ 0\n0x40 READ 20000\n")
    assert main(["memsim", str(trace), "--format", "dramsim3", "--config", "hbm2",
                 "--set", "controller.refresh=bank"]) == 0
    assert "refresh bank" in capsys.readouterr().out
