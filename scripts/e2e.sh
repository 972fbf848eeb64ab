#!/usr/bin/env bash
# One end-to-end run of the main job on a small input (used by scripts/test.sh and CI).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${PIMRT_E2E_OUT:-$(mktemp -d)}
.venv/bin/python -m pimrt.memctl.example_trace "$out/example.trace" --requests 200000
.venv/bin/pimrt memsim "$out/example.trace" --config hbm2_pim --policy authority \
    --stats "$out/stats.json" --quiet
.venv/bin/python - "$out/stats.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
assert s["requests"] > 0 and s["cycles"] > 0, s
assert s["requestors"]["host"]["requests"] + s["requestors"]["pim"]["requests"] == s["requests"]
print(f"e2e ok: {s['requests']} requests in {s['cycles']} cycles, {s['mode_switches']} mode switches")
PY
