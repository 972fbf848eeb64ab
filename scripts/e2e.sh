#!/usr/bin/env bash
# One end-to-end run of the main job on a small real CNN (used by scripts/test.sh and CI).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${PIMRT_E2E_OUT:-$(mktemp -d)}
.venv/bin/pimrt run --model resnet_cifar_20 --batch 4 --input 32 --policy authority --groups 4 \
    --functional golden --out "$out" --quiet
.venv/bin/python - "$out/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
f = s["functional"]
# gradients against a torch step with the PIM step's ReLU masks (docs/runtime.md, tolerance)
assert f["loss_abs_diff"] < 1e-5 and f["max_grad_rel_diff_same_masks"] < 1e-4 \
    and f["groups_equal"] and f["grads_within_tolerance"] and f["relu_mask_hard_flips"] == 0, f
assert s["makespan_cycles"] > 0 and s["serial_makespan_cycles"] > 0, s
assert s["gpu_only_step_ms"] > 0 and s["lower_bound_step_ms"] <= s["bound_step_ms"], s
assert s["system"]["memory"]["channels"] == 32, s["system"]
print(f"e2e ok: speedup {s['speedup_vs_gpu_only']:.3f} over GPU-only, "
      f"{s['speedup_vs_serial']:.3f} over serial, step / contention-free bound "
      f"{s['step_vs_bound']:.3f}, functional step within tolerance")
PY
