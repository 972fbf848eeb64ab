"""pimrt.trace: readers, writers, format detection, chunking, errors, synthetic generators."""
from __future__ import annotations

import json
import pathlib
import sys

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import pimrt.trace as T
from pimrt.errors import TraceError
from pimrt.trace import _textparse as tp
from pimrt.trace import synthetic
from pimrt.trace.records import (BARRIER, HOST, LAYER, PARAM, PARAM_IDS, PIM, READ,
                                 RECORD_DTYPE, WRITE)

REFERENCE = pathlib.Path("/work/shared/reference")


def recs(*rows) -> np.ndarray:
    return np.array(list(rows), dtype=RECORD_DTYPE)


def req(cycle, addr, op=READ, requestor=HOST):
    return (cycle, addr, 0, op, requestor, 0)


def write(tmp_path, name, text) -> pathlib.Path:
    p = tmp_path / name
    p.write_bytes(text.encode() if isinstance(text, str) else text)
    return p


# ---------------------------------------------------------------------------------------------
# readers on small files
PIMRT_TEXT = """# cycle requestor op address
0    host R 0x0000
0    host W 0x0040
12   pim  R 0x10000
@layer conv1                 # a layer boundary
@param high_watermark=16     # policy parameters from here on
@param epoch_cap=2000 pim_high_watermark=8
@barrier
13 HOST read 4096
@layer fc 2
14 host WRITE 0X1F
@layer conv1
"""


def test_pimrt_reader(tmp_path):
    t = T.open_trace(write(tmp_path, "a.trace", PIMRT_TEXT))
    assert t.format == "pimrt"
    r = t.records()
    expected = recs(
        req(0, 0), req(0, 0x40, WRITE), req(12, 0x10000, READ, PIM),
        (0, 0, 0, LAYER, HOST, 0),
        (0, 0, 16, PARAM, HOST, PARAM_IDS["high_watermark"]),
        (0, 0, 2000, PARAM, HOST, PARAM_IDS["epoch_cap"]),
        (0, 0, 8, PARAM, HOST, PARAM_IDS["pim_high_watermark"]),
        (0, 0, 0, BARRIER, HOST, 0),
        req(13, 4096), (0, 0, 1, LAYER, HOST, 0), req(14, 0x1F, WRITE),
        (0, 0, 0, LAYER, HOST, 0),
    )
    assert r.tolist() == expected.tolist()
    assert t.layer_names == ["conv1", "fc 2"]


def test_dramsim3_reader(tmp_path):
    p = write(tmp_path, "d.txt", "0x40 READ 0\n0x80 WRITE 3\n1f40 read 3\n0xC0 P_MEM_WR 10\n")
    t = T.open_trace(p)
    assert t.format == "dramsim3"
    assert t.records().tolist() == recs(req(0, 0x40), req(3, 0x80, WRITE), req(3, 0x1F40),
                                        req(10, 0xC0, WRITE)).tolist()


def test_ramulator_reader(tmp_path):
    p = write(tmp_path, "r.txt", "LD 0x40\nST 128\n\nld 0xff\n")
    t = T.open_trace(p)
    assert t.format == "ramulator"
    assert t.records().tolist() == recs(req(0, 0x40), req(0, 128, WRITE),
                                        req(0, 0xFF)).tolist()


def test_ramulator_cpu_reader(tmp_path):
    p = write(tmp_path, "c.txt", "3 20734016\n1 20846400 20734016\n0 0x40\n")
    t = T.open_trace(p)
    assert t.format == "ramulator_cpu"
    assert t.records().tolist() == recs(req(0, 20734016), req(0, 20846400),
                                        req(0, 20734016, WRITE), req(0, 0x40)).tolist()


def test_npy_reader_and_sidecar(tmp_path):
    r = recs(req(0, 64), (0, 0, 1, LAYER, HOST, 0), req(5, 128, WRITE, PIM))
    p = tmp_path / "t.npy"
    np.save(p, r)
    t = T.open_trace(p)
    assert t.format == "npy"
    assert t.records().tolist() == r.tolist()
    assert t.layer_names == ["layer0", "layer1"]       # no sidecar: made-up names
    (tmp_path / "t.npy.layers.json").write_text(json.dumps(["a", "b"]))
    t = T.open_trace(p)
    t.records()
    assert t.layer_names == ["a", "b"]
    (tmp_path / "t.npy.layers.json").write_text(json.dumps(["a"]))
    with pytest.raises(TraceError, match=r"t\.npy:record 2: LAYER value 1 has no name"):
        T.open_trace(p).records()


