"""The step and energy tables the docs quote are their results files' (docs/figures/), as
scripts/doc_tables.py renders them: a figure re-measured without its table, or a table edited
by hand, fails here."""
import json
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import doc_tables  # noqa: E402

FIG = ROOT / "docs" / "figures"


@pytest.mark.parametrize("doc,results,table", [
    ("runtime.md", "compare-32.json", doc_tables.step_table),
    ("runtime.md", "compare-224.json", doc_tables.step_table),
    ("energy.md", "compare-32.json", doc_tables.energy_table),
    ("energy.md", "compare-224.json", doc_tables.energy_summary),
])
def test_the_docs_table_is_its_results_file(doc, results, table):
    text = (ROOT / "docs" / doc).read_text()
    rows = table(json.loads((FIG / results).read_text()))
    missing = [r for r in rows[2:] if r not in text]
    assert not missing, f"docs/{doc} lacks these rows of docs/figures/{results}: {missing[:3]}"


@pytest.mark.parametrize("doc,amp,fp32", [
    ("precision.md", "compare-amp-fp16-32.json", "compare-32.json"),
    ("runtime.md", "compare-amp-fp16-32.json", "compare-32.json"),
    ("precision.md", "compare-amp-fp16-224.json", "compare-224.json"),
    ("runtime.md", "compare-amp-fp16-224.json", "compare-224.json"),
])
def test_the_amp_table_is_its_results_files(doc, amp, fp32):
    text = (ROOT / "docs" / doc).read_text()
    rows = doc_tables.amp_table(json.loads((FIG / amp).read_text()),
                                json.loads((FIG / fp32).read_text()))
    missing = [r for r in rows[2:] if r not in text]
    assert not missing, f"docs/{doc} lacks these rows of docs/figures/{amp}: {missing[:3]}"


def test_runtime_md_holds_the_sensitivity_study():
    import csv
    with open(FIG / "sensitivity.csv", newline="") as fh:
        rows = doc_tables.sensitivity_table(list(csv.DictReader(fh)))
    text = (ROOT / "docs" / "runtime.md").read_text()
    missing = [r for r in rows if r not in text]
    assert not missing, f"docs/runtime.md lacks these rows of docs/figures/sensitivity.csv: {missing[:2]}"


def test_speed_md_holds_the_bench_speed_runs():
    text = (ROOT / "docs" / "speed.md").read_text()
    rows = doc_tables.speed_table(json.loads((FIG / "bench-speed.json").read_text()), "baseline")
    missing = [r for r in rows if r not in text]
    assert not missing, f"docs/speed.md lacks these rows of docs/figures/bench-speed.json: {missing[:3]}"


@pytest.mark.parametrize("results,table", [
    ("gradsa-scale.json", doc_tables.gradsa_scale),
    ("gradsa-curve.json", doc_tables.gradsa_curve),
    ("gradsa-resnet18.json", doc_tables.gradsa_table),
    ("gradsa-resnet18-32.json", doc_tables.gradsa_table),
])
def test_gradsa_md_holds_the_benchs_tables(results, table):
    """docs/gradsa.md's bench tables are their results files as `pimrt bench gradsa` prints
    them (each line, spaces and all)."""
    text = (ROOT / "docs" / "gradsa.md").read_text().splitlines()
    rows = table(json.loads((FIG / results).read_text()))
    assert len(rows) >= 4
    missing = [r for r in rows if r not in text]
    assert not missing, f"docs/gradsa.md lacks these lines of docs/figures/{results}: {missing[:3]}"


def test_gradsa_md_holds_the_three_seed_table():
    """docs/gradsa.md "Accuracy over 3 seeds": the table of the three runs' results files."""
    runs = [json.loads((FIG / f"gradsa-seed{s}.json").read_text()) for s in (0, 1, 2)]
    text = (ROOT / "docs" / "gradsa.md").read_text().splitlines()
    rows = doc_tables.gradsa_seeds(runs)
    assert len(rows) == 6
    missing = [r for r in rows if r not in text]
    assert not missing, f"docs/gradsa.md lacks these rows of docs/figures/gradsa-seed*.json: " \
                        f"{missing[:3]}"


def test_precision_md_holds_the_functional_amp_table():
    import functional_amp
    rows = functional_amp.table(json.loads((FIG / "functional-amp.json").read_text()))
    text = (ROOT / "docs" / "precision.md").read_text()
    assert len(rows) == 12
    missing = [r for r in rows[2:] if r not in text]
    assert not missing, f"docs/precision.md lacks these rows of functional-amp.json: {missing[:3]}"


