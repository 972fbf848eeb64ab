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


@pytest.mark.parametrize("other,base", [
    ("compare-amp-bf16-a100-32.json", "compare-amp-fp16-32.json"),
    ("compare-amp-bf16-a100-224.json", "compare-amp-fp16-224.json"),
])
def test_precision_md_holds_amp_bf16_on_the_a100(other, base):
    text = (ROOT / "docs" / "precision.md").read_text()
    a, b = (json.loads((FIG / f).read_text()) for f in (other, base))
    assert {(r["part"], r["host_part"], r["precision"]) for r in a} == \
        {("a100_hbm2_pim", "a100_tc", "amp-bf16")}
    rows = doc_tables.system_table(a, b)
    missing = [r for r in rows if r not in text]
    assert not missing, f"precision.md lacks these rows of docs/figures/{other}: {missing[:3]}"
    assert all(r["speedup_vs_gpu_only"] > 1 and r["speedup_vs_serial"] > 1 for r in a)
    words = " ".join(text.split())
    mean = lambda rs, k: sum(r[k] for r in rs) / len(rs)      # noqa: E731
    size = "32x32" if "-32" in other else "224x224"
    if size == "32x32":
        assert f"({mean(a, 'speedup_vs_gpu_only'):.3f}x over GPU-only against " \
               f"{mean(b, 'speedup_vs_gpu_only'):.3f}x)" in words
        assert [r["model"] for r in a if r["step_vs_bound"] <= 1.05] == ["resnet18", "vgg16"]
    else:
        assert f"({mean(a, 'speedup_vs_gpu_only'):.3f}x against " \
               f"{mean(b, 'speedup_vs_gpu_only'):.3f}x; ResNet-18 the exception)" in words
        assert [r["model"] for r in a if r["speedup_vs_gpu_only"] >
                next(x for x in b if x["model"] == r["model"])["speedup_vs_gpu_only"]] \
            == ["resnet18"]
        assert all(r["step_vs_bound"] > 1.05 for r in a)


def test_precision_md_holds_the_oracle_runs():
    """The AMP gap to the bound with exact durations: the oracle runs' file, on the same
    system and bound as the default rule's compare."""
    runs = {r["model"]: r for r in _load("amp-oracle-32.json")["runs"]}
    _, default = _compare("compare-amp-fp16-32.json")
    words = _words("precision.md")
    r, m = runs["resnet50"], runs["mobilenetv2"]
    for name, o in runs.items():
        d = default[name, "authority"]
        assert (o["authority_rule"], o["precision"]) == ("slack-oracle", "amp-fp16")
        assert o["bound_step_ms"] == d["bound_step_ms"] and o["step_ms"] < d["step_ms"]
        assert o["step_vs_bound"] > 1.05           # still outside the aim
    assert f"ResNet-50 reaches {r['step_ms']:.3f} ms (step / bound {r['step_vs_bound']:.3f}) " \
           f"and MobileNetV2 {m['step_ms']:.3f} ms ({m['step_vs_bound']:.3f})" in words


def test_precision_md_holds_the_bound_gap_runs_at_224():
    """The AMP step's gap at 224x224: scripts/bound_gap.py's file, the same steps and bounds
    as compare-amp-fp16-224.json's, and precision.md's words on it."""
    runs = {r["model"]: r for r in _load("bound-gap-224.json")["runs"]}
    assert set(runs) == {"resnet50", "mobilenetv2", "densenet121"}
    rows = _compare("compare-amp-fp16-224.json")[1]
    words = _words("precision.md")
    lags = []
    for model, r in runs.items():
        c = rows[model, "authority"]
        assert (r["input"], r["precision"]) == (224, "amp-fp16")
        assert (r["step_ms"], r["bound_ms"]) == (round(c["step_ms"], 3),
                                                 round(c["bound_step_ms"], 3))
        lag = r["lag_at_phase_end_ms"]
        assert lag["update"] == pytest.approx(r["step_ms"] - r["bound_ms"], abs=0.002)
        lags.append(lag)
    r50, mb, dn = lags
    assert f"ResNet-50's step ends {r50['update']:.3f} ms after its bound " \
           f"({r50['forward']:.3f} ms of it by the end of the forward pass), MobileNetV2's " \
           f"{mb['update']:.3f} ms ({mb['forward']:.3f}), DenseNet-121's {dn['update']:.3f} " \
           f"ms ({dn['forward']:.3f})" in words

    def task(model: str, name: str) -> tuple[str, str, str]:
        """(`name` alone -> step ms, its peak share), the PIM task beside it, for how long."""
        t = next(t for t in runs[model]["tasks_grown_most"] if t["task"] == name)
        b = t["beside"][0]
        assert t["side"] == "host" and t["peak_share_alone"] >= 0.75
        # it grows by most of the time the PIM runs beside it
        assert 0.6 * b["ms"] <= t["grew_ms"] <= 1.05 * b["ms"]
        return (f"`{name}` {t['alone_ms']:.3f} -> {t['step_ms']:.3f} ms, "
                f"{t['peak_share_alone']:.3f}", b["task"], f"{b['ms']:.3f} ms")
    a = task("resnet50", "layer1_0_downsample_0.bwd_weight")
    assert f"({a[0]} of the peak, beside the PIM's `{a[1]}` for {a[2]};" in words
    b = task("resnet50", "layer2_0_downsample_0.fwd")
    assert f"{b[0]}, beside `{b[1]}` for {b[2]})" in words
    c = task("mobilenetv2", "features_3_conv_1_0.bwd_weight")
    assert f"({c[0]}, beside `{c[1]}`, the batch norm of its block's expansion, for " \
           f"{c[2]})" in words
    # the ones named are the host tasks that grew most in ResNet-50 and MobileNetV2
    for model, first in (("resnet50", "layer1_0_downsample_0.bwd_weight"),
                         ("mobilenetv2", "features_3_conv_1_0.bwd_weight")):
        host = [t for t in runs[model]["tasks_grown_most"] if t["side"] == "host"]
        assert host[0]["task"] == first