def test_npy_large_layer_id_without_sidecar_is_bounded(tmp_path):
    """Issue 39: a LAYER id of 2^32 - 1 and no sidecar made up a name for every id up to it
    (1.4 GB in 20 s, then more); now only the ids below MADE_UP_NAMES get a made-up name in
    layer_names, and the stats call the large id layerN all the same."""
    import subprocess
    r = recs((0, 0, 0, LAYER, HOST, 0), req(0, 64), (0, 0, 2**32 - 1, LAYER, HOST, 0),
             req(10, 128))
    p = tmp_path / "t.npy"
    np.save(p, r)
    code = ("import json, resource, pimrt.trace as T\n"
            "from pimrt.memctl import Options, load_part, run_trace\n"
            f"t = T.open_trace({str(p)!r})\n"
            "s = run_trace(t, load_part('hbm2'), Options())\n"
            "hwm = int(open('/proc/self/status').read().split('VmHWM:')[1].split()[0])\n"
            "print(json.dumps([len(t.layer_names), [(l['layer'], l['name']) for l in s['layers']],"
            " hwm]))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    names, layers, rss_kb = json.loads(out.stdout)
    assert names == 1 and layers == [[0, "layer0"], [2**32 - 1, f"layer{2**32 - 1}"]]
    # under 1 GiB (it grew past it). The child's own peak (VmHWM, its image after exec), not
    # ru_maxrss, which Linux carries over exec from the forked copy of this (large) pytest
    assert rss_kb < 1 << 20


def test_npy_sidecar_deep_or_long_is_one_clear_error(tmp_path):
    """Issue 39: a layer-names file nested too deep ended in a RecursionError."""
    p = tmp_path / "t.npy"
    np.save(p, recs(req(0, 64), (0, 0, 0, LAYER, HOST, 0)))
    side = tmp_path / "t.npy.layers.json"
    side.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(TraceError, match=f"{side}:1: JSON nested too deep \\(100000 levels of "
                                         f"arrays or objects.*\\(the layer names of "):
        T.open_trace(p).records()
    side.write_text('[\n"a",\n' + "9" * 5000 + "]")
    with pytest.raises(TraceError, match=f"{side}:3: a number of 5000 digits"):
        T.open_trace(p).records()
    side.write_text('["a",]')
    with pytest.raises(TraceError, match=f"{side}:1:6: not valid JSON"):
        T.open_trace(p).records()


def test_npy_detected_by_magic_and_empty_files(tmp_path):
    p = tmp_path / "noext"
    with open(p, "wb") as f:
        np.save(f, recs(req(0, 64)))
    assert T.open_trace(p).format == "npy"
    e = write(tmp_path, "empty.trace", "# nothing\n\n")
    t = T.open_trace(e)
    assert t.records().shape == (0,) and list(t) == []
    np.save(tmp_path / "e.npy", np.zeros(0, RECORD_DTYPE))
    assert T.open_trace(tmp_path / "e.npy").records().shape == (0,)


def _make_traces():
    """/work/shared/reference/make_traces.py, the generator of the reference traces."""
    if not (REFERENCE / "make_traces.py").is_file():
        pytest.skip("no /work/shared/reference/make_traces.py")
    sys.path.insert(0, str(REFERENCE))
    try:
        import make_traces
    finally:
        sys.path.remove(str(REFERENCE))
    return make_traces


def test_reference_traces_read_as_make_traces_writes(tmp_path):
    make_traces = _make_traces()
    n = 5000
    for pattern in ("stream", "random", "mix"):
        addrs, writes = make_traces.requests(pattern, n)
        ops = np.where(writes, " WRITE 0", " READ 0")
        lines = np.char.add(np.char.add("0x", np.char.mod("%x", addrs)), ops)
        p = write(tmp_path, f"{pattern}.trace", "\n".join(lines.tolist()) + "\n")
        t = T.open_trace(p, chunk_records=999)
        assert t.format == "dramsim3"
        r = t.records()
        assert (r["addr"] == addrs).all() and (r["op"] == writes).all()
        assert (r["cycle"] == 0).all() and (r["requestor"] == HOST).all()
        s = getattr(synthetic, pattern)(n).records()
        assert r.tolist() == s.tolist()


# ---------------------------------------------------------------------------------------------
# synthetic generators
@pytest.mark.parametrize("n", [0, 1, 5, 3 * (1 << 16) + 7])
def test_synthetic_equals_make_traces(n):
    make_traces = _make_traces()
    for pattern in ("stream", "random", "mix"):
        addrs, writes = make_traces.requests(pattern, n)
        r = getattr(synthetic, pattern)(n, chunk_records=12345).records()
        assert len(r) == n
        assert (r["addr"] == addrs).all() and (r["op"] == writes.astype(np.uint8)).all()
        assert (r["cycle"] == 0).all()


def test_synthetic_chunks_have_the_requested_size():
    sizes = [len(c) for c in synthetic.random(1000, chunk_records=300)]
    assert sizes == [300, 300, 300, 100]
    assert synthetic.stream(10, "write").records()["op"].tolist() == [WRITE] * 10
    with pytest.raises(ValueError):
        synthetic.stream(10, "bogus")


def test_host_pim_interleave():
    from pimrt.memctl.config import decode_address, load_part

    part = load_part("hbm2_pim")
    t = synthetic.host_pim_interleave(1000, part=part, layers=4, pim_fraction=0.25,
                                      pim_write_every=2, cycle_step=2)
    r = t.records()
    assert t.layer_names == ["layer0", "layer1", "layer2", "layer3"]
    layer = r["op"] == LAYER
    assert layer.sum() == 4 and r[layer]["value"].tolist() == [0, 1, 2, 3]
    q = r[~layer]
    assert len(q) == 1000
    pim = q["requestor"] == PIM
    assert pim.sum() == 250
    assert (q["op"][pim] == WRITE).sum() == 125 and (q["op"][~pim] == READ).all()
    assert (np.diff(q["cycle"].astype(np.int64)) == 2).all()
    assert (q["addr"][~pim] == np.arange(750) * 64).all()
    f = decode_address(part, q["addr"][pim])
    assert f["column"][:32].tolist() == list(range(32)) and (f["channel"][:32] == 0).all()
    assert (f["channel"][32:64] == 1).all()
    assert (f["row"] >= part.org["rows"] // 2).all() and (f["bank"] == 0).all()


# ---------------------------------------------------------------------------------------------
# round trips
# no '#' and no character str.strip() removes (U+0085, U+00A0, ...): the text writer refuses
# names with outer blanks, which the reader would strip
_names = st.text(st.characters(min_codepoint=33, max_codepoint=0x2FF, exclude_characters="#",
                               exclude_categories=("Cc", "Zs", "Zl", "Zp")),
                 min_size=1, max_size=8)


@st.composite
def record_lists(draw, pim=True, markers=True):
    names = draw(st.lists(_names, min_size=1, max_size=4, unique=True))
    n = draw(st.integers(0, 40))
    cycle = 0
    rows = []
    for _ in range(n):
        kind = draw(st.sampled_from(["req"] * 4 + (["layer", "param", "barrier"]
                                                   if markers else [])))
        if kind == "req":
            cycle += draw(st.integers(0, 1000))
            rows.append((cycle, draw(st.integers(0, 2**64 - 1)), 0,
                         draw(st.sampled_from([READ, WRITE])),
                         draw(st.sampled_from([HOST, PIM] if pim else [HOST])), 0))
        elif kind == "layer":
            rows.append((0, 0, draw(st.integers(0, len(names) - 1)), LAYER, HOST, 0))
        elif kind == "param":
            rows.append((0, 0, draw(st.integers(0, 2**32 - 1)), PARAM, HOST,
                         draw(st.sampled_from(sorted(PARAM_IDS.values())))))
        else:
            rows.append((0, 0, 0, BARRIER, HOST, 0))
    return np.array(rows, dtype=RECORD_DTYPE) if rows else np.zeros(0, RECORD_DTYPE), names


def _resolved(r: np.ndarray, names: list[str]) -> list:
    """Records with LAYER ids replaced by names (text files number layers by appearance)."""
    return [(names[x[2]] if x[3] == LAYER else x) for x in r.tolist()]


@given(record_lists(), st.integers(1, 50))
def test_round_trip_text_records_npy(tmp_path_factory, data, chunk):
    r, names = data
    d = tmp_path_factory.mktemp("rt")
    T.write_trace(d / "a.trace", r, "pimrt", layer_names=names)
    t = T.open_trace(d / "a.trace", chunk_records=chunk)
    back = t.records()
    assert _resolved(back, t.layer_names) == _resolved(r, names)
    T.write_trace(d / "a.npy", t)                  # streaming Trace -> npy with its names
    n = T.open_trace(d / "a.npy", chunk_records=chunk)
    assert n.records().tolist() == back.tolist() and n.layer_names == t.layer_names
    T.write_trace(d / "b.trace", n)                # npy -> text again: same text
    assert (d / "b.trace").read_text() == (d / "a.trace").read_text()


@given(record_lists(pim=False, markers=False))
def test_round_trip_dramsim3_and_ramulator(tmp_path_factory, data):
    r, _ = data
    d = tmp_path_factory.mktemp("rt")
    T.write_trace(d / "a.txt", r, "dramsim3")
    assert T.open_trace(d / "a.txt", "dramsim3").records().tolist() == r.tolist()
    T.write_trace(d / "b.txt", r, "ramulator")
    back = T.open_trace(d / "b.txt", "ramulator").records()
    assert back["addr"].tolist() == r["addr"].tolist() and (back["cycle"] == 0).all()
    assert back["op"].tolist() == r["op"].tolist()


def test_writers_drop_markers_refuse_pim(tmp_path):
    r = recs(req(0, 64), (0, 0, 0, LAYER, HOST, 0), req(1, 128, WRITE))
    assert T.write_trace(tmp_path / "a.txt", r, "dramsim3", ["x"]) == 2
    assert (tmp_path / "a.txt").read_text() == "0x40 READ 0\n0x80 WRITE 1\n"
    with pytest.raises(TraceError, match="host requests only"):
        T.write_trace(tmp_path / "b.txt", recs(req(0, 64, READ, PIM)), "ramulator")
    with pytest.raises(TraceError, match="cannot be written"):
        T.write_trace(tmp_path / "c.txt", r, "ramulator_cpu")
    with pytest.raises(TraceError, match="unknown trace format 'dramsim'.*'dramsim3'"):
        T.write_trace(tmp_path / "c.txt", r, "dramsim")


@pytest.mark.parametrize("fmt,name", [("pimrt", "w.txt"), ("npy", "w.npy"),
                                      ("dramsim3", "w.trace"), ("ramulator", "w.trace")])
def test_every_writer_numbers_layers_and_closes_as_a_context_manager(tmp_path, fmt, name):
    with T.open_writer(tmp_path / name, fmt, layer_names=["stem"]) as w:
        assert [w.add_layer(n) for n in ("conv1", "stem", "conv1", "fc")] == [1, 0, 1, 2]
        w.write(recs(req(0, 64), req(1, 128, WRITE)))
        assert w.count == 2 and w.layer_names == ["stem", "conv1", "fc"]
    assert w._f.closed
    w.close()                                       # closing twice is harmless
    assert [int(a) for c in T.open_trace(tmp_path / name, fmt) for a in c["addr"]] == [64, 128]


def test_npy_writer_incremental(tmp_path):
    p = tmp_path / "w.npy"
    with T.open_writer(p) as w:
        w.write(w.layer_marker("conv1"))
        w.write(recs(req(0, 64), req(1, 128)))
        w.write(w.layer_marker("fc"))
        w.write(recs(req(2, 192)))
    arr = np.load(p)
    assert arr.dtype == RECORD_DTYPE and len(arr) == 5
    assert json.loads((tmp_path / "w.npy.layers.json").read_text()) == ["conv1", "fc"]
    t = T.open_trace(p, chunk_records=2)
    assert [len(c) for c in t] == [2, 2, 1] and t.layer_names == ["conv1", "fc"]


# ---------------------------------------------------------------------------------------------
# chunking and blocks
@pytest.mark.parametrize("block_bytes", [1, 7, 64, 1000, 1 << 20])
def test_identical_records_for_any_chunk_and_block_size(tmp_path, monkeypatch, block_bytes):
    text = PIMRT_TEXT * 3
    text = text.replace("@layer conv1\n", "") + "\n".join(
        f"{20 + i} {'pim' if i % 3 else 'host'} {'W' if i % 5 == 0 else 'R'} 0x{i * 64:x}"
        for i in range(500))
    p = write(tmp_path, "a.trace", text.replace("13 HOST read 4096\n", "").replace(
        "14 host WRITE 0X1F\n", "").replace("0    host", "20 host").replace("12   pim", "20 pim"))
    expected = T.open_trace(p).records()
    monkeypatch.setattr(tp, "BLOCK_BYTES", block_bytes)
    for chunk in (1, 3, 64, 1 << 16):
        chunks = list(T.open_trace(p, chunk_records=chunk))
        assert all(len(c) == chunk for c in chunks[:-1]) and 0 < len(chunks[-1]) <= chunk
        assert np.concatenate(chunks).tolist() == expected.tolist()


def test_rechunk():
    a = [np.arange(n) for n in (0, 3, 5, 1, 0, 7)]
    for size in (1, 2, 4, 16, 100):
        out = list(T.rechunk(a, size))
        assert np.concatenate(out).tolist() == np.concatenate(a).tolist()
        assert all(len(c) == size for c in out[:-1])


def test_layer_names_fill_while_streaming(tmp_path):
    lines = []
    for k in range(5):
        lines.append(f"@layer L{k}")
        lines += [f"{k} host R 0x{j * 64:x}" for j in range(100)]
    t = T.open_trace(write(tmp_path, "a.trace", "\n".join(lines)), chunk_records=50)
    seen = []
    for _ in t:
        seen.append(len(t.layer_names))
    assert seen == sorted(seen) and t.layer_names == [f"L{k}" for k in range(5)]
    list(t)                                       # a second pass gives the same names
    assert t.layer_names == [f"L{k}" for k in range(5)]


# ---------------------------------------------------------------------------------------------
# the vectorised parser agrees with the per-line parser
_tok = st.one_of(
    st.integers(0, 2**64 - 1).map(lambda v: f"0x{v:x}"),
    st.integers(0, 2**64 - 1).map(lambda v: f"0X{v:X}"),
    st.integers(0, 2**64 - 1).map(str),
    st.integers(0, 10**25).map(str),
    st.integers(0, 2**70).map(lambda v: f"0x{v:x}"),
    st.integers(0, 2**64 - 1).map(lambda v: f"{v:x}"),
    st.text("0123456789abcdefxXg-.+ ", min_size=1, max_size=22).filter(
        lambda s: s.strip() == s and " " not in s),
    st.sampled_from(["0", "00", "0x", "0x0", "0000000000000000000000001", "-1", "1.5", "0x-1",
                     "\u00e9", "1\u00e9"]),
)


@given(st.lists(_tok, min_size=1, max_size=30), st.sampled_from(["auto", "hex", "dec"]))
def test_vector_numbers_match_scalar(tokens, mode):
    block = ("\n".join(tokens) + "\n").encode()
    t = tp.tokenize(block)
    assume(len(t.starts) == len(tokens))
    values, ok = tp.parse_uint_vec(t, t.starts, t.ends, mode)
    for tok, v, good in zip(tokens, values.tolist(), ok.tolist()):
        want = tp.parse_uint_token(tok.encode(), mode)
        if good:
            assert want == v, (tok, mode)
        else:
            # the fast path may give up on valid tokens only when they are long
            assert want is None or want >= 1 << 64 or len(tok) > 16, (tok, mode)


@given(st.lists(st.sampled_from(["read", "READ", "Read", "write", "WRITE", "p_mem_wr",
                                 "P_MEM_RD", "reads", "rea", "wr1te", "READ\u00e9",
                                 "readwrite", "X"]), min_size=1, max_size=20))
def test_vector_words_match_dict(words):
    from pimrt.trace.dramsim3 import OP_WORDS

    block = (" ".join(words) + "\n").encode()
    t = tp.tokenize(block)
    codes = tp.match_words(t, t.starts, t.ends, OP_WORDS)
    for w, c in zip(words, codes.tolist()):
        assert OP_WORDS.get(w.encode().lower(), -1) == c


_sep = st.sampled_from([" ", "  ", "\t", " \t "])
_end = st.sampled_from(["", "", "", " ", "\r", " # note", "#x"])
_addr = st.one_of(
    st.integers(0, 2**64 - 1).map(lambda v: f"0x{v:x}"),
    st.integers(0, 2**20).map(lambda v: f"0X{v:X}"),
    st.integers(0, 2**64 - 1).map(str),
    st.integers(0, 2**20).map(str),
)
# "odd" addresses: malformed or too long for the vectorised path (it must then fall back)
_bad_addr = st.sampled_from(["0x", "0xZZ", "12a", "18446744073709551616", "0x10000000000000000",
                             "-1", "0x-1", "00000000000000000000064", "0x00000000000000000040"])
_bad_line = st.sampled_from(["1 host R", "0x40 READ", "LD", "x y z w", "1 cpu R 0x40",
                             "LOAD 0x40", "0x40 READ 1.5", "@lay x", "@param nope=1",
                             "0x40 READ 0 1", "0 host R 0x40 extra"])


@st.composite
def text_blocks(draw, fmt):
    """Valid lines of a format (blank and comment lines too), with at most one flaw: a
    malformed line, a malformed address or a request out of arrival order."""
    n = draw(st.integers(0, 30))
    flaw = draw(st.sampled_from([None, None, "line", "addr", "order"]))
    at = draw(st.integers(0, max(0, n - 1)))
    lines = []
    cycle = 0
    for i in range(n):
        kind = draw(st.sampled_from(["ok"] * 8 + ["blank", "comment"]
                                    + (["marker"] if fmt == "pimrt" else [])))
        cycle += draw(st.integers(0, 3))
        c = cycle
        sp, end, addr = draw(_sep), draw(_end), draw(_addr)
        if i == at and flaw == "line":
            lines.append(draw(_bad_line))
            continue
        if i == at and flaw in ("addr", "order"):
            kind = "ok"
            if flaw == "addr":
                addr = draw(_bad_addr)
            else:
                c = max(0, cycle - 5)
        if kind == "blank":
            lines.append(draw(st.sampled_from(["", " ", "\t"])))
        elif kind == "comment":
            lines.append("# " + draw(st.text("abc 0x@#", max_size=8)))
        elif kind == "marker":
            lines.append(draw(st.sampled_from(["@barrier", "@layer a b", "@layer c",
                                               "@param epoch_cap=3 min_epoch=0x10"])) + end)
        elif fmt == "pimrt":
            r = draw(st.sampled_from(["host", "pim", "HOST", "Pim"]))
            o = draw(st.sampled_from(["R", "W", "read", "WRITE", "r"]))
            lines.append(f"{c}{sp}{r}{sp}{o}{sp}{addr}{end}")
        elif fmt == "dramsim3":
            o = draw(st.sampled_from(["READ", "WRITE", "read", "P_MEM_WR", "p_mem_rd"]))
            a = addr if draw(st.booleans()) else addr.removeprefix("0x")
            lines.append(f"{a}{sp}{o}{sp}{c}{end}")
        elif fmt == "ramulator_dram":
            o = draw(st.sampled_from(["R", "W", "r", "w"]))
            a = addr if draw(st.booleans()) else addr.removeprefix("0x")
            lines.append(f"{a}{sp}{o}{end}")
        else:
            o = draw(st.sampled_from(["LD", "ST", "ld"]))
            lines.append(f"{o}{sp}{addr}{end}")
    return ("\n".join(lines) + draw(st.sampled_from(["\n", ""]))).encode()


@pytest.mark.parametrize("fmt", ["pimrt", "dramsim3", "ramulator", "ramulator_dram"])
@given(data=st.data())
def test_fast_parser_matches_line_parser(fmt, data):
    mod = T.FORMATS[fmt]
    block = data.draw(text_blocks(fmt))
    cap = data.draw(st.sampled_from([None, 1 << 40]))

    def run(fast: bool):
        state = tp.ReadState(path=pathlib.Path("x"), display="x", layer_names=[],
                             capacity_bytes=cap)
        try:
            out = mod.parse_fast(block, 1, state) if fast else None
            if out is None:
                state = tp.ReadState(path=pathlib.Path("x"), display="x", layer_names=[],
                                     capacity_bytes=cap)
                out = tp.parse_block_slow(block, 1, state, mod.parse_line)
            return out.tolist(), state.layer_names, state.last_cycle
        except TraceError as exc:
            return str(exc)

    assert run(True) == run(False)


def test_fast_parser_takes_clean_blocks():
    """The vectorised path handles valid blocks itself (it is not always falling back)."""
    state = tp.ReadState(path=pathlib.Path("x"), display="x", layer_names=[])
    block = b"0 host R 0x40 # c\n\n@layer a\n1\tpim W 64\r\n@param epoch_cap=5\n"
    out = T.FORMATS["pimrt"].parse_fast(block, 1, state)
    assert out is not None and len(out) == 4 and state.layer_names == ["a"]
    for fmt, block in [("dramsim3", b"0x40 READ 0\n1f WRITE 3\n"),
                       ("ramulator", b"LD 0x40\nST 31\n")]:
        state = tp.ReadState(path=pathlib.Path("x"), display="x", layer_names=[])
        assert len(T.FORMATS[fmt].parse_fast(block, 1, state)) == 2


# ---------------------------------------------------------------------------------------------
# errors: file, 1-based line and field
BAD_LINES = [
    # (format, text, line, field, words)
    ("pimrt", "0 host R 0x40\n1 host R 0xZZ\n", 2, "address",
     "address '0xZZ' is not a hexadecimal or decimal number"),
    ("pimrt", "0 host R 0x40\n\n# c\n5 cpu R 0x40\n", 4, "requestor", "unknown requestor 'cpu'"),
    ("pimrt", "0 host X 0x40\n", 1, "op", "unknown op 'X'"),
    ("pimrt", "-5 host R 0x40\n", 1, "cycle", "cycle '-5' is not a non-negative integer"),
    ("pimrt", "1.5 host R 0x40\n", 1, "cycle", "cycle '1.5' is not a non-negative integer"),
    ("pimrt", "10 host R 0x40\n9 host R 0x40\n", 2, "cycle",
     "requests must be in arrival order"),
    ("pimrt", "0 host R 0x40\n@param epoch_cpa=3\n", 2, "param",
     "unknown parameter 'epoch_cpa'; did you mean 'epoch_cap'"),
    ("pimrt", "@param epoch_cap=4294967296\n", 1, "param", "not an unsigned 32-bit integer"),
    ("pimrt", "@param epoch_cap\n", 1, "param", "is not NAME=VALUE"),
    ("pimrt", "@layer\n", 1, "layer", "needs a layer name"),
    ("pimrt", "@barier\n", 1, "marker", "unknown marker '@barier'; did you mean '@barrier'"),
    ("pimrt", "@barrier now\n", 1, "barrier", "takes no arguments"),
    ("pimrt", "0 host R\n", 1, None, "expected 4 fields"),
    ("pimrt", "0 host R 0x100000000000000000\n", 1, "address", "too large"),
    ("dramsim3", "0x40 READ 0\n0xG0 READ 1\n", 2, "address",
     "address '0xG0' is not a hexadecimal number"),
    ("dramsim3", "0x40 LOAD 0\n", 1, "op", "unknown op 'LOAD'"),
    ("dramsim3", "0x40 READ -1\n", 1, "cycle", "cycle '-1' is not a non-negative integer"),
    ("dramsim3", "0x40 READ 1e3\n", 1, "cycle", "cycle '1e3'"),
    ("dramsim3", "0x40 READ 5\n0x80 READ 4\n", 2, "cycle", "arrival order"),
    ("dramsim3", "0x40 READ\n", 1, None, "expected 3 fields"),
    ("ramulator", "LD 0x40\nLD 12a\n", 2, "address", "address '12a'"),
    ("ramulator", "LOAD 0x40\n", 1, "op", "unknown op 'LOAD'"),
    ("ramulator_cpu", "3 0x40 zz\n", 1, "writeback address", "writeback address 'zz'"),
    ("ramulator_cpu", "x 0x40\n", 1, "count", "instruction count 'x'"),
]


@pytest.mark.parametrize("fmt,text,line,field,words", BAD_LINES,
                         ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD_LINES)])
