#!/usr/bin/env bash
# Create .venv with torch-flydsl, FlyDSL and the test tools, plus the ld.lld that gfx950
# compile-only needs. Safe to re-run. Used by scripts/demo.sh, scripts/test.sh and .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

if ! command -v ld.lld >/dev/null 2>&1 && ! ls /usr/bin/ld.lld-1[0-9] >/dev/null 2>&1 \
   && [ ! -x "${ROCM_PATH:-/opt/rocm}/llvm/bin/ld.lld" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq lld-19 >/dev/null
  else
    echo "setup: no ld.lld found; install one (e.g. 'sudo apt-get install lld-19') for gfx950 compile-only" >&2
  fi
fi

if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
# torch==2.13.0 first: an unpinned torch would pull a multi-GB CUDA build on a CPU machine.
.venv/bin/pip install -q --disable-pip-version-check "torch==${TORCH_VERSION:-2.13.0}"
.venv/bin/pip install -q --disable-pip-version-check -e '.[test]'