def test_precision_md_holds_the_bound_gap_runs():
    """Where the AMP step loses against its bound: scripts/bound_gap.py's file, the same
    steps and bounds as the compares' (fp32 and amp-fp16), and precision.md's words on it."""
    both = {(r["model"], r["precision"]): r for r in _load("bound-gap-32.json")["runs"]}
    assert set(both) == {(m, p) for m in ("resnet50", "mobilenetv2") for p in ("fp32", "amp-fp16")}
    runs = {p: r for (m, p), r in both.items() if m == "resnet50"}
    words = _words("precision.md")
    for prec, name in (("fp32", "compare-32.json"), ("amp-fp16", "compare-amp-fp16-32.json")):
        r, c = runs[prec], _compare(name)[1]["resnet50", "authority"]
        assert r["step_ms"] == round(c["step_ms"], 3)
        assert r["bound_ms"] == round(c["bound_step_ms"], 3)
        # the step's own share of each side's time, summed, covers the step's tasks alone
        assert sum(k["tasks"] for k in r["by_kind"].values()) > 500
    a, f = runs["amp-fp16"], runs["fp32"]
    lag = a["lag_at_phase_end_ms"]
    gap = a["step_ms"] - a["bound_ms"]
    assert lag["update"] == pytest.approx(gap, abs=0.002)
    assert f"the step ends {lag['update']:.3f} ms after its bound: {lag['forward']:.3f} ms of " \
           f"it by the end of the forward pass, the other {lag['backward'] - lag['forward']:.3f}" \
           f" ms in the backward pass; the update changes it by less than 0.005 ms" in words
    assert abs(lag["update"] - lag["backward"]) < 0.005
    bn, dw, dw32 = (a["by_kind"]["pim/batchnorm/bwd"], a["by_kind"]["host/conv/bwd_weight"],
                    f["by_kind"]["host/conv/bwd_weight"])
    assert f"grows from {bn['alone_ms']:.3f} to {bn['step_ms']:.3f} ms and the host's weight " \
           f"gradients from {dw['alone_ms']:.3f} to {dw['step_ms']:.3f} ms (in fp32: " \
           f"{dw32['alone_ms']:.3f} to {dw32['step_ms']:.3f} ms, the gap there " \
           f"{f['lag_at_phase_end_ms']['update']:.3f} ms in all)" in words
    host = [t for t in a["tasks_grown_most"] if t["side"] == "host"]
    top = host[0]       # a bottleneck's first 1x1 CONV, beside the block before's bn3
    block = top["task"].split("_conv1.bwd_weight")[0]
    assert top["task"] == f"{block}_conv1.bwd_weight"
    assert f"(`{top['task']}` {top['alone_ms']:.3f} -> {top['step_ms']:.3f} ms)" in words
    stage, k = block.rsplit("_", 1)
    assert top["beside"][0]["task"] == f"{stage}_{int(k) - 1}_bn3.bwd"
    assert f"need {top['peak_share_alone']:.2f} of the memory's peak bandwidth" in words
    worst = max(d["next_starts_later_ms"] - d["lag_before_ms"] for d in a["deferred"])
    assert f"as late against the bound as the moved one did, within {worst:.3f} ms" in words
    # MobileNetV2: the same story, against its own compare row
    mb = both["mobilenetv2", "amp-fp16"]
    c = _compare("compare-amp-fp16-32.json")[1]["mobilenetv2", "authority"]
    assert (mb["step_ms"], mb["bound_ms"]) == (round(c["step_ms"], 3), round(c["bound_step_ms"], 3))
    lag, k = mb["lag_at_phase_end_ms"], mb["by_kind"]
    top = [t for t in mb["tasks_grown_most"] if t["side"] == "host"][0]
    assert top["task"].endswith("_conv_2.bwd_weight")        # a block's 1x1 projection
    assert f"MobileNetV2 tells the same story: its step ends {lag['update']:.3f} ms after its " \
           f"bound, {lag['backward'] - lag['forward']:.3f} ms of it in the backward pass; its " \
           f"host weight gradients grow from {k['host/conv/bwd_weight']['alone_ms']:.3f} to " \
           f"{k['host/conv/bwd_weight']['step_ms']:.3f} ms and its PIM batch-norm backward from " \
           f"{k['pim/batchnorm/bwd']['alone_ms']:.3f} to {k['pim/batchnorm/bwd']['step_ms']:.3f}" \
           f" ms, the host task grown most a 1x1 projection's weight gradient (`{top['task']}` " \
           f"{top['alone_ms']:.3f} -> {top['step_ms']:.3f} ms, " \
           f"{top['peak_share_alone']:.2f} of the peak alone)" in words
    assert {b["task"] for b in top["beside"][:2]} == {top["task"].replace(
        "_conv_2.bwd_weight", f"_conv_1_{n}.bwd") for n in (1, 2)}


@pytest.mark.parametrize("name", ["sensitivity.csv", "sensitivity-224.csv"])
def test_runtime_md_holds_the_sensitivity_study(name):
    import csv
    with open(FIG / name, newline="") as fh:
        rows = doc_tables.sensitivity_table(list(csv.DictReader(fh)))
    text = (ROOT / "docs" / "runtime.md").read_text()
    missing = [r for r in rows if r not in text]
    assert not missing, f"docs/runtime.md lacks these rows of docs/figures/{name}: {missing[:2]}"


def test_runtime_md_224_sensitivity_prose_is_the_csv():
    """docs/runtime.md "Sensitivity at 224x224": the statements under the table (the table
    itself: test_runtime_md_holds_the_sensitivity_study) hold on sensitivity-224.csv."""
    import csv
    with open(FIG / "sensitivity-224.csv", newline="") as fh:
        data = list(csv.DictReader(fh))
    f = {(r["model"], r["variant"]): r for r in data}
    models = list(dict.fromkeys(r["model"] for r in data))
    variants = list(dict.fromkeys(r["variant"] for r in data))
    v = lambda m, var, k: float(f[m, var][k])   # noqa: E731
    words = _words("runtime.md")
    assert all(v(m, var, k) > 1 for m in models for var in variants
               for k in ("speedup_vs_gpu_only", "speedup_vs_serial"))
    assert "Every variant's step beats GPU-only and serial on all five networks here too." in words
    for var in ("one_stack", "tensor_core_host"):
        up = [m for m in models if v(m, var, "speedup_vs_gpu_only") > v(m, "default", "speedup_vs_gpu_only")]
        assert up == [m for m in models if m != "mobilenetv2"], var
        assert all(v(m, var, "step_vs_bound") > v(m, "default", "step_vs_bound") for m in models)
    assert all(max(variants, key=lambda var: v(m, var, "step_vs_bound")) == "one_stack"
               for m in models)
    assert "One stack and the Tensor-Core host raise the ratio over GPU-only on every network but " \
           "MobileNetV2 and move every step away from its bound, one stack furthest" in words
    mean = lambda var: _mean(v(m, var, "speedup_vs_serial") for m in models)   # noqa: E731
    for var in ("lanes16", "pim_at_memory_clock"):
        assert all(v(m, var, "step_ms") < v(m, "default", "step_ms") for m in models)
        assert mean(var) < mean("default")
    moved = max(abs(v(m, "switch_x4", "step_ms") / v(m, "default", "step_ms") - 1) for m in models)
    assert f"a 4x mode switch moves no step by more than {100 * moved:.1f}%" in words


def test_speed_md_holds_the_bench_speed_runs():
    text = (ROOT / "docs" / "speed.md").read_text()
    rows = doc_tables.speed_table(json.loads((FIG / "bench-speed.json").read_text()), "baseline")
    missing = [r for r in rows if r not in text]
    assert not missing, f"docs/speed.md lacks these rows of docs/figures/bench-speed.json: {missing[:3]}"


def test_architecture_md_holds_the_profile_before_and_after_issue_38():
    """Issue 38 item 1: the profile of the 224x224 command by phase, before and after, in
    architecture.md, from its results file; the prose's sums are the file's."""
    doc = json.loads((FIG / "profile-resnet50-224.json").read_text())
    text = (ROOT / "docs" / "architecture.md").read_text()
    rows = doc_tables.profile_table(doc)
    missing = [r for r in rows if r not in text]
    assert not missing, f"architecture.md lacks these rows of profile-resnet50-224.json: " \
                        f"{missing[:3]}"
    before, now = doc["profiles"]
    assert (before["commit"], now["label"]) == ("e106b3d", "this build")
    for p in doc["profiles"]:       # the phases add up to the total, memctl's runs to memctl
        assert sum(p["by_phase"].values()) == pytest.approx(p["cpu_s"], abs=0.05)
        assert sum(r["cpu_s"] for r in p["by_run"] if r["phase"] == "memctl") \
            == pytest.approx(p["by_phase"]["memctl"], abs=0.05)
    for key in ("serial_step_ms", "gpu_only_step_ms", "requests"):  # "the same to the cycle"
        assert before["summary"][key] == now["summary"][key]
    words = " ".join(text.split())
    m0, m1 = before["by_phase"]["memctl"], now["by_phase"]["memctl"]
    assert f"The Python side fell from {before['cpu_s'] - m0:.1f} to {now['cpu_s'] - m1:.1f} " \
           f"s of CPU and the peak RSS from {before['peak_rss_mib']:.0f} to " \
           f"{now['peak_rss_mib']:.0f} MiB" in words
    assert f"so memctl went from {m0:.1f} to {m1:.1f} s and the total from " \
           f"{before['cpu_s']:.1f} to {now['cpu_s']:.1f} s" in words


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
    # CPU-second at either lane count; the data-movement kernels ... are faster than every
    # one of them at the same lane count, most of them past 20 M"
    several = ["sgd", "gradsa_fold", "gradsa_select", "bn_stats_ch", "bn_apply_ch",
               "bn_bwd_stats_ch", "bn_bwd_apply_ch", "avgpool2_fwd"]
    several += [f"{k}_{d}" for k in several if k.startswith(("bn_", "avgpool")) for d in ("f16", "bf16")]
    several += ["sgd_amp_f16", "sgd_amp_bf16"]
    moving = [f"{k}{d}" for k in ("relu_fwd", "relu_bwd", "relu6_fwd", "relu6_bwd", "copy",
                                  "residual_add", "avgpool2_bwd") for d in ("", "_f16", "_bf16")]
    for n in (8, 16):
        assert all(cpu[k, n] < 20 for k in several), n
        assert min(cpu[k, n] for k in moving) > max(cpu[k, n] for k in several), n
        assert sum(cpu[k, n] >= 20 for k in moving) > len(moving) / 2, n
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


