"""The AMP functional step on the five CNNs (docs/precision.md, "The functional step"):

    python scripts/functional_amp.py --out docs/figures/functional-amp.json   # runs them (minutes)
    python scripts/functional_amp.py --table docs/figures/functional-amp.json # the doc's table

tests/test_docs_figures.py checks that docs/precision.md holds the table as rendered here."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

FIVE = ("resnet18", "resnet50", "vgg16_bn", "densenet121", "mobilenetv2")
KEYS = ("loss_abs_diff", "max_grad_rel_diff_same_masks", "relu_mask_flips",
        "relu_mask_hard_flips", "pim_vs_fp32_flips", "torch_amp_vs_fp32_flips", "judged_by_fp32", "grads_within_tolerance", "found_inf",
        "found_inf_ref", "weight_copies_equal_torch_cast", "groups_equal", "loss_scale",
        "steps_skipped_first", "tolerance", "wall_s")


def run(out: Path, batch: int, input_size: int) -> None:
    from pimrt.runtime.functional_amp import check_step_amp
    rows = []
    for precision in ("amp-fp16", "amp-bf16"):
        for model in FIVE:
            r = check_step_amp(model, batch, input_size, "golden", precision, groups=2)
            rows.append({"model": model, "precision": precision, "batch": batch,
                         "input": input_size, **{k: r[k] for k in KEYS}})
            print(table_row(rows[-1]), flush=True)
            out.write_text(json.dumps(rows, indent=2))


def worst(r: dict) -> float:
    j = r["judged_by_fp32"].values()
    return max((x["pim_vs_fp32"] / max(x["torch_amp_vs_fp32"], 1e-30) for x in j), default=0.0)


def table_row(r: dict) -> str:
    scale = f"{r['loss_scale']:g} ({r['steps_skipped_first']})" if r["loss_scale"] else "none"
    return (f"| {r['model']} | {r['precision']} | {scale} | {r['loss_abs_diff']:.2g} | "
            f"{r['relu_mask_flips']} | {r['pim_vs_fp32_flips']} / {r['torch_amp_vs_fp32_flips']} | "
            f"{r['max_grad_rel_diff_same_masks']:.2g} | {len(r['judged_by_fp32'])} | "
            f"{worst(r):.2f} | {'yes' if r['found_inf'] == r['found_inf_ref'] else 'NO'} | "
            f"{'yes' if r['weight_copies_equal_torch_cast'] else 'NO'} | "
            f"{'yes' if r['grads_within_tolerance'] and r['groups_equal'] else 'no'} |")


def table(rows: list[dict]) -> list[str]:
    return ["| model | precision | loss scale (steps skipped) | loss diff | ReLU decisions unlike "
            "torch's AMP step's | unlike fp32's: PIM / torch AMP | grad diff, same decisions | grads judged by fp32 | worst "
            "PIM / torch distance from fp32 | skip decision as torch | 16-bit copies as torch's "
            "cast | within tolerance |", "|---" * 12 + "|"] + [table_row(r) for r in rows]


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path)
    ap.add_argument("--table", type=Path)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--input", type=int, default=32)
    a = ap.parse_args()
    if a.out:
        run(a.out, a.batch, a.input)
    if a.table:
        print("\n".join(table(json.loads(a.table.read_text()))))
