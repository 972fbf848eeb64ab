"""Figures quoted in docs/memctl.md, docs/pim.md and docs/gradsa.md that no results file
renders, recomputed here from a fresh, cheap run (seconds each) or from the repo's own
tables, and compared with the text to the last printed digit: memctl's cycles on the
reference traces and the fidelity cases (the quoted DRAMsim3 / Ramulator columns against
pimrt/memctl/reference.py), the PIM's cycles per element (golden model, pimrt/pim's cycle
table), ResNet-18's bytes a step, the index codecs' bytes per index. The figures of timed runs (simulation speed) are the
machine's and are not checked; docs/gradsa.md's bench tables are generated from their
results files (tests/test_docs_figures.py)."""
from __future__ import annotations

import pathlib
import re

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _text(name: str) -> str:
    return (DOCS / name).read_text()


def _n(x: int) -> str:
    return f"{x:,}"


def _pct(a: int, b: int) -> str:
    return f"{100 * (a / b - 1):+.1f}%"


# ---------------------------------------------------------------- memctl.md: the reference traces
def _memctl_cycles(part: str, pattern: str, width: int, policy: str = "serial",
                   column_first: bool = False, n: int = 1_000_000) -> int:
    from pimrt.memctl import Controller, Options, load_part
    from pimrt.memctl.example_trace import example_chunks
    from pimrt.trace import synthetic
    make = {"stream": synthetic.stream, "random": synthetic.random, "mix": synthetic.mix,
            "host+pim": example_chunks}[pattern]
    ctl = Controller(load_part(part, {"controller.arbitration": "column_first"}
                               if column_first else None),
                     Options(policy=policy, issue_width=width))
    for chunk in make(n):
        ctl.feed(np.ascontiguousarray(chunk))
    ctl.finish()
    return ctl.stats()["cycles"]


def _table_rows(text: str, first: str) -> list[list[str]]:
    """The rows of the markdown table whose header starts with `first`, as cells."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first} |"))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


def test_memctl_fidelity_table_is_memctl_on_the_reference_traces():
    """memctl.md "Fidelity against DRAMsim3 and Ramulator 2.1": each row's memctl cycles
    run again (1,000,000 requests; the last column with column-first arbitration), the
    reference columns as pimrt/memctl/reference.py quotes them."""
    from pimrt.memctl.reference import CYCLES
    rows = _table_rows(_text("memctl.md"), "part | trace | W | memctl cycles")
    assert len(rows) == len(CYCLES)
    for part, trace, w, mine, d3, ram, vs, before in rows:
        key = (part.lower(), trace, int(w))
        ref = CYCLES[key]
        cycles = _memctl_cycles(*key)
        assert [mine, d3, ram, vs] == [_n(cycles), _n(ref["DRAMsim3"]),
                                       _n(ref["Ramulator 2.1"]),
                                       _pct(cycles, ref["DRAMsim3"])], key
        if before:
            old = _memctl_cycles(*key, column_first=True)
            assert before == _pct(old, ref["DRAMsim3"]), key


def test_memctl_cases_without_a_reference_figure():
    """memctl.md: "DDR4 2:1 read/write 5,940,072 cycles; host + PIM serial 834,541 (835,149
    with column-first arbitration), bank_partition ... authority ..." (pimrt bench memctl)."""
    text = " ".join(_text("memctl.md").split())
    m = re.search(r"DDR4 2:1 read/write ([\d,]+) cycles; host \+ PIM serial ([\d,]+) "
                  r"\(([\d,]+) with column-first arbitration\), bank_partition ([\d,]+) "
                  r"\(([\d,]+)\), authority ([\d,]+) \(([\d,]+)\)", text)
    assert m, "the sentence moved"
    got = [_memctl_cycles("ddr4", "mix", 1)]
    for policy in ("serial", "bank_partition", "authority"):
        got += [_memctl_cycles("hbm2_pim", "host+pim", 4, policy),
                _memctl_cycles("hbm2_pim", "host+pim", 4, policy, column_first=True)]
    assert list(m.groups()) == [_n(c) for c in got]


def test_memctl_fidelity_cases_memctl_column():
    """memctl.md "Activation-bound traffic, live": memctl's column of each case (100,000
    requests); the DRAMsim3 column is a live run of DRAMsim3 (tests/test_bench_fidelity.py
    where a build is named), the deviation follows from the two."""
    import tempfile
    from pimrt.bench.energy import run_generated
    from pimrt.bench.fidelity import PARTS, generate
    from pimrt.memctl import load_part
    rows = _table_rows(_text("memctl.md"), "case | memctl | DRAMsim3")
    assert len(rows) == 10
    widths = dict(PARTS)
    with tempfile.TemporaryDirectory() as tmp:
        for name, mine, d3, vs, before in rows:
            part_name, case = name.split("-", 1)
            addr, write, cycle = generate(load_part(part_name), case, 100_000)
            s = run_generated(load_part(part_name), addr, write, cycle,
                              pathlib.Path(tmp) / "t.trace", widths[part_name])
            ref = int(d3.replace(",", ""))
            assert [mine, vs] == [_n(s["cycles"]), _pct(s["cycles"], ref)], name