# ------------------------------------------------------------- figures quoted in the prose
# A figure a page quotes beside a generated table (a mean, a range, a model's value) is read
# from the same results file here, formatted as the page prints it: a re-measured file
# whose prose was not updated fails.
def _words(doc: str) -> str:
    return " ".join((ROOT / "docs" / doc).read_text().split())


def _load(name: str):
    return json.loads((FIG / name).read_text())


def _compare(name: str) -> tuple[list[str], dict]:
    return doc_tables._by(_load(name))


def _mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs)


def _span(xs, fmt: str = ".3f") -> str:
    xs = list(xs)
    return f"{min(xs):{fmt}}-{max(xs):{fmt}}"


def test_host_model_md_holds_the_bench_host_tables():
    """docs/host_model.md "Calibration": the v100 table is docs/figures/host-v100.json as
    doc_tables.host_table renders it; the prose's v100 and v100_tc figures (the convolutions
    alone, the worst rows, the per-phase error factors) and the counts of the data are the
    two JSON files'; runtime.md and precision.md quote the same error factors."""
    import math
    v, tc = _load("host-v100.json"), _load("host-v100_tc.json")
    text = (ROOT / "docs" / "host_model.md").read_text()
    rows = doc_tables.host_table(v)
    missing = [r for r in rows if r not in text.splitlines()]
    assert not missing, f"docs/host_model.md lacks these rows of host-v100.json: {missing[:3]}"
    words = " ".join(text.split())

    def convs(res):
        c = [r for r in res["rows"] if r["class"] != "gemm"]
        ef = math.exp(_mean(abs(math.log(r["ratio"])) for r in c))
        return len(c), ef, _mean(0.75 <= r["ratio"] <= 1.25 for r in c)

    n, ef, w = convs(v)
    assert n == 272 and f"The 272 convolutions alone: error factor {ef:.3f}, {100 * w:.0f}% " \
                       f"within +-25%" in words
    big = [r["ratio"] for r in v["rows"] if r["shape"].startswith("Vision 7x7x832 k128 5x5")]
    assert f"(7x7x832 with a 5x5 filter, measured {1 / min(big):.1f}x slower than any " \
           f"algorithm modelled)" in words
    assert min(big) == v["all"]["min_ratio"]
    s2 = [r["ratio"] for r in v["rows"] if r["phase"] == "backward_data" and r["app"] == "Resnet"
          and " 1x1 " in r["shape"] and "s2,2" in r["shape"] and r["ratio"] > 1.25]
    assert f"ResNet-50 ({_span(s2, '.1f')}x too slow)" in words
    tiny = next(r for r in v["rows"] if r["shape"] == "DeepSpeech M512 K512 NN")
    assert f"a {1000 * tiny['measured_ms']:.0f} us kernel against a modelled " \
           f"{1000 * tiny['modelled_ms']:.0f} us" in words
    a, p = tc["all"], tc["by_phase"]
    n, ef, _ = convs(tc)
    assert f"error factor {a['error_factor']:.3f} over all {a['kernels']} kernels (fitted " \
           f"{tc['fitted']['error_factor']:.3f}, held out {tc['held_out']['error_factor']:.3f}), " \
           f"{100 * a['within_25pct']:.0f}% within +-25% (forward " \
           f"{p['forward']['all']['error_factor']:.3f}, backward_data " \
           f"{p['backward_data']['all']['error_factor']:.3f}, backward_weight " \
           f"{p['backward_weight']['all']['error_factor']:.3f}, GEMM " \
           f"{p['gemm']['all']['error_factor']:.3f}); the 272 convolutions {ef:.3f}" in words
    first = [r["ratio"] for r in tc["rows"] if r["class"] != "gemm"
             and r["shape"].split()[-5].split("x")[-1] in ("1", "3")]
    assert max(first) == a["max_ratio"]
    assert f"(3 or 1 input channels; up to {max(first):.1f}x too slow)" in words
    late = [r["ratio"] for r in tc["rows"] if " 7x7x" in f" {r['shape'].split(' ', 1)[1]}"
            and " 1x1 " in r["shape"]]
    assert min(late) == a["min_ratio"]
    assert f"(measured up to {1 / min(late):.1f}x slower than modelled" in words
    # the data: 94 convolutions x 3 phases but 10 first layers' backward_data, 160 GEMMs
    assert [v["by_phase"][k]["all"]["kernels"] for k in ("forward", "backward_data",
                                                         "backward_weight", "gemm")] \
        == [94, 84, 94, 160]
    assert "94 convolutions x forward, backward-data (but 10 first layers) and " \
           "backward-weight = 272 kernels, and 160 GEMMs" in words
    assert f"{v['fitted']['kernels']} fitted, {v['held_out']['kernels']} held out" in words
    gemm_bytes = sum(r["class"] == "gemm" and r["memory"] == "bytes" for r in v["rows"])
    assert f"({gemm_bytes} of the 160 GEMMs, each compute-bound)" in words
    # the whole-network check against NVIDIA's 367 img/s
    _, c224 = _compare("compare-224.json")
    ms = c224["resnet50", "authority"]["gpu_only_step_ms"]
    assert f"{ms:.3f} ms, {32000 / ms:.0f} img/s, {32000 / ms / 367:.3f} of the published " \
           f"FP32 rate (the step {ms / (32000 / 367):.2f}x longer than 367 img/s implies)" in words
    # where the modelled GPU-only step goes, by kind (the same runs as the compares')
    split = _load("gpu-only-split-resnet50-224.json")
    assert split["fp32"]["step_ms"] == c224["resnet50", "authority"]["gpu_only_step_ms"]
    _, amp224 = _compare("compare-amp-fp16-224.json")
    assert split["amp-fp16"]["step_ms"] == amp224["resnet50", "authority"]["gpu_only_step_ms"]
    for prec in ("fp32", "amp-fp16"):
        assert sum(split[prec]["by"].values()) == pytest.approx(split[prec]["step_ms"], abs=0.01)
    conv = sum(v for k, v in split["amp-fp16"]["by"].items()
               if k.split("/")[0] in ("conv", "linear") and not k.endswith("/update"))
    assert f"under amp-fp16 {conv:.3f}," in words
    assert f"of which the modelled CONVs alone would take {conv / (32000 / 1200):.2f}" in words
    # what the memory-bound kernels move, and what that leaves beside the modelled CONVs
    amp_split, fp32_split = split["amp-fp16"], split["fp32"]
    mem = [k for k in amp_split["gb"] if k.split("/")[0] in ("batchnorm", "relu", "add", "maxpool")
           and not k.endswith("/update")]
    assert sorted(k.split("/")[0] for k in mem) == ["add", "batchnorm", "batchnorm", "maxpool",
                                                    "maxpool", "relu", "relu"]
    gb = sum(amp_split["gb"][k] for k in mem)
    rate = amp_split["stream_gbs"]
    left = 32000 / 1200 - conv
    assert f"move {gb:.3f} GB (fp32: {sum(fp32_split['gb'][k] for k in mem):.3f} GB)" in words
    assert f"At the {rate:.3f} GB/s the model paces them to" in words
    assert f"that alone takes {gb / rate * 1e3:.3f} ms (they take " \
           f"{sum(amp_split['by'][k] for k in mem):.3f} ms in the step" in words
    assert f"the {left:.3f} ms the published rate leaves beside the modelled CONVs would need " \
           f"{gb / left * 1e3:.0f} GB/s" in words
    assert gb / left * 1e3 > 898.246 > rate
    # the V100 model against the H200's measured kernels (bench host --measured)
    h = _load("host-v100-vs-h200-resnet18.json")["all"]
    assert f"gives an error factor of {h['error_factor']:.3f} over {h['kernels']} kernels " \
           f"({100 * h['within_25pct']:.0f}% within +-25%, model / measured " \
           f"{h['min_ratio']:.2f} to {h['max_ratio']:.2f})" in words
    # and under AMP against NVIDIA's 1200 img/s mixed precision
    _, amp = _compare("compare-amp-fp16-224.json")
    ms = amp["resnet50", "authority"]["gpu_only_step_ms"]
    assert f"batch 32, {ms:.3f} ms, {32000 / ms:.0f} img/s, {32000 / ms / 1200:.3f} of the " \
           f"published 1200 img/s (the step {ms / (32000 / 1200):.2f}x longer than it implies)" \
        in words
    a100 = _load("a100-resnet50-224-amp.json")
    assert (a100["part"], a100["host_part"], a100["precision"]) == ("a100_hbm2_pim", "a100_tc",
                                                                    "amp-fp16")
    g = a100["gpu_only_step_ms"]
    assert f"is {g:.3f} ms, {32000 / g:.0f} img/s, {32000 / g / 2470:.3f} of the 2470 img/s " \
           f"NVIDIA publishes for mixed precision on one A100 80 GB" in words
    assert f"ResNet-50 step at 224x224 runs at {32000 / g / 2470:.3f} of NVIDIA's published " \
           f"A100 mixed-precision rate" in _words("precision.md")
    assert f"on it the co-executed step is {a100['speedup_vs_gpu_only']:.3f}x GPU-only's and " \
           f"{a100['speedup_vs_serial']:.3f}x serial's, step / bound {a100['step_vs_bound']:.3f}" \
        in _words("precision.md")
    fp32 = c224["resnet50", "authority"]["gpu_only_step_ms"]
    assert f"its ResNet-50 step at 224x224 runs at {32000 / ms / 1200:.3f} of the 1200 img/s " \
           f"NVIDIA publishes for mixed-precision training on one V100 (fp32: " \
           f"{32000 / fp32 / 367:.3f} of 367 img/s" in _words("precision.md")
    rt, pr = _words("runtime.md"), _words("precision.md")
    assert f"error factor {v['all']['error_factor']:.3f} over {v['all']['kernels']} kernels, " \
           f"{v['held_out']['error_factor']:.3f} on the held-out ones" in rt
    for doc in (rt, pr):
        assert f"error factor of {a['error_factor']:.3f}" in doc \
            or f"error factor {a['error_factor']:.3f}" in doc


