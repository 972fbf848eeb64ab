#!/usr/bin/env bash
# Sets up everything pimrt needs on a fresh Debian machine: system packages (a C/C++ compiler,
# Verilator), a virtual environment in .venv with torch (CPU build) and pimrt installed editable.
# Safe to run again: each step is skipped when already done.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v cc >/dev/null 2>&1 || need_apt+=(build-essential)
command -v g++ >/dev/null 2>&1 || need_apt+=(g++)
command -v make >/dev/null 2>&1 || need_apt+=(make)
command -v verilator >/dev/null 2>&1 || need_apt+=(verilator)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "bootstrap: installing system packages: ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "bootstrap: creating .venv"
  "$PY" -m venv .venv
fi
VPY=.venv/bin/python
# torch first, pinned: the CPU build that lies on this machine's disk (a bare 'torch' pulls CUDA).
if ! $VPY -c "import torch" >/dev/null 2>&1; then
  echo "bootstrap: installing torch==2.13.0"
  $VPY -m pip install -q torch==2.13.0
fi
stamp=.venv/.pimrt-installed
if [ ! -f $stamp ] || [ pyproject.toml -nt $stamp ] || [ setup.py -nt $stamp ] \
   || [ -n "$(find memctl native -newer $stamp -type f 2>/dev/null | head -n 1)" ]; then
  echo "bootstrap: installing pimrt (editable, builds the memctl extension)"
  $VPY -m pip install -q -e '.[dev]'
  touch $stamp
fi
