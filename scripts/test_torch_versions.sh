#!/usr/bin/env bash
# Run the Inductor-glue tests (entry point, choices, generated code, caches) on each supported
# torch release, one venv per version under .venv-torch<ver>/ (created on first use).
#   scripts/test_torch_versions.sh              # 2.11.0 2.13.0 2.14.1
#   scripts/test_torch_versions.sh 2.14.1       # just one
# 2.13.0 is a local CPU wheel; 2.11.0 and 2.14.1 are CUDA builds (several GB, run on the CPU here).
set -euo pipefail
cd "$(dirname "$0")/.."
versions=("$@")
[ ${#versions[@]} -gt 0 ] || versions=(2.11.0 2.13.0 2.14.1)
status=0
for v in "${versions[@]}"; do
  venv=".venv-torch${v%.*}"
  if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
  fi
  "$venv/bin/pip" install -q "torch==$v" numpy pytest expecttest tabulate
  "$venv/bin/pip" install -q --no-deps "flydsl>=0.3.2,<0.6"
  "$venv/bin/pip" install -q --no-deps -e .
  echo "=== torch $v ==="
  if ! "$venv/bin/python" -m pytest -q -p no:cacheprovider test/test_autoload.py test/inductor; then
    status=1
  fi
done
exit $status