def test_malformed_lines(tmp_path, fmt, text, line, field, words):
    p = write(tmp_path, "trace.txt", text)
    with pytest.raises(TraceError) as exc:
        T.open_trace(p, fmt).records()
    msg = str(exc.value)
    assert msg.startswith(f"{p}:{line}: "), msg
    assert words in msg, msg
    assert exc.value.line == line and exc.value.field == field


def test_error_line_numbers_in_later_blocks(tmp_path, monkeypatch):
    monkeypatch.setattr(tp, "BLOCK_BYTES", 100)
    good = "".join(f"0x{i * 64:x} READ {i}\n" for i in range(300))
    p = write(tmp_path, "t.txt", good + "0x40 READ 1\n")
    with pytest.raises(TraceError, match=rf"t\.txt:301: .*arrival cycle 1 is earlier than 299 "
                                         rf"of the request before it \(line 300\)"):
        T.open_trace(p).records()


def test_capacity(tmp_path):
    p = write(tmp_path, "t.trace", "0 host R 0x40\n1 host R 0x100000000\n")
    assert len(T.open_trace(p).records()) == 2
    with pytest.raises(TraceError, match=r"t\.trace:2: address '0x100000000' is beyond the "
                                         r"memory's capacity of 4294967296 bytes"):
        T.open_trace(p, capacity_bytes=1 << 32).records()
    np.save(tmp_path / "t.npy", recs(req(0, 64), req(1, 1 << 32)))
    with pytest.raises(TraceError, match=r"t\.npy:record 2: address 0x100000000 is beyond"):
        T.open_trace(tmp_path / "t.npy", capacity_bytes=1 << 32).records()


