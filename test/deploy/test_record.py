"""Recording the GEMM shapes a model runs into a precompile spec."""

import json
import os
import subprocess
import sys

import torch

from torch_flydsl.deploy.record import record_shapes, shape_of_call
from torch_flydsl.deploy.spec import Shape, load


def test_linear_layers_are_recorded_as_nt_with_and_without_bias(tmp_path):
    up = torch.nn.Linear(64, 128).bfloat16()
    down = torch.nn.Linear(128, 32, bias=False).bfloat16()
    x = torch.randn(3, 5, 64, dtype=torch.bfloat16)
    with record_shapes(tmp_path / "s.json") as rec:
        down(up(x))
        down(up(x))
        torch.mm(torch.randn(4, 8), torch.randn(8, 4))  # fp32: not a dense-family dtype
    assert rec.shapes == {Shape.of("mm", dtype="bfloat16", layout="nt", bias=True, m=15, n=128, k=64): 2,
                          Shape.of("mm", dtype="bfloat16", layout="nt", bias=False, m=15, n=32, k=128): 2}
    assert rec.skipped == 1
    spec = load(tmp_path / "s.json", breadth="baseline")
    assert {w.shape for w in spec.work} == set(rec.shapes)
    assert all(w.configs for w in spec.work)


def test_saving_merges_with_what_the_file_holds(tmp_path):
    path = tmp_path / "s.json"
    with record_shapes(path):
        torch.mm(torch.randn(8, 16, dtype=torch.float16), torch.randn(16, 32, dtype=torch.float16))
    with record_shapes(path):
        torch.mm(torch.randn(16, 8, dtype=torch.float16).t(), torch.randn(32, 16, dtype=torch.float16).t())
    assert [w.shape.layout for w in load(path).work] == ["nn", "tt"]


def test_layouts_the_family_cannot_take_are_skipped():
    a = torch.randn(8, 16, 2, dtype=torch.bfloat16)[:, :, 0]  # neither dimension unit-stride
    assert shape_of_call("mm", [a, torch.randn(16, 4, dtype=torch.bfloat16)]) is None
    full_addend = torch.randn(8, 4, dtype=torch.bfloat16)
    assert shape_of_call("addmm", [full_addend, torch.randn(8, 16, dtype=torch.bfloat16),
                                   torch.randn(16, 4, dtype=torch.bfloat16)]) is None


COMPILED = r"""
import torch
from torch._inductor import config as ic
lin = torch.nn.Linear(256, 512).bfloat16()
x = torch.randn(64, 256, dtype=torch.bfloat16)
with ic.patch(max_autotune=True, max_autotune_gemm_backends="ATEN,FLYDSL"), torch.no_grad():
    torch.compile(lin)(x)
"""


def test_a_compiled_model_records_its_gemm_shapes_at_exit_plumbing_with_reference_standin(tmp_path):
    """TORCH_FLYDSL_RECORD_SHAPES in a torch.compile max-autotune run (the FlyDSL choice runs
    the reference stand-in: only the recording is under test)."""
    out = tmp_path / "rec.json"
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "ind"), "TORCH_FLYDSL_RECORD_SHAPES": str(out),
           "TORCH_FLYDSL_EXECUTOR": "reference-standin"}
    r = subprocess.run([sys.executable, "-c", COMPILED], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    shapes = json.loads(out.read_text())["shapes"]
    assert shapes == [{"op": "mm", "dtype": "bfloat16", "layout": "nt", "bias": True, "m": 64, "n": 512, "k": 256}]
