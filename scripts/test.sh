#!/usr/bin/env bash
# Sets everything up (scripts/bootstrap.sh) and runs the tests: the C tests of memctl under
# AddressSanitizer and UBSan, then the fast pytest subset (slow tests: add `-m slow`), then one
# end-to-end run of the main job. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
echo "== memctl C tests under AddressSanitizer + UBSan"
make -s -C memctl sanitize
echo "== pytest (fast subset)"
.venv/bin/python -m pytest -m "not slow" -q -p no:cacheprovider "$@"
echo "== end-to-end"
bash scripts/e2e.sh
