#!/usr/bin/env bash
# Sets everything up (scripts/bootstrap.sh) and runs pimrt's main job: one training step of a
# CIFAR ResNet-18 (batch 32), functional on the PIM golden model and timed through memctl
# under access-authority switching against serial host+PIM. Results in results/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
.venv/bin/pimrt run --model resnet18 --batch 32 --input 32 --policy authority \
    --functional golden --out results/resnet18