# ---------------------------------------------------------------- pim.md: cycles per element
def _ops_cycles() -> dict:
    """(op, dtype, lanes) -> cycles per element of pimrt bench pim16's programs on the golden
    model (the same cycles as the RTL: the bench checks it), 1M elements as the bench's
    default."""
    from pimrt.bench.pim16 import _streams
    from pimrt.pim import isa, ops16
    from pimrt.pim.golden import GoldenBackend
    rng = np.random.default_rng(0)
    out = {}
    for lanes in (8, 16):
        gold = GoldenBackend(rows=2048, cols=32, lanes=lanes)
        gold.set_scalars([0.0])
        for name in ops16.OPS:
            for dt in (isa.F32, isa.DTYPES["f16"], isa.DTYPES["bf16"]):
                if dt == isa.F32 and name in ("WIDEN", "NARROW"):
                    continue
                ins, elems = _streams(name, 1 << 20, dt, lanes, rng)
                _, cycles = ops16.run(gold, name, dt, ins)
                out[name, isa.DTYPE_NAMES[dt], lanes] = cycles / elems
    return out


@pytest.fixture(scope="module")
def ops_cycles():
    return _ops_cycles()


def test_pim_ops_table_is_the_units_cycles(ops_cycles):
    """pim.md "Cycles per element" table: every op of a row, each dtype, both lane counts."""
    rows = _table_rows(_text("pim.md"), "op (streams) | fp32, 8 lanes")
    assert len(rows) == 4
    for ops, *cells in rows:
        names = [n.strip() for n in ops.split("(")[0].split(",")]
        names = ["WIDEN", "NARROW"] if names[0].startswith("WIDEN") else names
        for name in names:
            for cell, dtypes, lanes in zip(cells, (("f32",), ("f16", "bf16"), ("f32",),
                                                   ("f16", "bf16")), (8, 8, 16, 16)):
                for dt in dtypes:
                    want = ops_cycles.get((name, dt, lanes))
                    assert cell == ("" if want is None else f"{want:.4f}"), (name, dt, lanes)


def test_pim16_table_cycles_column(ops_cycles):
    """docs/figures/bench-pim16.json (the table pim.md renders from it): its cycles per
    element are the stream programs' on the golden model (the rates beside them are that
    machine's, under its load)."""
    import json
    rows = json.loads((ROOT / "docs" / "figures" / "bench-pim16.json").read_text())["results"]
    assert len(rows) >= 20
    for r in rows:
        assert f"{r['cycles_per_element']:.4f}" == \
            f"{ops_cycles[r['op'], r['dtype'], r['lanes']]:.4f}", r


def test_pim_kernel_cycles_quoted_are_the_cycle_tables():
    """"(0.2656 cycles an element at 8 lanes ...)" beside a kernel in pim.md is
    pimrt/pim/kernel_cycles.json's figure (the RTL-measured table the runtime times with)."""
    from pimrt.pim.cycles import cycles_per_element
    text = _text("pim.md")
    found = 0
    for line in text.splitlines():
        m = re.match(r"\| `(\w+)` \|", line)
        for cpe in re.findall(r"([\d.]+) cycles an element at 8 lanes", line) if m else ():
            assert cpe == f"{cycles_per_element(m.group(1), 8):.4f}", line
            found += 1
    assert found == 3


# ---------------------------------------------------------------- gradsa.md: bytes of ResNet-18
def test_gradsa_resnet18_bytes_a_step():
    """gradsa.md: dense fp32 sends 4 x parameters a step (44,695,848 B for ResNet-18 at the
    bench's 10 classes), DDP broadcasts 38,560 B of buffers, so no compressor's whole ratio
    passes (dense + buffers) / buffers."""
    from pimrt.train.models import build_model
    model = build_model("resnet18", 10, 16)          # as the bench trains it (16x16 digits)
    params = sum(p.numel() for p in model.parameters())
    dense = 4 * params
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    text = " ".join(_text("gradsa.md").split())
    assert f"CIFAR ResNet-18, {_n(params)} parameters" in text
    assert f"dense {_n(dense)} " in text
    assert f"the buffers are {_n(buffers)} B a step" in text
    assert f"can never pass {_n(dense + buffers)} / {_n(buffers)} = " \
           f"{(dense + buffers) / buffers:,.0f}x" in text


def test_pim_bench_cycles_columns_are_the_cycle_table():
    """docs/figures/bench-pim.json (the table pim.md renders from it): its cycles, unit
    column and DRAM column counts per element are pimrt/pim/kernel_cycles.json's (which
    `--update-cycles` writes from the same bench)."""
    import json
    from pimrt.pim import cycles
    rows = json.loads((ROOT / "docs" / "figures" / "bench-pim.json").read_text())["results"]
    assert len(rows) >= 34
    for r in rows:
        k, n = r["kernel"], r["lanes"]
        assert [f"{r[c]:.4f}" for c in ("cycles_per_element", "column_accesses_per_element",
                                         "dram_columns_per_element")] == [
            f"{cycles.cycles_per_element(k, n):.4f}",
            f"{cycles.column_accesses_per_element(k, n):.4f}",
            f"{cycles.dram_columns_per_element(k, n):.4f}"], r


