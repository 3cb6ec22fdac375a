#!/usr/bin/env bash
# Set up (if needed) and run the demo: a small model compiled with max-autotune and
# ATEN,TRITON,FLYDSL. Without an MI350 it compiles the FlyDSL candidates for gfx950 on the
# CPU and checks them in the emulator against a float64 reference.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/python -m torch_flydsl demo "$@"
