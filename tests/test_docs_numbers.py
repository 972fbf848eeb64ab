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