def test_runtime_and_precision_md_prose_is_the_compare_files():
    """The means, ranges and single steps docs/runtime.md and docs/precision.md quote beside
    the step tables: bank_partition's means, the slack rule's steps where the per-layer one is
    kept, the AMP step over the fp32 one, step / bound, MobileNetV2 at 224x224 under AMP."""
    rt, pr = _words("runtime.md"), _words("precision.md")
    models, c32 = _compare("compare-32.json")
    _, c224 = _compare("compare-224.json")
    _, a32 = _compare("compare-amp-fp16-32.json")
    _, a224 = _compare("compare-amp-fp16-224.json")
    for c in (c32, c224):
        bp = [c[m, "bank_partition"] for m in models]
        assert f"(bank_partition mean: {_mean(r['speedup_vs_gpu_only'] for r in bp):.3f}x over " \
               f"GPU-only, {_mean(r['speedup_vs_serial'] for r in bp):.3f}x of serial" in rt
    low = min((c[m, "bank_partition"]["speedup_vs_serial"], m, size) for m in models
              for c, size in ((c32, 32), (c224, 224)))
    assert low[1:] == ("mobilenetv2", 224)
    assert f"(down to {low[0]:.3f}x of serial, MobileNetV2 at 224x224, below)" in rt
    bound = {size: _mean(c[m, "authority"]["step_vs_bound"] for m in models)
             for c, size in ((c32, 32), (c224, 224))}
    ab = {size: [a[m, "authority"]["step_vs_bound"] for m in models]
          for a, size in ((a32, 32), (a224, 224))}
    assert f"(mean {_mean(ab[32]):.3f} against {bound[32]:.3f})" in pr
    assert [m for m, x in zip(models, ab[32]) if x <= 1.05] == ["resnet18", "vgg16",
                                                                 "densenet121"]
    assert f"the aim of 5% holds for ResNet-18, VGG-16 and DenseNet-121 ({ab[32][3]:.3f}), not " \
           f"for ResNet-50 ({ab[32][1]:.3f}) and MobileNetV2 ({ab[32][4]:.3f})" in pr
    assert [m for m, x in zip(models, ab[224]) if x <= 1.05] == ["resnet18"]
    assert "the 5% aim holds for ResNet-18 only here" in pr
    tail = f"step / bound {_span(ab[224])} (mean {_mean(ab[224]):.3f}"
    assert f"{tail}, fp32's {bound[224]:.3f})" in pr and f"{tail}), against fp32's " \
                                                          f"{bound[224]:.3f}" in rt
    for a, c, size in ((a32, c32, 32), (a224, c224, 224)):
        ratio = _span((a[m, "authority"]["step_ms"] / c[m, "authority"]["step_ms"]
                       for m in models), ".2f")
        assert f"{ratio} of the fp32 step" in rt, size
    assert f"at {ratio} of the fp32 step" in pr
    kept = {size: [m for m in models if a[m, "authority"]["authority_rule_kept"] == "layer"]
            for a, size in ((a32, 32), (a224, 224))}
    assert kept == {32: [], 224: ["resnet18", "resnet50", "vgg16"]}
    assert "The runtime keeps the slack rule's step on all five." in rt
    assert "the runtime keeps the slack rule's step on all five" in pr
    # the PIM's load (its tasks alone over the host's) under AMP and in fp32, and where it
    # passes the slack rule's BUSY_PIM_LOAD
    from pimrt.runtime.authority import BUSY_PIM_LOAD
    load = {name: [c[m, "authority"]["bound_pim_busy_cycles"]
                   / c[m, "authority"]["bound_host_busy_cycles"] for m in models]
            for name, c in (("amp", a32), ("fp32", c32))}
    assert f"the PIM's tasks alone take {_span(load['amp'], '.2f')} of the host's tasks' time " \
           f"alone, against {_span(load['fp32'], '.2f')} in fp32" in pr
    assert [m for m, x in zip(models, load["amp"]) if x >= BUSY_PIM_LOAD] \
        == ["densenet121", "mobilenetv2"]
    assert f"Where the PIM's load passes 0.6 (DenseNet-121 and MobileNetV2 here; ResNet-50's is " \
           f"{load['amp'][1]:.3f})" in pr
    slack = {size: [a[m, "authority"]["slack_rule_step_ms"] for m in kept[size]]
             for a, size in ((a32, 32), (a224, 224))}
    step = {size: [a[m, "authority"]["step_ms"] for m in kept[size]]
            for a, size in ((a32, 32), (a224, 224))}
    assert f"(the per-layer rule's step kept on ResNet-18, ResNet-50 and VGG-16: " \
           f"{slack[224][0]:.3f} -> {step[224][0]:.3f} ms, {slack[224][1]:.3f} -> " \
           f"{step[224][1]:.3f}, {slack[224][2]:.3f} -> {step[224][2]:.3f})" in rt
    assert f"(the slack rule's: {slack[224][0]:.3f}, {slack[224][1]:.3f} and " \
           f"{slack[224][2]:.3f} ms), the slack rule's on the other two" in pr
    kept224 = [m for m in models if c224[m, "authority"].get("authority_rule_kept") == "layer"]
    assert kept224 == ["resnet50", "densenet121"]
    assert f"(the slack rule's: {c224['resnet50', 'authority']['slack_rule_step_ms']:.3f} and " \
           f"{c224['densenet121', 'authority']['slack_rule_step_ms']:.3f} ms)" in rt
    mb = a224["mobilenetv2", "authority"]
    assert mb["serial_step_ms"] < mb["gpu_only_step_ms"]
    assert f"is now faster ({mb['serial_step_ms']:.3f} ms)" in pr
    for doc in (rt, pr):
        assert f"{_mean(a224[m, 'authority']['speedup_vs_gpu_only'] for m in models):.3f}x and " \
               f"{_mean(a224[m, 'authority']['speedup_vs_serial'] for m in models):.3f}x on " \
               f"average" in doc
    def host_alone(r):
        return r["bound_host_busy_cycles"] * r["step_ms"] / r["makespan_cycles"]

    alone = [host_alone(a32[m, "authority"]) / host_alone(c32[m, "authority"]) for m in models]
    io = [a32[m, "authority"]["energy_mj"]["counts"]["host_io_bytes"]
          / c32[m, "authority"]["energy_mj"]["counts"]["host_io_bytes"] for m in models]
    assert {f"{x:.2f}" for x in io} == {"0.50"}
    assert f"the Tensor-Core host's tasks alone take {_span(alone, '.2f')} of their fp32 time " \
           f"with half the bytes (the host's I/O bytes 0.50 of fp32's)" in pr
    # the 16-bit batch norm's cycles per element over the fp32 kernel's (kernel_cycles.json)
    from pimrt.pim.cycles import cycles_per_element as cpe
    x = [cpe(f"{k}_{d}", n) / cpe(k, n) for k in ("bn_stats_ch", "bn_apply_ch",
                                                   "bn_bwd_stats_ch", "bn_bwd_apply_ch")
         for d in ("f16", "bf16") for n in (8, 16)]
    assert f"batch norm costs {_span(x, '.1f')}x the fp32 kernel's cycles per element" in pr
    # the default system, as the runs report it
    sysm = c32["resnet18", "authority"]["system"]["memory"]
    assert (sysm["channels"], round(sysm["peak_gbs"]), sysm["pim_units"], sysm["pim_lanes"],
            sysm["pim_clock_mhz"], round(sysm["clock_mhz"])) == (32, 898, 256, 8, 300.0, 877)
    assert f"clock_ratio` = 300 MHz / 877 MHz = {sysm['pim_clock_ratio']:.3f}" in rt
    assert f"{sysm['host_outstanding_requests']} on the four stacks " \
           f"({sysm['host_outstanding_requests'] / 32:.0f} per channel)" in rt


