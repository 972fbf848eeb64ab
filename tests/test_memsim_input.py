"""Where `pimrt memsim` reads its trace from (issue 39): a file truncated while it is read is an
error naming where the reading stopped (it ended with exit 0 and stats of a part of it), and
standard input (`-`, /dev/stdin) or a FIFO is read as a stream for the text formats (they
were "no such trace file"), refused with the reason for .npy."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import threading

import numpy as np
import pytest

from pimrt.errors import TraceError
from pimrt.memctl import Options, load_part, run_trace
from pimrt.trace import open_trace, write_trace
from pimrt.trace.records import HOST, READ, RECORD_DTYPE

PART = load_part("hbm2")
PIMRT = [sys.executable, "-m", "pimrt"]


def _records(n: int) -> np.ndarray:
    r = np.zeros(n, RECORD_DTYPE)
    r["cycle"] = np.arange(n) // 4
    r["addr"] = (np.arange(n) * 4099 % (PART.capacity_bytes // 64)) * 64
    r["op"], r["requestor"] = READ, HOST
    return r


def test_a_text_trace_truncated_while_read_is_an_error(tmp_path):
    """The Python reader: a pass that met the end of a file shorter than it was when opened."""
    p = tmp_path / "t.trace"
    write_trace(p, _records(300_000))                     # about 5 MiB: several blocks
    size = p.stat().st_size
    trace = open_trace(p, chunk_records=1000)
    chunks = iter(trace)
    next(chunks)
    os.truncate(p, size // 3)
    with pytest.raises(TraceError, match=re.escape(
            f"{p}: the file changed while it was read ({size:,} bytes when opened, "
            f"{size // 3:,} bytes now); the reading stopped at byte ") + r"[\d,]+ \(line [\d,]+\)"):
        for _ in chunks:
            pass


def test_a_dramsim3_trace_truncated_after_open_is_an_error_on_the_c_path(tmp_path):
    """memctl's C reader (run_trace's path for dramsim3 text) reads what the file holds; the
    trace then finds it is not the file it opened."""
    p = tmp_path / "t.trace"
    write_trace(p, _records(2000), "dramsim3")
    size = p.stat().st_size
    trace = open_trace(p, part=PART)
    os.truncate(p, size // 2)
    with pytest.raises(TraceError, match=r"the file changed while it was read .* the reading "
                                         r"stopped at byte [\d,]+ \(line [\d,]+\)"):
        run_trace(trace, PART, Options())


def test_an_npy_trace_truncated_while_read_is_an_error_not_sigbus(tmp_path):
    """The records were read through a memory map: a page the file lost ended the process
    with SIGBUS. Run in a child, so that a crash fails this test only."""
    p = tmp_path / "t.npy"
    np.save(p, _records(100_000))
    code = (
        "import os, sys, pimrt.trace as T\n"
        "from pimrt.errors import TraceError\n"
        f"t = T.open_trace({str(p)!r}, chunk_records=1000)\n"
        "it = iter(t)\n"
        "next(it)\n"
        f"os.truncate({str(p)!r}, 128 + 24 * 5000)\n"
        "try:\n"
        "    for _ in it: pass\n"
        "except TraceError as e:\n"
        "    print(e)\n"
        "    sys.exit(3)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 3, (out.returncode, out.stderr)
    assert f"{p}:record 5,001" not in out.stdout
    assert re.search(r"t\.npy:record 4\d\d\d: the file ends here, before the 100,000 records "
                     r"its header gives", out.stdout) or \
        "the file changed while it was read" in out.stdout, out.stdout


def test_memsim_reads_standard_input_and_dev_stdin(tmp_path):
    text = "0 host R 0x0\n10 host W 0x40\n"
    for arg in ("-", "/dev/stdin"):
        out = subprocess.run([*PIMRT, "memsim", arg, "--quiet", "--stats", str(tmp_path / "s.json")],
                             input=text, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert "2 requests" in out.stdout
    out = subprocess.run([*PIMRT, "memsim", "-", "--quiet"], input="0 host R 0xZZ\n",
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert out.stderr.strip() == ("pimrt memsim: error: <stdin>:1: address '0xZZ' is not a "
                                  "hexadecimal or decimal number")


def test_memsim_reads_a_fifo_and_refuses_npy_from_one(tmp_path, capsys):
    from pimrt.cli import main
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)

    def write(data: bytes):
        with open(fifo, "wb") as f:
            f.write(data)

    for data, fmt, code, want in (
            (b"0x0 READ 0\n0x40 WRITE 10\n0x80 READ 12\n", None, 0, "3 requests"),
            (b"\x93NUMPY", None, 2, "the npy format is read from a file"),
            (b"0 host R 0x0\n", "npy", 2, "the npy format is read from a file")):
        writer = threading.Thread(target=write, args=(data,), daemon=True)
        if fmt is None:   # (with --format npy it is refused before it is opened)
            writer.start()
        argv = ["memsim", str(fifo), "--quiet"] + (["--format", fmt] if fmt else [])
        assert main(argv) == code
        if fmt is None:
            writer.join(10)
            assert not writer.is_alive()
        out, err = capsys.readouterr()
        assert want in (out if code == 0 else err)
