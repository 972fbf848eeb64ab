#!/usr/bin/env bash
# Sets everything up (scripts/bootstrap.sh) and runs the tests: the C tests of memctl under
# AddressSanitizer and UBSan, then the fast pytest subset on every core (pytest-xdist's `-n auto`;
# slow tests: add `-m slow`, one process: add `-n 0`), then one end-to-end run of the main job.
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
echo "== memctl C tests under AddressSanitizer + UBSan"
make -s -C memctl sanitize
echo "== pytest (fast subset)"
.venv/bin/python -m pytest -m "not slow" -q -p no:cacheprovider -n auto "$@"
echo "== end-to-end"
bash scripts/e2e.sh