def test_npy_errors(tmp_path):
    p = tmp_path / "t.npy"
    for r, words in [
        (recs(req(5, 64), req(4, 64)), r"record 2: arrival cycle 4 is earlier"),
        (recs(req(0, 64), (0, 0, 0, 9, 0, 0)), r"record 2: op code 9"),
        (recs((0, 0, 0, READ, 3, 0)), r"record 1: requestor code 3"),
        (recs((0, 0, 1, PARAM, 0, 99)), r"record 1: unknown parameter id 99"),
    ]:
        np.save(p, r)
        with pytest.raises(TraceError, match=words):
            T.open_trace(p, chunk_records=1).records()
    np.save(p, np.zeros(3, dtype=[("x", "<u8")]))
    with pytest.raises(TraceError, match="is not pimrt's RECORD_DTYPE"):
        T.open_trace(p).records()
    p.write_bytes(b"\x93NUMPY garbage")
    with pytest.raises(TraceError, match=r"t\.npy: not a readable \.npy file"):
        T.open_trace(p).records()


def test_detection_errors(tmp_path):
    with pytest.raises(TraceError, match="no such trace file"):
        T.open_trace(tmp_path / "missing.trace")
    p = write(tmp_path, "t.txt", "# header\nhello world how are you\n")
    with pytest.raises(TraceError, match=r"t\.txt:2: cannot tell the trace format"):
        T.open_trace(p)
    assert T.detect_format(write(tmp_path, "a", "\n# x\n@layer a\n")) == "pimrt"
    assert T.detect_format(write(tmp_path, "b", "0x40 WRITE 7\n")) == "dramsim3"
    assert T.detect_format(write(tmp_path, "c", "ST 0x40\n")) == "ramulator"
    assert T.detect_format(write(tmp_path, "d", "12 0x40 0x80\n")) == "ramulator_cpu"
    assert T.detect_format(write(tmp_path, "e", "0 pim W 0x80\n")) == "pimrt"


