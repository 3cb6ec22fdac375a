#!/usr/bin/env bash
# Create .venv with torch-flydsl, FlyDSL and the test tools, plus the ld.lld that gfx950
# compile-only needs. Safe to re-run. Used by scripts/demo.sh, scripts/test.sh and .ci/run.
# FlyDSL is left alone where another package in .venv pins it (AITER pins the exact release its
# prebuilt FlyDSL kernels were built with): then only the package and the test tools go in.
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
# The package and the test tools first, without flydsl; then flydsl (the [test] extra), unless
# another installed package pins it: pip would replace that flydsl and only warn afterwards.
.venv/bin/pip install -q --disable-pip-version-check -e '.[test-tools]'
rc=0
why=$(.venv/bin/python -m torch_flydsl.runtime.probe may-install-flydsl 2>&1) || rc=$?
case $rc in
  0) .venv/bin/pip install -q --disable-pip-version-check -e '.[test]' ;;
  1) echo "setup: not installing flydsl: $why" >&2 ;;
  *) echo "setup: could not check who pins flydsl (exit $rc): $why" >&2; exit 1 ;;
esac
