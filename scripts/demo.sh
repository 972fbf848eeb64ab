#!/usr/bin/env bash
# Sets everything up (scripts/bootstrap.sh) and runs pimrt's main job, writing to results/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
mkdir -p results
.venv/bin/python -m pimrt.memctl.example_trace results/example.trace --requests 2000000
for policy in serial bank_partition authority; do
  .venv/bin/pimrt memsim results/example.trace --config hbm2_pim --policy "$policy" \
      --stats "results/memsim-$policy.json"
done
