"""`pimrt memsim`'s whole-file path for the text formats memctl's C reader takes
(mc_run_text, memctl/tracetext.c): the same statistics and the same errors as reading the
trace in Python chunk by chunk, and no numpy imported."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
from hypothesis import given, settings, strategies as st

from pimrt.memctl import Options, load_part, run_trace
from pimrt.memctl.controller import Controller
from pimrt.trace import open_trace, write_trace
from pimrt.trace.records import HOST, READ, RECORD_DTYPE, WRITE

PART = load_part("hbm2")


def both_ways(path, fmt: str | None = None, part=PART, opts: Options | None = None):
    """Stats by the C path (run_trace on a Trace) and by Python's chunks of the same trace."""
    trace = open_trace(path, fmt, part=part)
    fast = run_trace(trace, part, opts or Options())
    slow = run_trace(list(trace), part, opts or Options())
    return fast, slow


def host_records(draw_cycles, addrs, writes) -> np.ndarray:
    r = np.zeros(len(addrs), RECORD_DTYPE)
    r["cycle"], r["addr"] = draw_cycles, addrs
    r["op"] = np.where(writes, WRITE, READ)
    r["requestor"] = HOST
    return r


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 3000), seed=st.integers(0, 2**32 - 1),
       fmt=st.sampled_from(["dramsim3", "ramulator", "ramulator_dram"]),
       policy=st.sampled_from(["serial", "authority"]), width=st.sampled_from([1, 4]))
def test_c_path_gives_the_python_paths_stats(tmp_path_factory, n, seed, fmt, policy, width):
    rng = np.random.default_rng(seed)
    cycles = np.sort(rng.integers(0, 4 * n, n)) if fmt == "dramsim3" else np.zeros(n, int)
    addrs = rng.integers(0, PART.capacity_bytes // 64, n) * 64
    recs = host_records(cycles, addrs, rng.random(n) < 0.3)
    path = tmp_path_factory.mktemp("t") / "x.trace"
    write_trace(path, recs, fmt)
    fast, slow = both_ways(path, fmt, opts=Options(policy=policy, issue_width=width))
    assert fast == slow
    assert fast["requests"] == n


def test_c_path_takes_comments_blank_lines_and_odd_spacing(tmp_path):
    head = "# DRAMsim3 trace\n\n0x40 READ 0\n0X80\tp_mem_rd  3 # c\r\n  1f40 write 3\n"
    text = head + "0xc0 READ 7\n" * 100_000 + "0x100 WRITE 9"   # > 1 MiB, no final newline
    p = tmp_path / "odd.trace"
    p.write_text(text)
    fast, slow = both_ways(p, "dramsim3")
    assert fast == slow
    assert fast["requests"] == 3 + 100_000 + 1


def test_c_path_stops_where_the_reader_does_and_python_names_the_line(tmp_path):
    lines = [f"0x{64 * i:x} READ {i}" for i in range(120_000)]   # ~2 MiB: several blocks
    lines[100_000] = "0x40 READ 5"                              # out of order
    p = tmp_path / "bad.trace"
    p.write_text("\n".join(lines) + "\n")
    out = subprocess.run([sys.executable, "-m", "pimrt", "memsim", str(p), "--quiet"],
                         capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        f"pimrt memsim: error: {p}:100001: arrival cycle 5 is earlier than 99999 of the request "
        f"before it (line 100000): requests must be in arrival order"]


def test_feed_text_reports_where_it_stopped(tmp_path):
    """It stops at the start of the piece (up to 8192 records) holding the bad line: the
    records before that piece went in, Python reads on from there."""
    lines = [f"0x{64 * i:x} READ {i}" for i in range(10_000)]
    lines[9000] = "0x80 READ x"
    p = tmp_path / "t.trace"
    p.write_text("\n".join(lines) + "\n")
    ctl = Controller(PART, Options())
    offset, line, last_cycle, last_line = ctl.feed_text(p, 1, PART.capacity_bytes)
    assert (line, last_cycle, last_line) == (8193, 8191, 8192)
    assert offset == len("".join(x + "\n" for x in lines[:8192]))
    assert ctl.held()["records"] + 0 >= 0 and ctl.stats()["records"] <= 8192


def test_c_path_refuses_an_arrival_beyond_the_simulator_naming_the_line(tmp_path):
    p = tmp_path / "late.trace"
    p.write_text("0x40 READ 0\n\n0x80 READ 9223372036854775808\n")
    out = subprocess.run([sys.executable, "-m", "pimrt", "memsim", str(p), "--quiet"],
                         capture_output=True, text=True)
    assert out.returncode == 2
    assert f"{p}:3: arrival cycle 9223372036854775808 is beyond" in out.stderr


PROBE = """
import sys
sys.argv = ["pimrt", "memsim", *sys.argv[1:]]
from pimrt.cli import main
rc = main()
print("numpy imported:", "numpy._core" in sys.modules or "numpy.core" in sys.modules)
sys.exit(rc)
"""


def _probe(*argv):
    return subprocess.run([sys.executable, "-c", PROBE, *map(str, argv)], capture_output=True,
                          text=True)


def test_memsim_on_a_dramsim3_trace_imports_no_numpy(tmp_path):
    p = tmp_path / "s.trace"
    p.write_text("".join(f"0x{64 * i:x} READ {i}\n" for i in range(1000)))
    out = _probe(p, "--quiet", "--stats", tmp_path / "s.json")
    assert out.returncode == 0, out.stderr
    assert "numpy imported: False" in out.stdout
    assert json.loads((tmp_path / "s.json").read_text())["requests"] == 1000


def test_memsim_imports_numpy_where_it_needs_it(tmp_path):
    """pimrt text, .npy, a command log, a reader that stops: numpy comes in on first use."""
    recs = host_records(np.arange(50), np.arange(50) * 64, np.zeros(50, bool))
    write_trace(tmp_path / "a.trace", recs, "pimrt")
    write_trace(tmp_path / "a.npy", recs, "npy")
    write_trace(tmp_path / "d.trace", recs, "dramsim3")
    (tmp_path / "bad.trace").write_text("0x40 READ 1\n0x80 READ 0\n")
    for argv in ([tmp_path / "a.trace"], [tmp_path / "a.npy"],
                 [tmp_path / "d.trace", "--cmdlog", tmp_path / "c.csv"]):
        out = _probe(*argv, "--quiet")
        assert out.returncode == 0, out.stderr
        assert "50 requests" in out.stdout and "numpy imported: True" in out.stdout
    assert (tmp_path / "c.csv").read_text().count("\n") > 50
    out = _probe(tmp_path / "bad.trace", "--quiet")
    assert out.returncode == 2 and "bad.trace:2: arrival cycle 0 is earlier" in out.stderr


def test_feed_text_leaves_a_run_with_a_command_log_to_python(tmp_path):
    """A command log is drained between chunks, so with one the Python path reads it all."""
    from pimrt.memctl.controller import CommandLog
    p = tmp_path / "t.trace"
    p.write_text("0x40 READ 1\n")
    ctl = Controller(PART, Options(), cmdlog=CommandLog(tmp_path / "log.csv"))
    assert ctl.feed_text(p, 1, PART.capacity_bytes) == (0, 1, 0, 0)
    assert ctl.stats()["records"] == 0
    ctl.cmdlog.close()