def test_registry():
    assert list(T.FORMATS)[:1] == ["npy"]
    assert {"pimrt", "npy", "dramsim3", "ramulator", "ramulator_cpu", "ramulator_dram",
            "ramulator_rw"} <= set(T.FORMATS)
    for mod in T.FORMATS.values():
        assert mod.NAME and callable(mod.read)


# ---------------------------------------------------------------------------------------------
# Ramulator 1's DRAM trace and Ramulator 2's read/write trace (issue 24)
def _trace_gen_ramulator_line(op: str, addr: int) -> str:
    """A line as DRAMsim3's scripts/trace_gen.py writes it with `-f ramulator`: Python's
    hex() of the address, a space, R or W."""
    return "{} {}".format(hex(addr), {"r": "R", "w": "W"}[op])


def test_ramulator_dram_reader_on_trace_gen_output(tmp_path):
    rows = [("r", 0x7F3A5B40), ("w", 0x1F80), ("r", 0xFFFFFFC0), ("w", 0)]
    text = "\n".join(_trace_gen_ramulator_line(o, a) for o, a in rows) + "\n"
    p = write(tmp_path, "ramulator_random_i10_n4_rw2.trace", text)
    t = T.open_trace(p)
    assert t.format == "ramulator_dram"
    assert t.records().tolist() == recs(req(0, 0x7F3A5B40), req(0, 0x1F80, WRITE),
                                        req(0, 0xFFFFFFC0), req(0, 0, WRITE)).tolist()
    # as Ramulator reads it: hex without 0x, either case, an address alone is a read
    p2 = write(tmp_path, "b.trace", "1f40 r\n0X80 W\n\n0x100\n")
    t2 = T.open_trace(p2)
    assert t2.format == "ramulator_dram"
    assert t2.records().tolist() == recs(req(0, 0x1F40), req(0, 0x80, WRITE),
                                         req(0, 0x100)).tolist()