def _index_rows() -> list[str]:
    """gradsa.md's bytes per index of each index codec: k indices drawn uniformly without
    replacement (numpy's default_rng(0)) from a layer of 2,359,296 elements (ResNet-18's
    largest, 512 x 512 x 3 x 3), the sizes the encoder computes to choose among them."""
    from pimrt.gradsa.encoding import gaps_of, index_sizes
    n = 2_359_296
    rng = np.random.default_rng(0)
    rows = []
    for label, d in (("25%", 0.25), ("1%", 0.01), ("0.1%", 0.001)):
        k = int(n * d)
        sizes = index_sizes(gaps_of(np.sort(rng.choice(n, k, replace=False))), n)
        rows.append(f"| {label:<7} | " + " | ".join(
            f"{sizes[c] / k:.2f}".ljust(w) for c, w in (("varint", 6), ("bitpack", 7),
                                                          ("rice", 4), ("bitmap", 6))) + " |")
    return rows


def test_gradsa_index_codec_table():
    text = _text("gradsa.md").splitlines()
    missing = [r for r in _index_rows() if r not in text]
    assert not missing, missing


def test_gradsa_auto_index_codec_on_resnet18():
    """gradsa.md: at density 0.002, `auto` picks rice for ResNet-18's layers of 30,000
    elements or more and varint for those with one or two values (five random draws)."""
    from pimrt import zoo
    from pimrt.gradsa import encoding
    net = zoo.build("resnet18", input_size=32, device="meta")
    sizes = [p.numel() for p in net.parameters()]
    assert "every layer of 30,000 elements or more" in _text("gradsa.md")
    for seed in range(5):
        rng = np.random.default_rng(seed)
        for numel in sizes:
            k = max(1, round(numel * 0.002))
            idx = np.sort(rng.choice(numel, k, replace=False))
            codec, _ = encoding.encode_indices(idx, numel, "auto")
            if numel >= 30_000:
                assert codec == "rice", (numel, seed, codec)
            if k <= 2:
                assert codec == "varint", (numel, seed, codec)
    assert sum(n >= 30_000 for n in sizes) == 18


def test_memctl_row_hit_cap_of_4():
    """memctl.md: "A row hit cap of 4 (DRAMsim3's) instead of 16 is still worse on mix (HBM2
    ..., DDR4 ...)": the two mix traces again with `controller.row_hit_cap = 4`."""
    from pimrt.memctl import Controller, Options, load_part
    from pimrt.memctl.reference import CYCLES
    from pimrt.trace import synthetic
    got = []
    for part, width in (("hbm2", 4), ("ddr4", 1)):
        ctl = Controller(load_part(part, {"controller.row_hit_cap": 4}),
                         Options(policy="serial", issue_width=width))
        for chunk in synthetic.mix(1_000_000):
            ctl.feed(np.ascontiguousarray(chunk))
        ctl.finish()
        got.append(ctl.stats()["cycles"])
        assert got[-1] > _memctl_cycles(part, "mix", width)          # "still worse"
        assert abs(got[-1] / CYCLES[part, "mix", width]["DRAMsim3"] - 1) > \
            abs(_memctl_cycles(part, "mix", width) / CYCLES[part, "mix", width]["DRAMsim3"] - 1)
    text = " ".join(_text("memctl.md").split())
    assert f"is still worse on mix (HBM2 {_n(got[0])}, DDR4 {_n(got[1])})" in text


