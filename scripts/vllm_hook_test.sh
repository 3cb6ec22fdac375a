#!/usr/bin/env bash
# Run test/integrations/ against the real vLLM 0.33.0 on CPU, in .venv-vllm/ (git-ignored;
# created on first use, reused after): torch 2.14.0 (vLLM 0.33's pin), vLLM without its
# dependencies (its CUDA kernels are not needed: the tests run vLLM's Python on the CPU key),
# the pure-Python packages that `import vllm.model_executor.layers.utils` needs, and this
# plugin with its test extras. The main venv runs the same tests against a stand-in seam.
# test/integrations/transformers/ runs here too: transformers (5.24 with vLLM 0.33) and the
# kernels package (0.17.2: the newest on the local index; the integration uses only kernels' own
# mapping API, so transformers' wish for kernels 0.18.2-0.19 does not matter to it).
#
#   scripts/vllm_hook_test.sh [VLLM_WHEEL_OR_SPEC] [-- pytest args]
#
# VLLM_WHEEL_OR_SPEC: a vLLM wheel file, or a pip spec (default vllm==0.33.0).
set -euo pipefail
cd "$(dirname "$0")/.."

VLLM=${1:-vllm==0.33.0}
[ $# -gt 0 ] && shift
[ "${1:-}" = "--" ] && shift
VENV=.venv-vllm
PY=$VENV/bin/python
# What vLLM 0.33's import chains of vllm.model_executor.layers.utils and .kernels.linear read
# (found by importing them).
DEPS=(packaging psutil pyzmq urllib3 regex numpy requests pydantic cbor2 transformers aiohttp openai-harmony
      openai pillow pybase64 cachetools msgspec cloudpickle uvloop py-cpuinfo prometheus_client xgrammar fastapi
      partial-json-parser llguidance einops)
# torch_flydsl.integrations.transformers (test/integrations/transformers/): its kernel-layer mapping.
KERNELS=kernels==0.17.2

if [ ! -x "$PY" ]; then
  python3 -m venv "$VENV"
fi
if ! "$PY" -c "import torch, sys; sys.exit(not torch.__version__.startswith('2.14.'))" 2>/dev/null; then
  "$PY" -m pip install -q "torch==2.14.0"
fi
if ! "$PY" -c "import importlib.metadata as m; assert m.version('vllm').startswith('0.33')" 2>/dev/null; then
  "$PY" -m pip install -q --no-deps "$VLLM"
fi
"$PY" -m pip install -q "${DEPS[@]}" "$KERNELS"
"$PY" -m pip install -q -e ".[test]"
# vLLM's CUDA wheel pins NVIDIA's CUTLASS DSL; its MLIR bindings and FlyDSL's register the same
# nanobind enum, and whichever loads second aborts the process. ROCm builds of vLLM do not ship
# it; take it out of this CPU test venv (vLLM imports its cute_dsl kernels only when present).
"$PY" -m pip uninstall -y -q nvidia-cutlass-dsl nvidia-cutlass-dsl-libs-base nvidia-cutlass-dsl-libs-core \
  nvidia-cutlass-dsl-libs-cu12 nvidia-cutlass-dsl-libs-cu13 2>/dev/null || true
for module in vllm.model_executor.layers.utils vllm.model_executor.kernels.linear; do
  VLLM_TARGET_DEVICE=cpu "$PY" -c "import $module" >/dev/null 2>&1 || {
    echo "$module does not import in $VENV:" >&2
    VLLM_TARGET_DEVICE=cpu "$PY" -c "import $module" 2>&1 | tail -5 >&2
    exit 1
  }
done
exec "$PY" -m pytest -q -p no:cacheprovider test/integrations/ "$@"