def test_ramulator_rw_reader_needs_the_part_and_maps_coordinates(tmp_path):
    from pimrt.memctl import load_part
    from pimrt.memctl.config import decode_address
    # as Ramulator 2's ReadWriteTrace reads it: 'R|W' and the address vector, one space
    p = write(tmp_path, "rw.trace", "R 0,0,1,2,345,7\nW 7,0,3,3,32767,31\nR 0,0,0,0,0,0\n")
    with pytest.raises(TraceError, match=r"rw\.trace: the ramulator_rw format gives DRAM "
                                         r"coordinates"):
        T.open_trace(p).records()
    hbm2 = load_part("hbm2")
    t = T.open_trace(p, part=hbm2)
    assert t.format == "ramulator_rw"
    r = t.records()
    assert r["op"].tolist() == [READ, WRITE, READ] and (r["cycle"] == 0).all()
    f = decode_address(hbm2, r["addr"])
    got = np.stack([f[k] for k in ("channel", "pseudo_channel", "bankgroup", "bank", "row",
                                   "column")], axis=1)
    assert got.tolist() == [[0, 0, 1, 2, 345, 7], [7, 0, 3, 3, 32767, 31], [0] * 6]
    assert r["addr"][2] == 0 and int(r["addr"][1]) == hbm2.capacity_bytes - 64
    ddr4 = load_part("ddr4")          # DDR levels: channel, rank, bankgroup, bank, row, column
    p2 = write(tmp_path, "rw2.trace", "W 0,1,2,3,65535,127\n")
    f = decode_address(ddr4, T.open_trace(p2, part=ddr4).records()["addr"])
    assert [int(f[k][0]) for k in ("channel", "rank", "bankgroup", "bank", "row", "column")] \
        == [0, 1, 2, 3, 65535, 127]