# ---------------------------------------------------------------- energy.md: against DRAMsim3
def test_energy_md_validation_table_memctls_side():
    """energy.md "Validation against DRAMsim3": memctl's side of every row run again (the six
    quoted cases at 1 M requests, the six generated ones at the page's --requests 200000), the
    quoted DRAMsim3 side and each quoted deviation as pimrt/memctl/reference.py gives them.
    (The live rows' DRAMsim3 side needs a DRAMsim3 build: tests/test_bench_energy.py.)"""
    import tempfile
    from pimrt.bench import energy as be
    from pimrt.memctl import load_part
    from pimrt.memctl.reference import CYCLES
    rows = {r[0]: r for r in _table_rows(_text("energy.md"), "case")}
    assert len(rows) == 12
    cols = ("act", "read", "write", "refresh", "active_standby", "precharged_standby", "total")

    def first(cell):
        return cell.split(" / ")[0]

    for r in be._reference_rows(None):
        part, pattern = r["case"].split("-")
        row = rows[f"{r['case']} (quoted)"]
        width = 4 if part == "hbm2" else 1
        assert row[1] == f"{_n(r['cycles'])} / {_n(CYCLES[part, pattern, width]['DRAMsim3'])}"
        for cell, k in zip(row[2:], cols):
            mine, ref = r["memctl_uj"][k], r["dramsim3_uj"][k]
            want = f"{mine:,.2f} / {ref:,.2f}"
            if ref:
                want += f" ({100 * (mine / ref - 1):+.1f}%)"
            assert cell == want, (r["case"], k)
    with tempfile.TemporaryDirectory() as tmp:
        for part_name, width, kinds in (("hbm2", 4, ("act", "refresh", "bankref", "bankidle")),
                                        ("ddr4", 1, ("act", "refresh"))):
            for kind in kinds:
                per_bank = kind in ("bankref", "bankidle")
                part = load_part(part_name, {"controller.refresh": "bank"} if per_bank else None)
                pattern = {"bankref": "act", "bankidle": "refresh"}.get(kind, kind)
                n = 200_000 if pattern == "act" else 2_000
                s = be.run_generated(part, *be._generated(part, pattern, n),
                                     pathlib.Path(tmp) / "t.trace", width)
                e = s["energy_pj"]
                row = rows[f"{part_name}-{kind} (live{', per-bank' if per_bank else ''})"]
                assert first(row[1]) == _n(s["cycles"])
                for cell, k in zip(row[2:], cols):
                    key = "refresh_bank" if per_bank and k == "refresh" else k
                    pj = e["total"] if k == "total" else e["components"][key]
                    assert first(cell) == f"{pj / 1e6:,.2f}", (part_name, kind, k)
                if per_bank:
                    assert row[5].split("; ")[1].startswith(
                        _n(e["counts"]["bank_refreshes"]) + " / ")
    # what the page says of the table: the live cases within 0.1% on every component, the
    # mixes' ACT energy +1.0-1.1%, HBM2 random's precharged standby +1.2%, and per cycle of
    # each run refresh and standby within 1.1%
    def split(cell):
        a, b = cell.split(";")[0].split(" / ")[:2]
        return float(a.replace(",", "")), float(b.split(" (")[0].replace(",", ""))

    per_cycle = []
    for name, row in rows.items():
        dev = [c.split(";")[0].split("(")[-1].rstrip(")%") for c in row[2:] if "(" in c]
        if "(live" in name:
            assert all(abs(float(d)) <= 0.1 for d in dev), name
        cyc = [float(x.replace(",", "")) for x in row[1].split(" / ")]
        for i in (5, 6, 7):                                     # refresh, standby
            mine, ref = split(row[i])
            if ref:
                per_cycle.append(abs(mine * cyc[1] / cyc[0] / ref - 1))
    text = " ".join(_text("energy.md").split())
    assert f"refresh and standby agree within {100 * max(per_cycle):.1f}%" in text
    act = [rows[f"{p}-mix (quoted)"][2].split("(")[1].rstrip(")%") for p in ("ddr4", "hbm2")]
    assert f"the mixes' ACT energy ({act[0]}-{act[1].lstrip('+')}%" in text
    pre = rows["hbm2-random (quoted)"][7].split("(")[1].rstrip(")")
    assert f"HBM2 random's precharged standby ({pre})" in text


# ---------------------------------------------------------------- traces.md: a CNN step's trace
def test_traces_md_cnn_step_trace():
    """traces.md: the GPU-only step of ResNet-20 for CIFAR (batch 4) written as a DRAMsim3
    trace holds 1,212,747 requests, 395,093 of them writes (DRAMsim3 reports one read more:
    it reads the trace's last line twice), and memctl (hbm2, W=4) runs it in the quoted
    cycles; the DRAMsim3 figures beside them are a live run's (tests/test_bench_fidelity.py
    where a build is named)."""
    import tempfile
    from pimrt.bench._fidelity_step import write_step_trace
    from pimrt.memctl import Options, load_part, run_trace
    from pimrt.trace import open_trace
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "step.trace"
        n = write_step_trace(path)
        with open(path) as fh:
            writes = sum(" WRITE " in line for line in fh)
        s = run_trace(open_trace(path, "dramsim3"), load_part("hbm2"),
                      Options(policy="serial", issue_width=4))
    text = " ".join(_text("traces.md").split())
    assert f"all {_n(n)} requests done in its 3,000,000 cycles: {_n(n - writes + 1)} reads, " \
           f"{_n(writes)} writes" in text
    row = next(line for line in _text("traces.md").splitlines()
               if line.startswith("hbm2-cnn-step"))
    cells = row.split()
    assert cells[2] == _n(s["cycles"]) and f"({_n(n)} requests" in row
    assert cells[4] == _pct(s["cycles"], int(cells[3].replace(",", "")))
    for doc in ("precision.md", "runtime.md"):
        assert f"memctl {cells[4]} against DRAMsim3 on a CNN step's trace" in \
               " ".join(_text(doc).split()) or \
               f"{cells[4]} against DRAMsim3, docs/traces.md" in " ".join(_text(doc).split())


