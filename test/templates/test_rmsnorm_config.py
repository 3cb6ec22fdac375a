"""RMSNorm configs, eligibility and ``explain rms_norm``: which rows each config holds, the
baseline pick by row length, and a readable reason for every decline."""

import json
import os
import subprocess
import sys

import pytest
import torch

from torch_flydsl.templates.base import TensorMeta
from torch_flydsl.templates.rmsnorm import RmsNormConfig, baseline_for, check_problem, config_fits
from torch_flydsl.templates.rmsnorm.problem import RmsNormProblem


def problem(n, dtype=torch.bfloat16, rows=8):
    return RmsNormProblem(rows, n, dtype, True)


@pytest.mark.parametrize("n, key", [(1, "rms_w1_r4_s1"), (1024, "rms_w1_r4_s2"), (4096, "rms_w4_r1_s2"),
                                    (4097, "rms_w4_r1_s4"), (8192, "rms_w4_r1_s4"), (16384, "rms_w8_r1_s4"),
                                    (65536, "rms_w16_r1_s8")])
def test_baseline_is_the_smallest_config_holding_the_row(n, key):
    cfg = baseline_for(problem(n))
    assert cfg.key() == key and config_fits(cfg, problem(n)) is None
    assert RmsNormConfig.from_key(key) == cfg


def test_fp32_rows_hold_half_as_many_elements():
    assert config_fits(RmsNormConfig(16, 1, 8), problem(32768, torch.float32)) is None
    assert "keeps 32768 elements" in config_fits(RmsNormConfig(16, 1, 8), problem(32769, torch.float32)).reason


def meta(shape, dtype=torch.bfloat16, **kw):
    return TensorMeta.contiguous(shape, dtype).replace(**kw)


@pytest.mark.parametrize("x, shape, w, reason", [
    (meta((4, 64), torch.float64), (64,), None, "input dtype float64 is not bfloat16"),
    (meta((4, 64)), (4, 64), None, "only one normalized (last) dimension"),
    (meta((4, 64)), (32,), None, "is not the input's last dimension"),
    (meta((0, 64)), (64,), None, "empty input"),
    (meta((4, 64)), (64,), None, "eps=-1.0 is negative"),
    (meta((4, 64), stride=(72, 1)), (64,), None, "not contiguous (padded or permuted rows"),
    (meta((4, 64), offset=3), (64,), None, "not on a 16-byte boundary"),
    (meta((4, 70000)), (70000,), None, "do not fit the kernel's registers"),
    (meta((4, 64)), (64,), meta((64,), torch.float32), "weight dtype float32 differs"),
    (meta((4, 64)), (64,), meta((64,), stride=(2,)), "weight stride (2,) is not contiguous"),
])
def test_declines_name_the_reason(x, shape, w, reason):
    d = check_problem(x, shape, w, -1.0 if "eps" in reason else 1e-6)
    assert reason in d.reason, d


def test_size_one_dims_with_any_stride_are_contiguous():
    p = check_problem(meta((1, 4, 64), stride=(999, 64, 1)), (64,), None, None)
    assert p == RmsNormProblem(4, 64, torch.bfloat16, False)


def test_explain_cli_names_the_config_and_the_decline():
    # policy=plugin: on torch 2.15 + flydsl 0.3.x the in-tree override would otherwise serve it.
    env = {**os.environ, "TORCH_FLYDSL_INTREE_POLICY": "plugin"}
    run = lambda *a: subprocess.run([sys.executable, "-m", "torch_flydsl", "explain", "rms_norm", *a],  # noqa: E731
                                    capture_output=True, text=True, timeout=300, env=env)
    r = run("8", "4097")
    assert r.returncode == 0, r.stderr
    assert "rms_norm ROWS=8 N=4097 dtype=bfloat16 with weight" in r.stdout and "rms_w4_r1_s4" in r.stdout
    j = json.loads(run("4", "200000", "--dtype", "fp16", "--json").stdout)
    assert j["served_by"] == "pytorch" and j["declined"][0]["category"] == "size"