def test_runtime_md_holds_the_authority_bench():
    """docs/runtime.md "The authority parameters": the table of `pimrt bench authority` is
    docs/figures/authority.json, and so are the figures the prose draws from it."""
    res = _load("authority.json")
    text = (ROOT / "docs" / "runtime.md").read_text().splitlines()
    for r in res:
        p = r["grid_best_params"]
        row = (f"| {r['model']} | {r['serial']:,} | {r['fixed']:,} | {r['layer_rule']:,} | "
               f"{r['rule']:,} | {r['slack_oracle']:,} | {r['grid_best']:,} ({p[0]}, {p[1]}) | "
               f"{r['rule'] / r['grid_best']:.3f} |")
        assert row in text, row
        assert r["rule"] == r["slack_oracle"]          # "gives the oracle's step on both"
        assert f"{r['rule'] / r['grid_best']:.3f}" == "1.000"
    words = _words("runtime.md")
    by = {r["model"]: r for r in res}
    assert f"(the per-layer rule is {100 * (by['resnet18']['layer_rule'] / by['resnet18']['grid_best'] - 1):.1f}% " \
           f"above it on ResNet-18)" in words
    assert f"(the small ResNet's serial step is {by['resnet_cifar_20']['serial'] / 1e6:.2f} M cycles)" \
        in words
    assert f"On ResNet-18 the slack rule is {by['resnet18']['grid_best'] - by['resnet18']['rule']} " \
           f"cycles below the grid's best" in words
    gains = [r["serial"] / r[k] - 1 for r in res for k in ("fixed", "layer_rule", "rule",
                                                           "slack_oracle")]
    assert f"every rule is within {100 * min(gains):.1f}-{100 * max(gains):.1f}% of serial" \
        in words