# ---------------------------------------------------------------- host_model.md: ResNet-50
_HOST_ROWS = {"conv1 (7x7/2, 3 -> 64)": ("conv1", ("forward",)),
              "conv1": ("conv1", ("backward_weight",)),
              "layer1.0.conv2 (3x3, 64)": ("layer1_0_conv2", ("forward", "backward_data",
                                                               "backward_weight")),
              "layer1.0.conv3 (1x1, 64 -> 256)": ("layer1_0_conv3", ("forward",)),
              "layer3.0.conv2 (3x3, 256, 14x14)": ("layer3_0_conv2", ("forward",)),
              "layer4.0.conv2 (3x3/2, 512)": ("layer4_0_conv2", ("forward", "backward_data",
                                                                 "backward_weight")),
              "fc (2048 -> 1000)": ("fc", ("forward",))}


def _r50_224():
    from pimrt import zoo
    from pimrt.graph import capture
    return capture(zoo.build("resnet50", input_size=224, device="meta"), (32, 3, 224, 224))


def _host_tensors(w) -> dict:
    """Each role of the work at its own MiB-aligned base (no shared lines)."""
    import math
    g = w.geom
    shape = {"input": g.input_shape, "grad_input": g.input_shape, "output": g.output_shape,
             "grad_output": g.output_shape, "weight": g.weight_shape,
             "grad_weight": g.weight_shape}
    out, base = {}, 0
    for role in w.roles:
        out[role] = (base, shape[role], 4)
        base += -(-math.prod(shape[role]) * 4 // (1 << 20)) * (1 << 20)
    return out


def test_host_model_md_resnet50_table():
    """host_model.md "Speed and example numbers": each row's GEMM shape, algorithm, tile,
    split-K, compute cycles (tCK 1 ns) and DRAM MB of the request stream, on the v100 part;
    and the whole step's compute by phase (its DRAM: the slow test below)."""
    from pimrt.host import HostWork
    graph = _r50_224()
    layers = {layer.name: layer for layer in graph}
    rows = _table_rows(_text("host_model.md"), "layer | phase | M, N, K")
    assert [r[0] for r in rows] == list(_HOST_ROWS)
    for name, phases, mnk, algo, cycles, mb in rows:
        node, want = _HOST_ROWS[name]
        works = [HostWork(layers[node], 32, p, part="v100") for p in want]
        g = works[0].gemm
        assert mnk == f"{g.m}, {g.n}, {g.k}", name
        launch = works[0].launch()
        if launch["algorithm"] == "winograd":
            assert algo == "Winograd F(4x4,3x3)", name
        else:
            assert algo.startswith("implicit GEMM"), name
            if algo != "implicit GEMM":
                tile = "x".join(map(str, launch["tile"]))
                assert algo.startswith(f"implicit GEMM, {tile}, {launch['split_k']}"), name
        assert cycles == " / ".join(_n(w.compute_cycles(None, 1.0)) for w in works), name
        got = [f"{w.dram_bytes(_host_tensors(w))['total'] / 1e6:.1f}" for w in works]
        assert mb in (" / ".join(got), f"{got[0]} each") and (len(set(got)) == 1) == \
            mb.endswith("each") or len(works) == 1, name
    by_phase = {}
    first = True
    for layer in graph:
        if layer.kind not in ("conv", "linear"):
            continue
        for p in ("forward", "backward_data", "backward_weight"):
            if not (p == "backward_data" and first):
                by_phase[p] = by_phase.get(p, 0) + \
                    HostWork(layer, 32, p, part="v100").compute_cycles(None, 1.0)
        first = False
    ms = [by_phase[p] / 1e6 for p in ("forward", "backward_data", "backward_weight")]
    assert f"Whole step: compute {ms[0]:.1f} + {ms[1]:.1f} + {ms[2]:.1f} = {sum(ms):.1f} ms" \
        in " ".join(_text("host_model.md").split())


def test_memctl_arbitration_check_on_ddr4_random():
    """memctl.md "Timing checker": on 20,000 DDR4 random reads the round-robin log has no
    arbitration violation and N against column_first, the column-first log M against
    round_robin (pimrt.memctl.arbitration on each run's command log)."""
    import io
    from pimrt.memctl import Controller, Options, load_part
    from pimrt.memctl.arbitration import arbitration_findings
    from pimrt.memctl.checker import parse_command_log
    from pimrt.memctl.controller import CommandLog
    from pimrt.trace import synthetic
    found = {}
    for arb in ("round_robin", "column_first"):
        part = load_part("ddr4", {"controller.arbitration": arb})
        buf = io.StringIO()
        ctl = Controller(part, Options(policy="serial", issue_width=1), cmdlog=CommandLog(buf))
        for chunk in synthetic.random(20_000):
            ctl.feed(np.ascontiguousarray(chunk))
        ctl.finish()
        log = parse_command_log(buf.getvalue())
        found[arb] = {a: len(list(arbitration_findings(log, part, a)))
                      for a in ("round_robin", "column_first")}
    assert found["round_robin"]["round_robin"] == found["column_first"]["column_first"] == 0
    text = " ".join(_text("memctl.md").split())
    assert f"On 20,000 DDR4 random reads, memctl's round-robin log has no such violation and " \
           f"{_n(found['round_robin']['column_first'])} against column_first; its column-first " \
           f"log {_n(found['column_first']['round_robin'])} against round_robin." in text


@pytest.mark.slow
def test_host_model_md_resnet50_step_dram():
    """host_model.md: the whole ResNet-50 step's DRAM by phase and its requests, whole layers
    and with 4 output-channel groups per conv (the request streams generated: about 40 s)."""
    from pimrt.host import HostWork
    graph = _r50_224()
    text = " ".join(_text("host_model.md").split())
    for groups in (1, 4):
        by_phase, first = {}, True
        for layer in graph:
            if layer.kind not in ("conv", "linear"):
                continue
            for p in ("forward", "backward_data", "backward_weight"):
                if p == "backward_data" and first:
                    continue
                cout = HostWork(layer, 32, p, part="v100").geom.cout
                for g in range(groups):
                    w = HostWork(layer, 32, p, part="v100",
                                 channel_range=(g * cout // groups, (g + 1) * cout // groups))
                    by_phase[p] = by_phase.get(p, 0) + w.dram_bytes(_host_tensors(w))["total"]
            first = False
        total = sum(by_phase.values())
        if groups == 1:
            gb = [by_phase[p] / 1e9 for p in ("forward", "backward_data", "backward_weight")]
            assert f"DRAM {gb[0]:.2f} + {gb[1]:.2f} + {gb[2]:.2f} = {total / 1e9:.1f} GB" in text
            assert f"is {total / 64 / 1e6:.0f} M requests" in text
        else:
            assert f"With 4 output-channel groups per conv DRAM grows to {total / 1e9:.0f} GB" \
                in text and f"the requests to {total / 64 / 1e6:.0f} M" in text


# ---------------------------------------------------------------- traces.md: a step, per layer
def test_traces_md_per_layer_rows(tmp_path):
    """traces.md "Per layer": the rows quoted are `pimrt memsim step.npy --per-layer`'s on the
    step the page's first command writes (ResNet-20 for CIFAR, batch 4; about 7 s)."""
    import subprocess
    import sys
    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT)}
    run = [sys.executable, "-m", "pimrt"]
    subprocess.run(run + ["run", "--model", "resnet_cifar_20", "--batch", "4", "--functional",
                          "none", "--quiet", "--out", str(tmp_path / "step"), "--save-trace",
                          str(tmp_path / "step.npy")], check=True, env=env, capture_output=True)
    out = subprocess.run(run + ["memsim", str(tmp_path / "step.npy"), "--per-layer"],
                         check=True, env=env, capture_output=True, text=True).stdout.splitlines()
    text = _text("traces.md")
    block = text[text.index("```\nlayer ") + 4:]
    block = block[:block.index("```")].splitlines()
    assert len(block) == 3 and block[0] in out
    for line in block[1:]:
        name = line.split()[0]
        assert line == next(o for o in out if o.split()[:1] == [name]), name
    assert "the trace holds 84,896 PIM requests" in " ".join(text.split())
    assert any(o.split()[:2] == ["pim", "84,896"] for o in out)


# ---------------------------------------------------------------- graph.md: the zoo
def test_graph_md_zoo_figures():
    """graph.md "The model zoo": each parameter count of the table is the zoo model's (224 x
    224 forms; WRN-28-10 at 32 x 32); ResNet-110 1.73 M and ResNet-1202 19.4 M parameters; a
    1,202-layer ResNet captures to 4,212 layers; the example's kind counts."""
    from pimrt import zoo
    from pimrt.graph import capture
    rows = _table_rows(_text("graph.md"), "name | 224 x 224 (ImageNet)")
    checked = 0
    for name, _, params, cifar in rows:
        if not params:
            continue
        names = [n.strip(" `") for n in name.split(",")]
        names = [n.split(" (")[0].strip("` ") for n in names]
        for n, want in zip(names, params.split(" / ")):
            assert f"{zoo.count_params(zoo.build(n, device='meta')):,}" == want.strip(), n
            checked += 1
        if "WRN-28-10" in cifar:
            got = zoo.count_params(zoo.build("wrn28_10", input_size=32, device="meta"))
            assert f"WRN-28-10 ({got:,})" in cifar
    assert checked == 9
    text = " ".join(_text("graph.md").split())
    for depth in (110, 1202):
        p = zoo.count_params(zoo.build(f"resnet{depth}", device="meta"))
        assert f"`resnet{depth}`: {p / 1e6:.{2 if depth == 110 else 1}f} M" in text
    g = capture(zoo.build("resnet1202", device="meta"), (2, 3, 32, 32))
    assert f"A 1,202-layer ResNet captures to a graph of {len(g):,} layers" in text
    # the page's own example: print(g.kind_counts()) gives {'input': 1, 'conv': 2, ...}
    src = _text("graph.md")
    src = src[src.index("```python") + len("```python"):]
    src = src[:src.index("```")]
    ns: dict = {}
    exec(compile(src.replace("print(", "(lambda *a: None)("), "graph.md", "exec"), ns)
    counts = ns["g"].kind_counts()
    shown = re.search(r"# (\{'input'.*?), \.\.\.\}", text).group(1)
    assert str(counts).startswith(shown), (counts, shown)


# ---------------------------------------------------------------- layrub.md
def test_layrub_md_device_budgets_on_resnet20():
    """layrub.md: ResNet-20, batch 4, budgets 10% / 30% / 60% / 90% of the way from full
    offload to none: the maps kept, the bytes copied each way and held for backward (one real
    step each, about 5 s); and the pre-check's refusal quoted for a 1 MB host budget."""
    import torch
    from pimrt import zoo
    from pimrt.layrub import Layrub, LayrubBudgetError
    torch.manual_seed(0)
    model = zoo.build("resnet20", input_size=32)
    x, y = torch.randn(4, 3, 32, 32), torch.randint(0, 10, (4,))
    full = Layrub(model, input_shape=x.shape).estimate
    none = Layrub(model, input_shape=x.shape, offload=False).estimate

    def step(lr):
        model.zero_grad(set_to_none=True)
        with lr:
            torch.nn.functional.cross_entropy(model(x), y).backward()
        return lr.stats

    whole = step(Layrub(model, input_shape=x.shape))
    got = []
    for frac in (0.1, 0.3, 0.6, 0.9):
        budget = int(full["device_bytes"] + frac * (none["device_bytes"] - full["device_bytes"]))
        s = step(Layrub(model, input_shape=x.shape, device_budget=budget))
        got.append((budget, s.kept_in_budget, s.offloaded_bytes, s.saved_peak_bytes))
    mb = lambda v: f"{v / 1e6:.2f}"                                  # noqa: E731
    j = lambda i, f: " / ".join(f(g[i]) for g in got)                 # noqa: E731
    text = " ".join(_text("layrub.md").split())
    assert f"budgets between full offload ({mb(full['device_bytes'])} MB estimated, MB = 10^6 B) " \
           f"and none ({mb(none['device_bytes'])} MB): at {j(0, mb)} MB it keeps the last " \
           f"{j(1, str)} of {full['offloaded']} maps, copies {j(2, mb)} MB each way instead of " \
           f"{mb(whole.offloaded_bytes)}, and holds {j(3, mb)} MB for backward" in text
    with pytest.raises(LayrubBudgetError) as e:
        Layrub(zoo.build("resnet20", input_size=32), input_shape=(8, 3, 32, 32),
               host_budget="1MB")
    assert f"`{e.value}`" in text


def test_layrub_md_planned_peaks_at_224():
    """layrub.md: the planner's peaks at 32 x 3 x 224 x 224 (masks per layer) against the
    liveness baseline, reuse alone, Caffe's naive_bytes; ResNet-50's masks (about 5 s)."""
    from pimrt import zoo
    from pimrt.graph import capture
    from pimrt.layrub import plan
    from pimrt.layrub import planner as P
    G, M = 2**30, 2**20
    size = lambda b: f"{b / G:.2f} GiB" if b >= G else f"{b / M:.0f} MiB"  # noqa: E731
    pct = lambda a, b: f"{100 * (a / b - 1):+.1f}%".replace("+", "")      # noqa: E731
    names = {"resnet50": "ResNet-50", "resnet101": "ResNet-101", "resnet152": "ResNet-152",
             "vgg16": "VGG-16", "densenet121": "DenseNet-121"}
    peaks, reuse, naive, vs_naive, graphs = [], [], [], {}, {}
    for name in names:
        g = capture(zoo.build(name, device="meta"), (32, 3, 224, 224))
        p = plan(g, batch=32, budget_bytes=None, offload=True, reuse=True, prefetch_distance=1)
        r = plan(g, batch=32, budget_bytes=None, offload=False, reuse=True, prefetch_distance=1)
        graphs[name] = (g, p)
        peaks.append(f"{names[name]} {size(p.baseline_peak_bytes)} -> {size(p.peak_bytes)} "
                     f"({pct(p.peak_bytes, p.baseline_peak_bytes)})")
        reuse.append(100 * (r.peak_bytes / p.baseline_peak_bytes - 1))
        naive.append(p.naive_bytes / G)
        vs_naive[name] = [100 * (x / p.naive_bytes - 1)
                          for x in (p.baseline_peak_bytes, r.peak_bytes, p.peak_bytes)]
    text = " ".join(_text("layrub.md").split())
    avg = sum(100 * (graphs[n][1].peak_bytes / graphs[n][1].baseline_peak_bytes - 1)
              for n in names) / len(names)
    assert ", ".join(peaks) + f": average {avg:.1f}%" in text
    assert "Reuse alone: " + ", ".join(f"{x:.1f}%" for x in reuse) + \
           " against the liveness baseline" in text
    assert "(`naive_bytes`: " + ", ".join(f"{x:.1f}" for x in naive) + " GiB here)" in text
    live = [round(v[0]) for v in vs_naive.values()]
    lay = {n: round(v[1]) for n, v in vs_naive.items()}
    both = {n: round(v[2]) for n, v in vs_naive.items()}
    assert f"liveness alone already gives {max(live)}% to {min(live)}%" in text
    others = [lay[n] for n in names if n != "densenet121"]
    assert f"Layrub's reuse {max(others)}% to {min(others)}% ({lay['densenet121']}% " \
           f"DenseNet-121)" in text
    rest = [both[n] for n in names if n != "vgg16"]
    assert f"offload + reuse {max(rest)}% to {min(rest)}% (VGG-16 {both['vgg16']}%)" in text
    # ResNet-50: the stem's mask left out, the last ReLU's kept
    g, p = graphs["resnet50"]
    gr = P._Graph(g, 32, False)
    cands = P._mask_candidates(gr, set())
    every = P._schedule1(gr, True, set(P._offload_candidates(gr, True, 0, set())), 1, set(),
                         set(cands))
    assert len(cands) == 2 and p.masks == [cands[-1]]
    assert f"(it saves a {p.buffer_bytes['A:' + p.masks[-1]] / M:.2f} MiB host copy and its two " \
           f"transfers): {p.peak_bytes / M:.0f} MiB planned peak against {every['peak'] / M:.0f} " \
           f"MiB with both masks" in text


@pytest.mark.slow
def test_layrub_md_pimrt_run_layrub(tmp_path):
    """layrub.md: `pimrt run --layrub` on ResNet-18 (batch 32, 32x32): the two lines quoted
    (the simulation's wall time left out), and Layrub's cost against the same step without it
    (docs/figures/compare-32.json); about a minute."""
    import json
    import subprocess
    import sys
    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "pimrt", "run", "--model", "resnet18", "--batch",
                          "32", "--input", "32", "--functional", "none", "--layrub", "--quiet",
                          "--out", str(tmp_path / "r")], check=True, env=env,
                         capture_output=True, text=True).stdout.splitlines()
    text = _text("layrub.md")
    first = next(line for line in out if line.startswith("resnet18 batch 32 32x32:"))
    first = re.sub(r"simulated in [\d.]+ s", "simulated in ... s", first)
    assert first in text.splitlines()
    assert next(line for line in out if "contention-free bound" in line) in text.splitlines()
    s = json.loads((tmp_path / "r" / "summary.json").read_text())
    base = next(r for r in json.loads((DOCS / "figures" / "compare-32.json").read_text())
                if r["model"] == "resnet18" and r["policy"] == "authority")
    words = " ".join(text.split())
    assert f"Without `--layrub` the same step is {base['step_ms']:.3f} ms, serial " \
           f"{base['serial_step_ms']:.3f} and GPU-only {base['gpu_only_step_ms']:.3f}" in words
    cost = [100 * (s[k] / base[k] - 1) for k in ("step_ms", "serial_step_ms", "gpu_only_step_ms")]
    assert f"costs the co-executed step {cost[0]:.1f}%, serial {cost[1]:.1f}% and GPU-only " \
           f"{cost[2]:.1f}%" in words