def _aligned_host_requests(part):
    n_req = part.capacity_bytes // part.request_bytes
    return st.lists(st.tuples(st.integers(0, n_req - 1), st.sampled_from([READ, WRITE])),
                    max_size=40).map(lambda rows: np.array(
                        [(0, a * part.request_bytes, 0, op, HOST, 0) for a, op in rows],
                        dtype=RECORD_DTYPE) if rows else np.zeros(0, RECORD_DTYPE))


@given(record_lists(pim=False, markers=False))
def test_round_trip_ramulator_dram(tmp_path_factory, data):
    r, _ = data
    d = tmp_path_factory.mktemp("rt")
    assert T.write_trace(d / "a.txt", r, "ramulator_dram") == len(r)
    back = T.open_trace(d / "a.txt", "ramulator_dram").records()
    assert back["addr"].tolist() == r["addr"].tolist() and (back["cycle"] == 0).all()
    assert back["op"].tolist() == r["op"].tolist()
    if len(r):
        assert T.detect_format(d / "a.txt") == "ramulator_dram"


@pytest.mark.parametrize("name", ["hbm2", "ddr4", "hbm2_pim", "a100_hbm2_pim"])  # (40 channels)
@given(data=st.data())
def test_round_trip_ramulator_rw(tmp_path_factory, name, data):
    from pimrt.memctl import load_part
    part = load_part(name)
    r = data.draw(_aligned_host_requests(part))
    d = tmp_path_factory.mktemp("rt")
    assert T.write_trace(d / "a.txt", r, "ramulator_rw", part=part) == len(r)
    back = T.open_trace(d / "a.txt", "ramulator_rw", part=part).records()
    assert back.tolist() == r.tolist()
    if len(r):
        assert T.detect_format(d / "a.txt") == "ramulator_rw"


def test_ramulator_rw_writer_needs_whole_requests_and_the_part(tmp_path):
    from pimrt.memctl import load_part
    with pytest.raises(TraceError, match="needs the memory part"):
        T.write_trace(tmp_path / "a.txt", recs(req(0, 64)), "ramulator_rw")
    with pytest.raises(TraceError, match="not a multiple of 64 bytes"):
        T.write_trace(tmp_path / "a.txt", recs(req(0, 65)), "ramulator_rw",
                      part=load_part("hbm2"))


@given(st.lists(st.tuples(st.sampled_from(["R", "W", "r"]),
                          st.lists(st.integers(0, 40), min_size=6, max_size=6),
                          st.sampled_from(["", " ", "\r", " # c"])), max_size=30),
       st.sampled_from([None, "line", "vector", "range"]), st.integers(0, 29))
