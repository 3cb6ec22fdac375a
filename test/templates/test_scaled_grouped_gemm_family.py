"""The MXFP8 grouped GEMM family's op vocabulary (``scaled_grouped_mm``) and its call form for
callers outside eager dispatch (``scaled_grouped_mm_out``, what vLLM's MXFP8 MoE route runs
through ``ops.try_run``): explain, dispatch tables, precompile specs and recorded shapes name it
through the registry, and one precompiled binary is the kernel every call of its config compiles."""

from __future__ import annotations

import json
import re

import pytest
import torch

from torch_flydsl import dispatch_table as dt
from torch_flydsl.deploy import spec
from torch_flydsl.deploy.precompile import plan_units
from torch_flydsl.explain import explain
from torch_flydsl.templates.base import Decline
from torch_flydsl.templates.scaled_grouped_gemm import config as sg_config
from torch_flydsl.templates.scaled_grouped_gemm.family import CALL_FORM, FAMILY

CFG = "mxgrp_m32n64k256_w1x4_s3_g0_c2"
E8M0 = torch.float8_e8m0fnu


def operands(tokens=16, n=64, k=256, groups=4, seed=0):
    """A MoE forward's operands on the CPU: e4m3 codes (no NaN), E8M0 codes near 1, ragged offs."""
    g = torch.Generator().manual_seed(seed)

    def codes(*shape):
        c = torch.randint(0, 256, shape, generator=g, dtype=torch.uint8)
        c[(c & 0x7F) == 0x7F] ^= 1
        return c.view(torch.float8_e4m3fn)

    a, b = codes(tokens, k), codes(groups, n, k).transpose(1, 2)
    sa = torch.randint(122, 130, (tokens, k // 32), generator=g, dtype=torch.uint8).view(E8M0)
    sb = torch.randint(122, 130, (groups, n, k // 32), generator=g, dtype=torch.uint8).view(E8M0)
    offs = torch.tensor([3, 3, 11, tokens], dtype=torch.int32)[:groups]
    return a, b, sa, sb, offs, torch.full((tokens, n), float("nan"), dtype=torch.bfloat16)


def test_explain_offers_the_baseline_and_says_why_mxfp4_is_declined():
    ex = explain("scaled_grouped_mm", 16, 512, 256, groups=4)
    assert ex.serving.served_by == "plugin" and [c.key() for c in ex.offered] == [CFG]
    ex = explain("scaled_grouped_mm", 16, 512, 256, groups=4, dtype="mxfp4")
    assert ex.offered == [] and "e4m3 x e4m3 operands only" in ex.serving.reason
    ex = explain("scaled_grouped_mm", 16, 512, 200, groups=4)
    assert ex.offered == [] and "K=200 is not a multiple of 128" in ex.serving.reason


def table(entries):
    return {"format": dt.FORMAT, "version": dt.VERSION, "arch": "gfx950", "entries": entries}


def test_a_table_of_both_moe_gemms_precompiles_one_binary_per_output_dtype(tmp_path):
    path = tmp_path / "table.json"
    path.write_text(json.dumps(table([{"op": "scaled_grouped_mm", "dtype": "mxfp8", "m": [1, 64], "n": n, "k": k,
                                       "groups": 4, "config": CFG} for n, k in ((512, 256), (256, 256))])))
    units, declined = plan_units(spec.load(path))
    assert declined == [] and sorted(units) == [f"{sg_config.KERNEL_VERSION}/{CFG}/e4m3.e4m3/bfloat16"]
    assert len(next(iter(units.values())).shapes) == 2
    shapes = tmp_path / "shapes.json"
    shapes.write_text(json.dumps({"format": spec.SHAPES_FORMAT, "version": 1, "breadth": "baseline", "shapes": [
        {"op": "scaled_grouped_mm", "dtype": "mxfp8", "out_dtype": "float16", "groups": 4, "m": 16, "n": 512,
         "k": 256}]}))
    assert sorted(plan_units(spec.load(shapes))[0]) == [f"{sg_config.KERNEL_VERSION}/{CFG}/e4m3.e4m3/float16"]


def test_a_recorded_shape_is_a_spec_shape():
    shape = spec.Shape.of("scaled_grouped_mm", dtype="mxfp8", out_dtype="bfloat16", groups=4, m=16, n=512, k=256)
    assert shape.to_json() == {"op": "scaled_grouped_mm", "m": 16, "n": 512, "k": 256, "groups": 4, "dtype": "mxfp8",
                               "out_dtype": "bfloat16"}
    with pytest.raises(spec.SpecError, match="groups must be given"):
        spec.Shape.of("scaled_grouped_mm", dtype="mxfp8", m=16, n=512, k=256)


def test_the_call_form_runs_through_try_run_and_checks_its_operands(monkeypatch):
    """``reference-standin``: the family's float64 reference writes the output (plumbing)."""
    from torch_flydsl import ops
    from torch_flydsl.templates.scaled_grouped_gemm import reference

    monkeypatch.setenv("TORCH_FLYDSL_EXECUTOR", "reference-standin")
    a, b, sa, sb, offs, out = operands()
    assert ops.try_run(FAMILY, CALL_FORM, (a, b, sa, sb, offs), {"cfg": CFG, "out": out}) is None
    assert torch.equal(out, reference(a, b, sa, sb, offs).to(torch.bfloat16))
    why = ops.try_run(FAMILY, CALL_FORM, (a, b, sa, sb, offs), {"cfg": "mxgrp_m16n16k512_w1x1_s4_g0", "out": out})
    assert "K=256 is not a multiple of block_k=512" in why
    assert "not an MXFP8 grouped GEMM config" in ops.try_run(FAMILY, CALL_FORM, (a, b, sa, sb, offs),
                                                             {"cfg": "grp_m32n128k64_w1x4_s3_g0", "out": out})
    checked = FAMILY.check_call(FAMILY.parse_call(CALL_FORM, (a, b[:, :, :32], sa, sb, offs), {"cfg": CFG, "out": out}))
    assert isinstance(checked, Decline) and checked.category == "shape"
    with pytest.raises(ValueError, match="runs 'scaled_grouped_mm_out' calls"):
        FAMILY.parse_call("grouped_mm_out", (a, b, sa, sb, offs), {"cfg": CFG, "out": out})


@pytest.mark.compile
def test_the_precompiled_binary_is_the_kernel_every_call_of_its_config_compiles():
    """Routed rows, N, K, experts and strides are run-time values: precompile's placeholder call
    traces the same kernel as calls of other sizes."""
    from torch_flydsl.runtime.compile import compile_gfx950
    from torch_flydsl.templates.scaled_grouped_gemm import compile_args

    cfg = FAMILY.config_from_key(CFG)

    def ir(jit_fn, args):
        return re.sub(r"loc\([^)]*\)", "", compile_gfx950(jit_fn, *args).source_ir)

    problem = FAMILY.problem_for("scaled_grouped_mm", {"m": 64, "n": 512, "k": 256, "groups": 8, "dtype": "mxfp8",
                                                       "out_dtype": "bfloat16"})
    placeholder = FAMILY.placeholder_call(cfg, problem)
    call = compile_args(cfg, *operands(tokens=16, n=64, k=512, groups=4))
    assert placeholder[0] is call[0] and ir(*placeholder) == ir(*call)