def test_memctl_md_holds_the_speed_table():
    """docs/memctl.md "Speed": memctl against DRAMsim3 as whole processes, the table of
    docs/figures/bench-memctl.json (`pimrt bench memctl --dramsim3`), its line of when and
    where included."""
    results = json.loads((FIG / "bench-memctl.json").read_text())
    rows = doc_tables.memctl_speed_table(results)
    assert results["settings"]["dramsim3"] and len(rows) >= 5
    text = (ROOT / "docs" / "memctl.md").read_text()
    words = " ".join(text.split())     # the lines of when and where, and the ratio, may wrap
    for line in (rows[0], rows[-1]):
        assert " ".join(line.split()) in words, f"docs/memctl.md lacks: {line}"
    missing = [r for r in rows[2:-2] if r not in text]
    assert not missing, f"docs/memctl.md lacks these lines of docs/figures/bench-memctl.json: " \
                        f"{missing[:3]}"


def _pim_speed_section() -> str:
    text = (ROOT / "docs" / "pim.md").read_text()
    section = text[text.index("### Speed through the batch driver"):]
    return section[:section.index("\n## ")]


def _holds(section: str, rows: list[str], what: str) -> None:
    """The table rows of `rows` are lines of `section`; its prose lines are there, wrapped."""
    missing = [r for r in rows if r.startswith("|") and r not in section.splitlines()]
    assert not missing, f"docs/pim.md lacks these rows of {what}: {missing[:3]}"
    words = " ".join(section.split())
    for line in rows:
        if line and not line.startswith("|"):
            assert " ".join(line.split()) in words, f"docs/pim.md lacks: {line}"


def test_pim_md_holds_the_batch_driver_speed_table():
    """docs/pim.md "Speed through the batch driver": the per-kernel M elements/s table, its
    line of when and where and its lines of kernels at the target and of the ratio to
    pyverilator are docs/figures/bench-pim.json (`pimrt bench pim --json`) as
    doc_tables.pim_speed_table renders it; what the prose below says of that run holds."""
    results = json.loads((FIG / "bench-pim.json").read_text())
    rows = doc_tables.pim_speed_table(results)
    assert len([r for r in rows if r.startswith("|")]) \
        == 2 + len({r["kernel"] for r in results["results"]}) >= 19
    assert results["settings"]["pyverilator"] and any("pyverilator" in r for r in rows)
    _holds(_pim_speed_section(), rows, "docs/figures/bench-pim.json")
    cpu = {(r["kernel"], r["lanes"]): r["driver_elements_per_cpu_s"] / 1e6
           for r in results["results"]}
    # "the kernels of several adds or MADs a column ... stay under 20 M elements per
    # CPU-second at either lane count; the data-movement kernels ... pass it"
    several = ["sgd", "gradsa_fold", "gradsa_select", "bn_stats_ch", "bn_apply_ch",
               "bn_bwd_stats_ch", "bn_bwd_apply_ch", "avgpool2_fwd"]
    several += [f"{k}_{d}" for k in several if k.startswith(("bn_", "avgpool")) for d in ("f16", "bf16")]
    several += ["sgd_amp_f16", "sgd_amp_bf16"]
    moving = [f"{k}{d}" for k in ("relu_fwd", "relu_bwd", "relu6_fwd", "relu6_bwd", "copy",
                                  "residual_add", "avgpool2_bwd") for d in ("", "_f16", "_bf16")]
    for n in (8, 16):
        assert all(cpu[k, n] < 20 for k in several), n
        assert all(cpu[k, n] >= 20 for k in moving), n
    # "16 lanes ... so the arithmetic kernels gain little from them"
    assert all(cpu[k, 16] < 1.25 * cpu[k, 8] for k in several)


@pytest.mark.parametrize("results,table", [
    ("bench-pim-ops.json", doc_tables.pim_ops_table),
    ("bench-pim16.json", doc_tables.pim16_table),
])
def test_pim_md_holds_the_unit_speed_tables(results, table):
    """docs/pim.md: `pimrt bench pim_ops`' clocks per instruction kind and `pimrt bench
    pim16`'s 16-bit ops are their results files as doc_tables renders them."""
    data = json.loads((FIG / results).read_text())
    _holds((ROOT / "docs" / "pim.md").read_text(), table(data), f"docs/figures/{results}")
    if results == "bench-pim-ops.json":
        # "a clock of ADD, MUL or MAD costs several times a move's"
        ns = {(r["instruction"], r["lanes"]): r["ns_per_clock"] for r in data["rows"]}
        for n in (8, 16):
            assert min(ns[k, n] for k in ("ADD", "MUL", "MAD")) > 1.5 * ns["MOV G, B", n]
    else:
        assert all(r["equal_to_golden"] for r in data["results"])