def test_ramulator_rw_fast_parser_matches_line_parser(rows, flaw, at):
    from pimrt.memctl import load_part
    lines = [f"{o} {','.join(map(str, v))}{end}" for o, v, end in rows]
    if lines and flaw:
        i = at % len(lines)
        lines[i] = {"line": "R 1,2,3,4,5,6 7", "vector": "W 1,2,,3,4,5",
                    "range": "R 0,0,9,0,0,0"}[flaw]
    block = ("\n".join(lines) + "\n").encode()
    mod = T.FORMATS["ramulator_rw"]

    def run(fast: bool):
        state = tp.ReadState(path=pathlib.Path("x"), display="x", layer_names=[],
                             part=load_part("hbm2"))
        try:
            out = mod.parse_fast(block, 1, state) if fast else None
            if out is None:
                out = tp.parse_block_slow(block, 1, state, mod.parse_line)
            return out.tolist()
        except TraceError as exc:
            return str(exc)

    assert run(True) == run(False)
    state = tp.ReadState(path=pathlib.Path("x"), display="x", layer_names=[],
                         part=load_part("hbm2"))
    clean = b"R 0,0,1,2,3,4\nW 7,0,3,3,32767,31\n"
    assert len(mod.parse_fast(clean, 1, state)) == 2   # the vectorised path takes clean blocks


def test_every_format_is_told_apart(tmp_path):
    """The first data line of each supported format, as its tool writes it, detected as that
    format and no other."""
    samples = {
        "pimrt": "0 host R 0x40\n",
        "dramsim3": "0x7f3a5b40 READ 10\n",
        "ramulator": "LD 0x7f3a5b40\n",
        "ramulator_dram": "0x7f3a5b40 R\n",
        "ramulator_rw": "R 0,0,1,2,345,7\n",
        "ramulator_cpu": "3 20734016 20846400\n",
    }
    for fmt, text in samples.items():
        p = write(tmp_path, f"{fmt}.trace", "# header\n\n" + text)
        assert T.detect_format(p) == fmt, fmt
        toks = text.split("#")[0].encode().split()
        hits = [m.NAME for m in T.FORMATS.values()
                if getattr(m, "sniff", None) is not None and m.sniff(toks)]
        assert hits == [fmt], (fmt, hits)
    assert T.detect_format(write(tmp_path, "lone", "1f40\n")) == "ramulator_dram"
    np.save(tmp_path / "x.npy", recs(req(0, 64)))
    assert T.detect_format(tmp_path / "x.npy") == "npy"


BAD_NEW_LINES = [
    # (format, text, line, field, words)
    ("ramulator_dram", "0x40 R\n0x80 X\n", 2, "op", "unknown op 'X' (R or W)"),
    ("ramulator_dram", "0x40 R\n0xG0 W\n", 2, "address",
     "address '0xG0' is not a hexadecimal number"),
    ("ramulator_dram", "0x40 R extra\n", 1, None, "expected 2 fields '0xADDR R|W', found 3"),
    ("ramulator_dram", "0x40 R\n0x10000000000000000 W\n", 2, "address", "too large"),
    ("ramulator_dram", "0x40 R\n0x200000000 W\n", 2, "address", "beyond the memory's capacity"),
    ("ramulator_rw", "R 0,0,0,0,0,0\nX 0,0,0,0,0,0\n", 2, "op", "unknown op 'X' (R or W)"),
    ("ramulator_rw", "R 0,0,0,0,0\n", 1, "vector", "has 5 numbers; part HBM2_8Gb_x128 needs 6: "
     "channel,pseudochannel,bankgroup,bank,row,column"),
    ("ramulator_rw", "W 0,0,4,0,0,0\n", 1, "bankgroup",
     "bankgroup 4 is out of range: part HBM2_8Gb_x128 has bankgroup 0..3"),
    ("ramulator_rw", "W 0,0,0,0,-1,0\n", 1, "row", "row '-1' is not a non-negative integer"),
    ("ramulator_rw", "R 0,0,0,0,0,0 1\n", 1, None, "expected 2 fields"),
    ("ramulator_rw", "R 0,0,0,0,0,x\n", 1, "column", "column 'x' is not"),
]


@pytest.mark.parametrize("fmt,text,line,field,words", BAD_NEW_LINES,
                         ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD_NEW_LINES)])
def test_malformed_lines_of_the_ramulator_formats(tmp_path, fmt, text, line, field, words):
    from pimrt.memctl import load_part
    p = write(tmp_path, "trace.txt", text)
    with pytest.raises(TraceError) as exc:
        T.open_trace(p, fmt, part=load_part("hbm2"), capacity_bytes=1 << 33).records()
    msg = str(exc.value)
    assert msg.startswith(f"{p}:{line}: "), msg
    assert words in msg, msg
    assert exc.value.line == line and exc.value.field == field


@pytest.mark.parametrize("text,words", [("0x40 R\n0x80 Q\n", "t.trace:2: unknown op 'Q'"),
                                        ("R 0,0,0,0,0,0\nW 0,0,0,0,0\n",
                                         "t.trace:2: address vector '0,0,0,0,0' has 5")])
def test_memsim_reports_a_malformed_line_in_one_line_with_exit_code_2(tmp_path, text, words):
    import subprocess
    p = write(tmp_path, "t.trace", text)
    out = subprocess.run([sys.executable, "-m", "pimrt", "memsim", str(p), "--quiet"],
                         capture_output=True, text=True)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and "Traceback" not in out.stderr, out.stderr


def test_memsim_names_the_line_of_a_ramulator_cpu_record(tmp_path):
    """memctl names a bad record by its index; a ramulator_cpu line gives two records when it
    has a writeback address, so `pimrt memsim` counts them to name the line."""
    from pimrt.commands.memsim import record_to_line
    from pimrt.trace import read_records
    p = tmp_path / "cpu.trace"
    p.write_text("# c\n5 0x40 0x80\n\n3 0x80\n7 0xc0 0x100 # x\n")
    assert [record_to_line(f"{p}: record {i}: bad", p, "ramulator_cpu") for i in range(6)] == [
        f"{p}:2: bad", f"{p}:2: bad", f"{p}:4: bad", f"{p}:5: bad", f"{p}:5: bad",
        f"{p}: record 5: bad"]
    records, _ = read_records(p, "ramulator_cpu")
    assert len(records) == 5   # the count the mapping assumes
