"""Inductor's GPU-only paths with FlyDSL choices present, on an NVIDIA GPU (the lent H200).

FlyDSL cannot run on NVIDIA hardware, so the FlyDSL choices execute the float64 reference
stand-in (TORCH_FLYDSL_EXECUTOR=reference-standin): these tests check the glue only, next to
real Triton templates, epilogue-fusion benchmarking (MultiTemplateBuffer) and CUDA graphs.
Skipped without a CUDA (non-ROCm) GPU. Run: `python -m pytest -q test/gpu`.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.version.hip is not None, reason="needs an NVIDIA GPU (glue tests)"
)

PROBE = Path(__file__).parent.parent / "inductor" / "compile_probe.py"
STANDIN = {"TORCH_FLYDSL_EXECUTOR": "reference-standin"}


def probe(cache_dir, **opts):
    env = {**os.environ, **STANDIN, "TORCHINDUCTOR_CACHE_DIR": str(cache_dir)}
    opts = {"device": "cuda", "backends": "ATEN,TRITON,FLYDSL", "shape": [512, 512, 512], **opts}
    r = subprocess.run([sys.executable, str(PROBE), json.dumps(opts)], capture_output=True, text=True, env=env, timeout=900)
    assert r.returncode == 0, r.stderr[-6000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_flydsl_choice_wins_beside_triton_templates_with_epilogue_fusion_benchmarking(tmp_path):
    r = probe(tmp_path, op="mm", force_win=True, epilogue="relu")
    kinds = {k for seen in r["choices_seen"] for k in seen["choices"]}
    assert "TritonTemplateCaller" in kinds, r["choices_seen"]
    assert any("torch_flydsl.dense_mm_out" in c for c in r["calls"]), r["calls"]
    assert r["max_rel_err"] < 2e-2


def test_with_real_timings_the_slow_standin_loses_and_code_has_no_plugin_call(tmp_path):
    r = probe(tmp_path, op="mm", epilogue="relu")
    assert r["benchmarked"], "FlyDSL choices should have been benchmarked"
    assert not any("torch_flydsl" in c for c in r["calls"]), r["calls"]
    assert r["max_rel_err"] < 2e-2


def test_linear_with_bias_under_cuda_graphs(tmp_path):
    r = probe(tmp_path, op="linear", layout="nt", force_win=True, mode="max-autotune", extra_runs=3)
    assert any("torch_flydsl.dense_addmm_out" in c for c in r["calls"]), r["calls"]
    assert r["cudagraph_skips"] == 0
    assert r["max_rel_err"] < 2e-2


def test_warm_fx_graph_cache_in_a_fresh_process(tmp_path):
    cold = probe(tmp_path, op="mm", force_win=True)
    warm = probe(tmp_path, op="mm", force_win=True)
    assert warm["fx_hits"] == 1 and warm["benchmarked"] == []
    assert warm["calls"] == cold["calls"] and warm["max_rel_err"] < 2e-2
