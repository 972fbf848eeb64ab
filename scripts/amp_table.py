"""The cycles table of docs/pim.md's "Kernels of an AMP step", rendered from
pimrt/pim/kernel_cycles.json (written by `pimrt bench pim --update-cycles`):

    python scripts/amp_table.py

tests/test_pim_amp.py checks that the doc holds the table as rendered here."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pimrt.pim import cycles, kernels as K  # noqa: E402


def rows() -> list[tuple[str, str, str]]:
    """(label, fp32 kernel, 16-bit kernel with {dt}) for every base with 16-bit variants."""
    out = [(base, base, f"{base}_{{dt}}") for base in K.VARIANTS
           if base not in ("sgd", "sgd_apply")]
    return out + [("sgd -> sgd_amp", "sgd", "sgd_amp_{dt}"),
                  ("sgd_apply -> sgd_apply_amp", "sgd_apply", "sgd_apply_amp_{dt}")]


def table(what: str = "cycles_per_element") -> list[str]:
    get = {"cycles_per_element": cycles.cycles_per_element,
           "dram_columns_per_element": cycles.dram_columns_per_element}[what]
    head = "| kernel | " + " | ".join(f"{d}, {n} lanes" for n in (8, 16)
                                      for d in ("fp32", "f16", "bf16", "16-bit / fp32"))
    out = [head + " |", "|---" * 9 + "|"]
    for label, k32, k16 in rows():
        cells = []
        for lanes in (8, 16):
            a = get(k32, lanes)
            if not k16:
                cells += [f"{a:.4f}", "", "", ""]
                continue
            f, b = (get(k16.format(dt=dt), lanes) for dt in ("f16", "bf16"))
            cells += [f"{a:.4f}", f"{f:.4f}", f"{b:.4f}", f"{f / a:.2f}"]
        out.append(f"| `{label}` | " + " | ".join(cells) + " |")
    return out


if __name__ == "__main__":
    print("\n".join(table()))
    print()
    print("\n".join(table("dram_columns_per_element")))