def test_runtime_md_sensitivity_prose_is_the_csv():
    """docs/runtime.md "Sensitivity": the bullets under the table quote
    docs/figures/sensitivity.csv (the smallest margins, the variants' steps and means)."""
    import csv
    with open(FIG / "sensitivity.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    by = {(r["model"], r["variant"]): r for r in rows}
    models = list(dict.fromkeys(r["model"] for r in rows))
    f = lambda m, v, k: float(by[m, v][k])                           # noqa: E731
    words = _words("runtime.md")
    low_s = min((float(r["speedup_vs_serial"]), r["variant"], r["model"]) for r in rows)
    assert low_s[1:] == ("lanes16", "resnet18")
    assert f"(the smallest margins: {low_s[0]:.2f}x over serial with 16 lanes on ResNet-18;" \
        in words
    low_g = sorted((float(r["speedup_vs_gpu_only"]), r["variant"], r["model"]) for r in rows)
    assert {(v, m) for x, v, m in low_g if f"{x:.2f}" == f"{low_g[0][0]:.2f}"} \
        == {("default", "resnet18"), ("switch_x4", "resnet18")}
    assert f"{low_g[0][0]:.2f}x over GPU-only, ResNet-18 on the default system and with the " \
           f"4x mode switch)" in words
    g = lambda m, v: f"{f(m, 'default', 'gpu_only_step_ms'):.2f} -> {f(m, v, 'gpu_only_step_ms'):.2f}"  # noqa: E731,E501
    assert f"(GPU-only ResNet-18 {g('resnet18', 'one_stack')} ms, DenseNet-121 " \
           f"{g('densenet121', 'one_stack')})" in words
    mean = lambda v, k: _mean(f(m, v, k) for m in models)            # noqa: E731
    assert f"mean {mean('one_stack', 'speedup_vs_gpu_only'):.3f}x over GPU-only, but the steps " \
           f"sit furthest from the bound (DenseNet-121 {f('densenet121', 'one_stack', 'step_vs_bound'):.3f}" \
        in words
    assert max(models, key=lambda m: f(m, "one_stack", "step_vs_bound")) == "densenet121"
    one = {m: f(m, "one_stack", "speedup_vs_gpu_only") for m in models}
    assert min(one, key=one.get) == "mobilenetv2"
    assert f"({one['mobilenetv2']:.2f}x against " \
           f"{f('mobilenetv2', 'default', 'speedup_vs_gpu_only'):.2f}x on the default system)" in words

    def alone(m, v):
        return f(m, v, "bound_host_busy_cycles") * f(m, v, "step_ms") / f(m, v, "makespan_cycles")

    shrink = [alone(m, "default") / alone(m, "tensor_core_host") for m in models]
    assert f"shrinks the host's work {_span(shrink, '.1f')}x (host alone ResNet-50 " \
           f"{alone('resnet50', 'default'):.2f} -> {alone('resnet50', 'tensor_core_host'):.2f} ms)" \
        in words
    assert f"mean {mean('tensor_core_host', 'speedup_vs_gpu_only'):.3f}x over GPU-only, " \
           f"{mean('tensor_core_host', 'speedup_vs_serial'):.3f}x over serial, energy " \
           f"{mean('tensor_core_host', 'energy_mj.vs_gpu_only'):.3f} of GPU-only's; the step moves " \
           f"away from the bound ({mean('tensor_core_host', 'step_vs_bound'):.3f})" in words

    def cut(v):
        return [100 * (1 - f(m, v, "step_ms") / f(m, "default", "step_ms")) for m in models]

    s = lambda m, v, k="step_ms": f"{f(m, 'default', k):.2f} -> {f(m, v, k):.2f}"  # noqa: E731
    assert f"16 lanes shorten the co-executed step by {_span(cut('lanes16'), '.1f')}% " \
           f"(MobileNetV2 {s('mobilenetv2', 'lanes16')} ms, DenseNet-121 " \
           f"{s('densenet121', 'lanes16')}) and the serial one more (MobileNetV2 " \
           f"{s('mobilenetv2', 'lanes16', 'serial_step_ms')})" in words
    assert f"the mean over serial falls from {mean('default', 'speedup_vs_serial'):.3f}x to " \
           f"{mean('lanes16', 'speedup_vs_serial'):.3f}x while the mean over GPU-only rises to " \
           f"{mean('lanes16', 'speedup_vs_gpu_only'):.3f}x" in words
    # "A faster PIM shortens every step ... the memory clock lies in between"
    assert all(x > 0 for v in ("lanes16", "pim_at_memory_clock") for x in cut(v))
    for k, lo, hi in (("speedup_vs_serial", "lanes16", "default"),
                      ("speedup_vs_gpu_only", "default", "lanes16")):
        assert mean(lo, k) < mean("pim_at_memory_clock", k) < mean(hi, k), k
    assert "the memory clock lies in between" in words
    assert f"A 4x mode switch** costs {_span((-x for x in cut('switch_x4')), '.1f')}% " \
           f"(MobileNetV2 {s('mobilenetv2', 'switch_x4')} ms, DenseNet-121 " \
           f"{s('densenet121', 'switch_x4')})" in words


def test_energy_md_prose_is_the_compare_files():
    """docs/energy.md "What the figures say": the shares, savings and ResNet-50's parts are
    docs/figures/compare-32.json's and compare-224.json's."""
    words = _words("energy.md")
    models, c32 = _compare("compare-32.json")
    _, c224 = _compare("compare-224.json")
    host, conv = [], []
    for c in (c32, c224):
        for r in c.values():
            e = r["energy_mj"]
            host += [e["host"] / e["total"], e["gpu_only_parts"]["host"] / e["gpu_only_total"]]
            conv.append(e["components"]["host_compute"] / e["total"])
    pct = lambda xs: f"{100 * min(xs):.0f}-{100 * max(xs):.0f}%"   # noqa: E731
    assert f"({pct(host)}: its CONVs' executed FLOPs {pct(conv)}, its static power the rest)" \
        in words
    assert f"so the CONVs' share of the energy is {pct(conv)}" in words
    r50 = c32["resnet50", "authority"]
    assert f"ResNet-50 at 32x32 {50 * r50['gpu_only_step_ms']:,.0f} mJ GPU-only, " \
           f"{50 * r50['step_ms']:,.0f} authority" in words
    save = {}
    for c, size in ((c32, 32), (c224, 224)):
        e = [c[m, "authority"]["energy_mj"] for m in models]
        save[size] = ([1 - x["vs_gpu_only"] for x in e], [1 - x["vs_serial"] for x in e],
                      _mean(x["vs_gpu_only"] for x in e), _mean(x["vs_serial"] for x in e))
    g32, s32, mg32, ms32 = save[32]
    g224, s224, mg224, ms224 = save[224]
    assert f"Authority uses {pct(g32)} less energy than GPU-only at 32x32 ({mg32:.3f} on " \
           f"average; {pct(g224)} and {mg224:.3f} at 224x224) and {pct(s32)} less than serial " \
           f"({ms32:.3f}; {pct(s224)} and {ms224:.3f})" in words
    e = r50["energy_mj"]
    assert f"(ResNet-50 at 32x32: {e['gpu_only_parts']['dram']:.1f} mJ DRAM + " \
           f"{e['gpu_only_parts']['io']:.1f} I/O); with the PIM running them the DRAM falls to " \
           f"{e['dram']:.1f} mJ and the I/O to {e['io']:.1f}, while the PIM adds {e['pim']:.1f}" \
        in words
    worse = [m for m in models if c32[m, "bank_partition"]["energy_mj"]["vs_serial"] > 1]
    assert worse == ["resnet50", "mobilenetv2"]
    assert f"on ResNet-50 ({c32['resnet50', 'bank_partition']['energy_mj']['vs_serial']:.3f} at " \
           f"32x32) and MobileNetV2 " \
           f"({c32['mobilenetv2', 'bank_partition']['energy_mj']['vs_serial']:.3f})" in words


def test_layrub_md_holds_the_cuda_run():
    """docs/layrub.md "On CUDA": the table and the ranges under it are
    docs/figures/gpu-h200/layrub.txt's (`pimrt bench layrub --device cuda`)."""
    rows = {}
    for line in (FIG / "gpu-h200" / "layrub.txt").read_text().splitlines()[2:]:
        c = line.split()
        if len(c) == 8 and c[0][0].isalpha() and c[2][0].isdigit():
            rows[c[0], c[1]] = c
    names = {"resnet50": "ResNet-50", "resnet101": "ResNet-101", "resnet152": "ResNet-152",
             "vgg16": "VGG-16"}
    text = (ROOT / "docs" / "layrub.md").read_text().splitlines()
    for m, name in names.items():
        cell = lambda v: f"{rows[m, v][2]} ({rows[m, v][3]})"         # noqa: E731
        row = (f"| {name} | {rows[m, 'plain'][2]} | {cell('save_on_cpu')} | "
               f"{cell('checkpoint-block')} | {cell('checkpoint-seq')} | {cell('layrub')} | "
               f"{rows[m, 'layrub'][4]} |")
        assert row in text, row
    words = _words("layrub.md")
    resnets = [m for m in names if m.startswith("resnet")]
    soc = [float(rows[m, "save_on_cpu"][4]) for m in resnets]
    lay = [float(rows[m, "layrub"][4]) for m in resnets]
    assert f"({_span(soc, '.1f')} MiB of host memory on the ResNets against Layrub's " \
           f"{_span(lay, '.1f')})" in words
    dev = {v: [float(rows[m, v][2]) for m in resnets] for v in ("save_on_cpu", "layrub")}
    assert len(set(dev["save_on_cpu"])) == 1
    assert f"({dev['save_on_cpu'][0]:.1f} MiB for `save_on_cpu` on every ResNet, " \
           f"{_span(dev['layrub'], '.1f')} for Layrub)" in words
    wall = [float(c[5]) for c in rows.values()]
    assert f"the steps take {1000 * min(wall):.0f}-{1000 * max(wall):.0f} ms" in words
    t = [float(c[7].rstrip("%")) for (m, v), c in rows.items() if v != "plain"]
    assert f"(+{min(t):.0f}% to +{max(t):.0f}% against plain)" in words


def test_memctl_md_speed_prose_is_the_bench_file_and_the_reference():
    """docs/memctl.md "Speed": the DRAMsim3 whole-process rates it quotes are
    docs/figures/bench-memctl.json's; the quoted ones dram-reference.md's
    (pimrt/memctl/reference.py)."""
    from pimrt.memctl.reference import PROCESS_SECONDS, REQUESTS
    res = _load("bench-memctl.json")
    words = _words("memctl.md")
    cpu = [r["dramsim3"]["requests_per_cpu_s"] / 1e6 for r in res["rows"] if r.get("dramsim3")]
    assert f"({_span(cpu, '.2f')} M requests a CPU-second as a whole process)" in words
    quoted = [REQUESTS / PROCESS_SECONDS[k]["DRAMsim3"] / 1e6
              for k in (("hbm2", "stream", 4), ("hbm2", "random", 4), ("ddr4", "stream", 1))]
    assert f"were {quoted[0]:.2f}, {quoted[1]:.2f} and {quoted[2]:.2f} M requests/s" in words
    core = {r["case"]: r["sim_requests_per_s"] / 1e6 for r in res["rows"]}
    assert core and all(x >= (5 if "stream" in c else 2) for c, x in core.items()), core
    assert "every case meets issue 24's targets for the core (5 M requests/s streaming, 2 M/s " \
           "random on one core)" in words


def test_traces_md_replay_line_is_the_runs_figures():
    """docs/traces.md quotes memsim's line after a replay of ResNet-18's step (batch 32,
    authority); the figures are the run's, docs/figures/compare-32.json's."""
    from pimrt.trace.replay import check_line
    _, c32 = _compare("compare-32.json")
    r = c32["resnet18", "authority"]
    run = {"cycles": r["makespan_cycles"], "mode_switches": r["mode_switches"],
           "requests": r["requests"]}
    line = check_line({"model": "resnet18", "batch": 32, "step": "authority", "run": run}, run)
    assert f"`{line}`" in _words("traces.md")


def test_speed_md_aim_of_issue_38_memory_met_cpu_not():
    """docs/speed.md: "The aim of issue 38 was 60 s of CPU and 0.5 GB for the 224x224 case;
    the table shows the memory aim met and the CPU aim not met" (docs/figures/bench-speed.json);
    and the block size
    docs/architecture.md names is the runtime's."""
    from pimrt.runtime.work import BLOCK_REQUESTS
    runs = [r for r in _load("bench-speed.json")["runs"]
            if r["case"] == "resnet50_224" and r["build"] == "this"]
    assert runs and all(r["cpu_s"] > 60 and r["peak_rss_mib"] * 2**20 <= 0.5e9 for r in runs)
    assert "The aim of issue 38 was 60 s of CPU and 0.5 GB for the 224x224 case; the table " \
           "shows the memory aim met and the CPU aim not met" in _words("speed.md")
    assert f"blocks of about {BLOCK_REQUESTS // 1024}K requests" in _words("architecture.md")


def test_sweep_md_holds_the_resnet18_rows():
    """docs/sweep.md "Figures": ResNet-18's row of each variant, docs/figures/sensitivity.csv
    as doc_tables.sensitivity_model_rows renders it."""
    import csv
    with open(FIG / "sensitivity.csv", newline="") as fh:
        rows = doc_tables.sensitivity_model_rows(list(csv.DictReader(fh)), "resnet18")
    assert len(rows) == 8
    text = (ROOT / "docs" / "sweep.md").read_text().splitlines()
    missing = [r for r in rows if r not in text]
    assert not missing, f"docs/sweep.md lacks these rows of sensitivity.csv: {missing[:2]}"


def test_laysa_md_holds_the_bench_laysa_files():
    """docs/laysa.md "Figures on the yardstick": the memory and search tables are
    docs/figures/laysa-*.json (`pimrt bench laysa --json`) as doc_tables renders them, and the
    bullets' figures are those files'; the sgd row of the PIM runtime table and the derived
    percentages are docs/figures/compare-32.json's and the table's own."""
    import re
    r18, r18b, r20 = (_load(f"laysa-{n}.json") for n in ("resnet18-256MB", "resnet18-192MB",
                                                          "resnet20-48MB"))
    text = (ROOT / "docs" / "laysa.md").read_text()
    lines = text.splitlines()
    for table in (doc_tables.laysa_memory_table, doc_tables.laysa_search_table):
        missing = [r for r in table([r18, r18b, r20]) if r not in lines]
        assert not missing, f"docs/laysa.md lacks these rows of docs/figures/laysa-*.json: " \
                            f"{missing[:2]}"
    words = " ".join(text.split())
    M = 2**20
    dev = lambda res, v: res["rows"][v]["meter_device_bytes"]            # noqa: E731
    led = lambda res, v: res["rows"][v]["peak_bytes"]                    # noqa: E731
    less = lambda res, f: 100 * (1 - f(res, "laysa") / f(res, "gradsa"))  # noqa: E731
    assert f"LaySA holds {less(r18, dev):.1f}% less device memory than GradSA alone on ResNet-18 " \
           f"at batch 4 ({less(r20, dev):.1f}% on ResNet-20 at batch 8)" in words
    assert f"The ledger's -{less(r18, led):.1f}% / -{less(r20, led):.1f}% leave out" in words
    lay = r18["rows"]["laysa"]
    assert f"(2 x {lay['param_bytes'] / M:.1f} MiB on ResNet-18)" in words
    assert f"host pool, {lay['meter_host_bytes'] / M:.0f} MiB with Layrub's 64 MiB pool chunk" \
        in words
    mb = {v: r["max_batch"] for v, r in r20["rows"].items()}
    assert f"GradSA alone {mb['gradsa']} images, Layrub alone {mb['layrub']}, naive " \
           f"{mb['naive']}, LaySA {mb['laysa']} (+{100 * (mb['laysa'] / mb['gradsa'] - 1):.0f}% " \
           f"over GradSA; +{100 * (mb['laysa'] / mb['layrub'] - 1):.0f}% over Layrub alone)" \
        in words
    r = r18["rows"]
    assert [r[v]["max_batch"] for v in ("gradsa", "layrub", "naive", "laysa")] == [36, 128, 128,
                                                                                  128]
    assert f"GradSA alone 36 images; the three others reach the cap of 128 (LaySA at " \
           f"{r['laysa']['max_batch_device_bytes'] / M:.0f} MiB there)" in words
    b = r18b["rows"]
    assert b["gradsa"]["max_batch"] == b["naive"]["max_batch"] == 0
    one = b["gradsa"]["search_runs"][0]
    assert one[0] == 1 and not one[2] and b["naive"]["search_runs"][0][1] == one[1]
    over = next(x for x in b["layrub"]["search_runs"] if not x[2])
    assert f"(one image: {one[1] / M:.1f} MiB, their four model-sized buffers are above the " \
           f"budget), Layrub alone fits {b['layrub']['max_batch']} ({over[0]} did not: " \
           f"{over[1] / M:.1f} MiB), LaySA at least 128" in words
    lr = r20["rows"]["layrub"]
    assert f"at Layrub's {lr['max_batch']} images it counts {lr['max_batch_ledger_bytes'] / M:.1f} " \
           f"MiB where the meter measures {lr['max_batch_device_bytes'] / M:.1f} MiB" in words
    short = max((x["meter_device_bytes"] - x["peak_bytes"] - x["param_bytes"]) / M
                for x in r20["rows"].values())
    assert f"{short:.1f} MiB at 32x32, batch 8, below" in words
    # the PIM runtime table: sgd is compare-32's ResNet-18 authority row
    _, c32 = _compare("compare-32.json")
    sgd = c32["resnet18", "authority"]
    row = {m.group(1): [float(x) for x in m.groups()[1:]] for m in re.finditer(
        r"(sgd|gradsa|laysa) +([\d.]+) +([\d.]+) +([\d.]+) +([\d.]+) +([\d.]+)", text)}
    assert row["sgd"] == [round(sgd["step_ms"], 3), round(sgd["serial_step_ms"], 3),
                          round(sgd["speedup_vs_serial"], 3), round(sgd["gpu_only_step_ms"], 3),
                          round(sgd["update_memory"]["peak_bytes"] / M, 1)]
    par = sgd["update_memory"]["param_bytes"] / M
    g, s = row["gradsa"], row["laysa"]
    assert f"-{100 * (1 - s[4] / g[4]):.1f}% (-{100 * (1 - (s[4] - par) / (g[4] - par)):.1f}% " \
           f"without parameters)" in words
    assert f"LaySA needs {100 * (1 - s[4] / g[4]):.1f}% less DRAM than GradSA alone" in words
    assert f"({100 * (1 - (s[4] - par) / (g[4] - par)):.1f}% less for what is not the " \
           f"parameters themselves), at {100 * (s[0] / g[0] - 1):.1f}% more step time" in words
    assert f"(ResNet-18: {4 * par:.1f} MiB a step)" in words
    assert f"costs {100 * (g[0] / row['sgd'][0] - 1):.1f}% of ResNet-18's step time" in words
    sp = [row[v][2] for v in ("sgd", "gradsa", "laysa")]
    assert f"(ResNet-18 {min(sp):.3f}-{max(sp):.3f}x)" in words


def test_laysa_md_wire_time_arithmetic():
    """docs/laysa.md: ResNet-50's exchange at density 0.001: its kept elements, 2.4 bytes each
    (GradSA's measured average, the runtime's constant) a rank, 3 payloads in at 10 Gbit/s."""
    from pimrt import zoo
    n = zoo.count_params(zoo.build("resnet50", device="meta"))
    from pimrt.runtime.exchange import PAYLOAD_BYTES_PER_ELEMENT
    assert PAYLOAD_BYTES_PER_ELEMENT == 2.4
    k = n * 0.001
    words = _words("laysa.md")
    assert f"(ResNet-50: {k / 1e3:.1f} k elements, {k * 2.4 / 1e3:.0f} kB a rank, 3 payloads in " \
           f"at 10 Gbit/s: {3 * k * 2.4 * 8 / 10e9 * 1e3:.2f} ms a step)" in words


def test_runtime_md_slack_yield_cap_pairs():
    """docs/runtime.md "The authority parameters": the paired steps with the slack rule's
    yielding epoch cap at 4000 and at 2000 cycles (docs/figures/slack-yield-cap.json) say what
    the page says of them, and the compare files' steps are within 3% of the cap-2000 steps
    and no longer (the pairs were measured before the host's low watermark and epoch cap beside
    a critical host task, the AMP ones also before the 8-lane 16-bit batch norm backward
    program and the widening forms, which made the AMP steps shorter, as the page says)."""
    rows = _load("slack-yield-cap.json")["rows"]
    words = _words("runtime.md")
    ratio = [r["step_ms_cap2000"] / r["step_ms_cap4000"] - 1 for r in rows]
    shorter = [-x for x in ratio if x < 0]
    longer = [x for x in ratio if x > 0]
    same = sum(x == 0 for x in ratio)
    assert f"2000 gave the shorter step on {len(shorter)} of the {len(rows)} pairs " \
           f"({100 * min(shorter):.2f}-{100 * max(shorter):.2f}% shorter), the same on {same} " \
           f"and the longer on {len(longer)} ({100 * min(longer):.2f}-{100 * max(longer):.2f}% " \
           f"longer)" in words
    files = {("fp32", 32): "compare-32.json", ("fp32", 224): "compare-224.json",
             ("amp-fp16", 32): "compare-amp-fp16-32.json",
             ("amp-fp16", 224): "compare-amp-fp16-224.json"}
    assert "the AMP pairs before the 8-lane program of the 16-bit batch norm backward" in words
    assert "(every fp32 step of the tables is within 3% of its pair's and no longer)" in words
    amp = []
    for r in rows:
        _, by = _compare(files[(r["precision"], r["input"])])
        now = by[(r["model"], "authority")]["step_ms"]
        if r["precision"] == "fp32":
            assert r["step_ms_cap2000"] * 0.97 <= now <= r["step_ms_cap2000"], r
        else:
            amp.append(1 - now / r["step_ms_cap2000"])
    assert f"(every AMP step of the tables is {100 * min(amp):.1f}-{100 * max(amp):.1f}% " \
           f"shorter than its pair's)" in words


def test_runtime_md_busy_pim_cap_pairs():
    """docs/runtime.md "The authority parameters": the paired steps with the PIM's epochs beside
    a critical host task capped at 6 and at 12 switch costs (docs/figures/busy-pim-cap.json)
    say what the page says of them."""
    rows = _load("busy-pim-cap.json")["rows"]
    words = _words("runtime.md")
    hi = [r for r in rows if r["pim_load_alone"] >= 0.5]
    lo = [r for r in rows if r["pim_load_alone"] < 0.5]
    assert len(hi) + len(lo) == len(rows)
    gain = [1 - r["step_ms_cap12"] / r["step_ms_cap6"] for r in hi]
    assert min(gain) > 0
    prof = [r["pim_load_profiled"] for r in hi if r["pim_load_profiled"] is not None]
    assert f"12 gave the shorter step on all {len(hi)} pairs where the PIM's tasks alone take " \
           f"{min(r['pim_load_alone'] for r in hi):.2f} of the host's or more " \
           f"({100 * min(gain):.2f}-{100 * max(gain):.2f}% shorter; the rule's own load, on the " \
           f"profiled durations, {min(prof):.2f}-{max(prof):.2f} where recorded)" in words
    worse = [r["step_ms_cap12"] / r["step_ms_cap6"] - 1 for r in lo if r["step_ms_cap12"] > r["step_ms_cap6"]]
    (better,) = [r for r in lo if r["step_ms_cap12"] < r["step_ms_cap6"]]
    assert f"the longer one on {len(worse)} of the {len(lo)} pairs below 0.5 " \
           f"({100 * min(worse):.2f}-{100 * max(worse):.2f}% longer; ResNet-50 in fp32 at 32x32 " \
           f"{100 * (1 - better['step_ms_cap12'] / better['step_ms_cap6']):.2f}% shorter)" in words
    assert (better["model"], better["precision"], better["input"]) == ("resnet50", "fp32", 32)
    late = [(r["model"], r["precision"], r["input"]) for r in rows if r.get("out_of_sample")]
    assert late == [("densenet121", "amp-fp16", 224), ("mobilenetv2", "fp32", 224)]


def test_runtime_md_host_holding_steps_are_compare_32s():
    """docs/runtime.md "The host's low watermark and epoch cap beside a critical host task":
    the steps after the change are docs/figures/compare-32.json's (the ones before it, the
    file at fd8af46, are history)."""
    words = _words("runtime.md")
    _, c32 = _compare("compare-32.json")
    names = {"resnet18": "ResNet-18", "resnet50": "ResNet-50", "vgg16": "VGG-16",
             "densenet121": "DenseNet-121", "mobilenetv2": "MobileNetV2"}
    for m, name in names.items():
        assert f"{name} " in words and f"-> {c32[m, 'authority']['step_ms']:.3f}" in words, m
    assert f"(step / bound 1.067 -> {c32['mobilenetv2', 'authority']['step_vs_bound']:.3f})" \
        in words


def test_runtime_md_amp_prose_is_the_amp_file():
    """runtime.md's sentence under its 32x32 AMP table: the means and the AMP step's share of
    the fp32 step, from the two compare files (it once kept an older mean)."""
    import statistics
    amp = {m: r for (m, p), r in _compare("compare-amp-fp16-32.json")[1].items()
           if p == "authority"}
    fp = _compare("compare-32.json")[1]
    share = [amp[m]["step_ms"] / fp[m, "authority"]["step_ms"] for m in amp]
    mean = {k: statistics.mean(r[k] for r in amp.values())
            for k in ("speedup_vs_gpu_only", "speedup_vs_serial", "step_vs_bound")}
    assert f"Under AMP the step beats GPU-only (AMP) by {mean['speedup_vs_gpu_only']:.3f}x and " \
           f"serial by {mean['speedup_vs_serial']:.3f}x on average and is {min(share):.2f}-" \
           f"{max(share):.2f} of the fp32 step, but sits further from its bound " \
           f"({mean['step_vs_bound']:.3f};" in _words("runtime.md")


def test_speed_md_what_the_aim_would_take():
    """docs/speed.md, "What the aim would take": the requests each run of the 224x224 command
    simulated and memctl's rate, from docs/figures/profile-resnet50-224-requests.json
    (scripts/profile_run.py), and DRAMsim3's rates beside `pimrt memsim` from
    docs/figures/bench-memctl.json."""
    doc = _load("profile-resnet50-224-requests.json")
    words = _words("speed.md")
    memctl = {r["run"]: r["cpu_s"] for r in doc["by_run"] if r["phase"] == "memctl"}
    assert sum(memctl.values()) == pytest.approx(doc["by_phase"]["memctl"], abs=0.05)
    label = {"gpu_only": "GPU-only",
             "authority": "the step (the slack rule's profiled step and its own)",
             "alone (plan)": "each side's tasks alone (the second timing from where the streams "
                             "part)",
             "serial": "serial"}
    req = doc["requests_by_run"]
    assert set(req) == set(label)
    for run, n in req.items():
        row = f"| {label[run]} | {n:,} | {memctl[run]:.1f} | {n / memctl[run] / 1e6:.2f} |"
        assert row in words, row
    total, m = sum(req.values()), doc["by_phase"]["memctl"]
    rate = total / m / 1e6
    assert f"| all | {total:,} | {m:.1f} | {rate:.2f} |" in words
    assert f"the 224x224 command took {doc['cpu_s']:.1f} s of CPU, memctl {m:.1f} s of it, and " \
           f"memctl simulated {total / 1e9:.3f} billion requests" in words
    need = total / 60 / 1e6
    assert f"memctl alone would have to simulate {need:.1f} M requests per CPU second on this " \
           f"traffic, {need / rate:.1f}x the {rate:.2f} it does" in words
    assert need / rate > 5 and doc["commit"] in words
    rows = [r for r in _load("bench-memctl.json")["rows"] if r.get("dramsim3")]
    d3 = [r["dramsim3"]["requests_per_cpu_s"] / 1e6 for r in rows]
    vs = [r["process_vs_dramsim3_cpu"] for r in rows]
    assert f"DRAMsim3 simulated {min(d3):.2f} to {max(d3):.2f} M requests per CPU second, " \
           f"{min(vs):.1f} to {max(vs):.1f} times fewer than `pimrt memsim`'s whole process" in words


def test_speed_md_one_run_on_several_cores():
    """docs/speed.md, "One run on several cores": a one-point sweep's tasks (its tasks.csv) by
    process, against `pimrt run`'s wall time in the profile of the same command."""
    import csv
    with open(FIG / "one-point-sweep-224-tasks.csv", newline="") as fh:
        tasks = list(csv.DictReader(fh))
    by_worker: dict[str, list] = {}
    for t in tasks:
        assert t["status"] == "done"
        by_worker.setdefault(t["worker"], []).append(t)
    assert sorted(len(v) for v in by_worker.values()) == [1, 3]
    one, three = sorted(by_worker.values(), key=len)
    secs = {t["kind"]: float(t["wall_s"]) for t in tasks}
    words = _words("speed.md")
    assert [t["kind"] for t in three] == ["serial", "bound", "point"] and one[0]["kind"] == "gpu_only"
    chain = sum(float(t["wall_s"]) for t in three)
    wall = _load("profile-resnet50-224-requests.json")["wall_s"]
    assert f"took {secs['serial']:.1f}, {secs['bound']:.1f} and {secs['point']:.1f} s of wall " \
           f"time one after another in one process ({chain:.1f} s), GPU-only " \
           f"{secs['gpu_only']:.1f} s in the other, against {wall:.1f} s of wall time for " \
           f"`pimrt run`" in words
    assert chain < wall
