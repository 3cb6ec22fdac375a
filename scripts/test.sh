#!/usr/bin/env bash
# Set up (if needed) and run the whole test suite: unit, Inductor glue, gfx950 compile-only
# and emulator tiers. Extra arguments go to pytest (e.g. -m "not compile" for the fast tier).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/python -m pytest -n 2 -p no:cacheprovider "$@"
