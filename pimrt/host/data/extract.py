"""Re-extract DeepBench's V100 training results into the CSV files beside this module.

    python -m pimrt.host.data.extract DeepBench_NV_V100.xlsx pimrt/host/data/

The workbook is DeepBench's `results/train/DeepBench_NV_V100.xlsx` (github.com/baidu-research/
DeepBench, Apache License 2.0). An .xlsx file is a zip of XML sheets: read with the standard
library, no spreadsheet package. Sheets "Results FP32" and "Results - FP16 ip, Mixed math"; from
each, the dense matrix multiplications and the convolutions (with cuDNN's forward algorithm).
See README.md beside this file.
"""
from __future__ import annotations

import csv
import pathlib
import re
import sys
import xml.etree.ElementTree as ET
import zipfile

NS = "{http://schemas.openxmlformats.org/spreadsheetml/2006/main}"
RELS = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}"
SHEETS = {"fp32": "Results FP32", "fp16mixed": "Results - FP16 ip, Mixed math"}
GEMM_COLS = {"B": "app", "C": "M", "D": "N", "E": "K", "F": "a_transpose", "G": "b_transpose",
             "I": "ms"}
CONV_COLS = {"B": "app", "C": "W", "D": "H", "E": "C", "F": "N", "G": "K", "H": "S", "I": "R",
             "J": "pad_w", "K": "pad_h", "L": "stride_w", "M": "stride_h", "N": "fwd_ms",
             "O": "bwd_data_ms", "P": "bwd_weight_ms", "X": "fwd_algorithm"}


def _sheets(book: zipfile.ZipFile) -> dict[str, list[tuple[int, dict]]]:
    strings = [''.join(t.text or '' for t in si.iter(NS + "t"))
               for si in ET.fromstring(book.read("xl/sharedStrings.xml")).findall(NS + "si")]
    wb = ET.fromstring(book.read("xl/workbook.xml"))
    rels = ET.fromstring(book.read("xl/_rels/workbook.xml.rels"))
    target = {r.get("Id"): r.get("Target") for r in rels}
    out = {}
    for s in wb.iter(NS + "sheet"):
        root = ET.fromstring(book.read("xl/" + target[s.get(RELS + "id")].lstrip("/")
                                       .removeprefix("xl/")))
        rows = []
        for r in root.iter(NS + "row"):
            row = {}
            for c in r.findall(NS + "c"):
                v = c.find(NS + "v")
                if v is None:
                    continue
                col = re.match(r"[A-Z]+", c.get("r")).group()
                row[col] = strings[int(v.text)] if c.get("t") == "s" else v.text
            rows.append((int(r.get("r")), row))
        out[s.get("name")] = rows
    return out


def _num(v: str | None) -> str:
    """A cell as its shortest decimal ("" for N/A): 3.7999999999999999E-2 -> 0.038."""
    if v is None or v.startswith("N/A"):
        return ""
    f = float(v)
    return str(int(f)) if f.is_integer() else repr(round(f, 6))


def tables(rows: list[tuple[int, dict]]) -> tuple[list[dict], list[dict]]:
    """(gemm rows, conv rows) of one results sheet: the rows under the "Dense Matrix
    Multiplication" and "Convolution" headings, up to the next blank row."""
    gemm, conv, section = [], [], None
    for _, row in rows:
        head = row.get("A", "")
        if head:
            section = {"Dense Matrix Multiplication": "gemm", "Convolution": "conv"}.get(head)
            continue
        if not row.get("B") or section is None:
            continue
        cols = GEMM_COLS if section == "gemm" else CONV_COLS
        rec = {name: row.get(col, "") for col, name in cols.items()}
        for k, v in rec.items():
            if k not in ("app", "a_transpose", "b_transpose", "fwd_algorithm"):
                rec[k] = _num(v)
        (gemm if section == "gemm" else conv).append(rec)
    return gemm, conv


def extract(xlsx: str | pathlib.Path, out: str | pathlib.Path) -> list[pathlib.Path]:
    out = pathlib.Path(out)
    sheets = _sheets(zipfile.ZipFile(xlsx))
    written = []
    for key, name in SHEETS.items():
        gemm, conv = tables(sheets[name])
        for what, recs, cols in (("gemm", gemm, GEMM_COLS), ("conv", conv, CONV_COLS)):
            path = out / f"deepbench_v100_{key}_{what}.csv"
            with open(path, "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=list(cols.values()), lineterminator="\n")
                w.writeheader()
                w.writerows(recs)
            written.append(path)
    return written


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python -m pimrt.host.data.extract DeepBench_NV_V100.xlsx OUT_DIR")
    for p in extract(sys.argv[1], sys.argv[2]):
        print(p)