@pytest.mark.slow
def test_laysa_md_pim_runtime_rows(tmp_path):
    """laysa.md "PIM runtime": the gradsa and laysa rows of the ResNet-18 table, `pimrt run
    --update gradsa|laysa` again (a minute or two), and the functional check's line."""
    import json
    import subprocess
    import sys
    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT)}
    text = _text("laysa.md")
    for update in ("gradsa", "laysa"):
        subprocess.run([sys.executable, "-m", "pimrt", "run", "--model", "resnet18", "--batch",
                        "32", "--input", "32", "--functional", "none", "--update", update,
                        "--quiet", "--out", str(tmp_path / update)], check=True, env=env,
                       capture_output=True)
        s = json.loads((tmp_path / update / "summary.json").read_text())
        want = (f"{update:<8}{s['step_ms']:>8.3f}{s['serial_step_ms']:>11.3f}"
                f"{s['speedup_vs_serial']:>9.3f}{s['gpu_only_step_ms']:>13.3f}"
                f"{s['update_memory']['peak_bytes'] / 2**20:>10.1f}")
        assert any(" ".join(line.split()).startswith(" ".join(want.split()))
                   for line in text.splitlines()), want
    out = subprocess.run([sys.executable, "-m", "pimrt", "run", "--model", "resnet_cifar_20",
                          "--batch", "4", "--update", "laysa", "--quiet", "--out",
                          str(tmp_path / "f")], check=True, env=env, capture_output=True,
                         text=True).stdout
    line = next(x for x in out.splitlines() if "update on the PIM vs pimrt.gradsa" in x)
    assert " ".join(line.split()) in " ".join(text.split())
