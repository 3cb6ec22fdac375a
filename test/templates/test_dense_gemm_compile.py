"""Every shipped dense GEMM config compiles for gfx950 on the CPU: no spills, no scratch,
static LDS within 160 KiB, MFMA in the ISA.

Matrix (chosen for a 2-core CI, ~1 s per compile): the baseline in every layout x dtype x bias,
and every curated config once, rotating through layouts, dtypes and bias. The full curated x
layout x dtype x bias product is marked ``slow``.
"""

import itertools
import re
from pathlib import Path

import pytest
import torch

from torch_flydsl.templates.dense_gemm import BASELINE, compile_args, search_space
from torch_flydsl.templates.dense_gemm.config import LDS_LIMIT_BYTES, DenseGemmConfig

pytestmark = pytest.mark.compile

LAYOUTS = ("nn", "nt", "tn", "tt")
DTYPES = (torch.bfloat16, torch.float16)


def operands(layout, dtype, m=296, n=200, k=512, bias=False):
    """CPU stand-ins (never launched) with the layout's strides, padded leading dims and an
    offset, so the compile sees what real callers pass."""
    pad = 8
    if layout[0] == "n":
        a = torch.empty(m, k + pad, dtype=dtype)[:, :k]
    else:
        a = torch.empty(k, m + pad, dtype=dtype)[:, :m].t()
    if layout[1] == "n":
        b = torch.empty(k, n + pad, dtype=dtype)[:, :n]
    else:
        b = torch.empty(n, k + pad, dtype=dtype)[:, :k].t()
    out = torch.empty(m, n, dtype=dtype)
    bias_t = torch.empty(n + 8, dtype=dtype)[8:] if bias else None
    return a, b, out, bias_t


def compile_one(cfg, layout, dtype, bias):
    from torch_flydsl.runtime.compile import compile_gfx950

    a, b, out, bias_t = operands(layout, dtype, bias=bias)
    jit_fn, args = compile_args(cfg, a, b, out, bias_t, alpha=0.5, beta=2.0)
    return compile_gfx950(jit_fn, *args)


def assert_clean(ck, cfg):
    # One kernel, split-K included (its last arriver per output tile reduces in the same launch).
    (k,) = ck.kernels
    assert k.lds_bytes == cfg.lds_bytes <= LDS_LIMIT_BYTES, k
    assert k.max_workgroup_size == cfg.threads, k
    for k in ck.kernels:
        assert k.vgpr_spill == 0 and k.sgpr_spill == 0, k
        assert k.scratch_bytes == 0, k
        assert k.vgpr <= 512, k


@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "fp16"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_baseline_compiles_clean(layout, dtype, bias):
    ck = compile_one(BASELINE, layout, dtype, bias)
    assert_clean(ck, BASELINE)
    d = "bf16" if dtype == torch.bfloat16 else "fp16"
    assert ck.kernels[0].name == f"flydsl_dense_gemm_{d}_{layout}_{BASELINE.key()}_b{int(bias)}"


def _rotation():
    combos = itertools.cycle(itertools.product(LAYOUTS, DTYPES, (True, False)))
    return [(cfg, *next(combos)) for cfg in search_space("curated") if cfg != BASELINE]


@pytest.mark.parametrize("cfg, layout, dtype, bias", _rotation(), ids=lambda v: str(v).replace("torch.", ""))
def test_curated_config_compiles_clean(cfg, layout, dtype, bias):
    assert_clean(compile_one(cfg, layout, dtype, bias), cfg)


@pytest.mark.slow
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("cfg", search_space("curated"), ids=str)
def test_every_curated_combination_compiles_clean(cfg, layout, dtype, bias):
    assert_clean(compile_one(cfg, layout, dtype, bias), cfg)


@pytest.mark.parametrize(
    "layout, dtype, read",
    [("nt", torch.bfloat16, "ds_read_b128"), ("tn", torch.float16, "ds_read_b64_tr_b16")],
)
def test_isa_uses_mfma_async_lds_dma_and_the_right_lds_reads(layout, dtype, read, tmp_path, monkeypatch):
    monkeypatch.setenv("FLYDSL_DUMP_IR", "1")
    monkeypatch.setenv("FLYDSL_DUMP_DIR", str(tmp_path))
    monkeypatch.setenv("FLYDSL_RUNTIME_ENABLE_CACHE", "0")
    # A config no other test compiles: a cached kernel would not be dumped again.
    cfg = DenseGemmConfig(64, 64, 64, 2, 2, 2, 0)
    compile_one(cfg, layout, dtype, bias=True)
    (isa_file,) = Path(tmp_path).glob("*/*final_isa.s")
    isa = isa_file.read_text()
    mfma = "v_mfma_f32_16x16x32_" + ("bf16" if dtype == torch.bfloat16 else "f16")
    # One K tile per loop trip: every wave does (BM/mw/16) x (BN/nw/16) x (BK/32) MFMAs.
    per_tile = (cfg.block_m // cfg.m_waves // 16) * (cfg.block_n // cfg.n_waves // 16) * (cfg.block_k // 32)
    count = len(re.findall(rf"\b{mfma}\b", isa))
    assert count >= per_tile and count % per_tile == 0, (count, per_tile)  # LLVM may unroll
    assert re.search(r"buffer_load_dwordx4 .* lds", isa)
    assert read in isa


def test_one_compiled_kernel_serves_every_shape_stride_and_offset():
    """Sizes, leading strides and pointers are runtime values: the traced kernel is the same."""
    from torch_flydsl.runtime.compile import compile_gfx950

    def traced(m, n, k, pad_a, pad_out):
        # Every operand eligible (16-byte aligned origins and leading strides), all different.
        a = torch.empty(m, k + pad_a, dtype=torch.bfloat16)[:, :k]
        b = torch.empty(n, k, dtype=torch.bfloat16).t()
        out = torch.empty(m + 1, n + pad_out, dtype=torch.bfloat16)[1:, :n]  # offset: one padded row
        jit_fn, args = compile_args(BASELINE, a, b, out)
        return jit_fn, re.sub(r"loc\([^)]*\)", "", compile_gfx950(jit_fn, *args).source_ir)

    fn1, ir1 = traced(296, 200, 512, 8, 0)
    fn2, ir2 = traced(17, 9, 128, 0, 7)
    assert fn1 is fn2 and ir1 == ir2


def test_compile_args_pack_strides_sizes_and_flat_operands():
    a = torch.empty(40, 64 + 8, dtype=torch.bfloat16)[:, :64]  # row-major, lda 72
    b = torch.empty(48, 64 + 16, dtype=torch.bfloat16)[:, :64].t()  # col-major [64, 48], ldb 80
    out = torch.empty(40, 56, dtype=torch.bfloat16)[:, :48]  # ldc 56
    bias = torch.empty(48, dtype=torch.bfloat16).expand(40, 48)
    jit_fn, args = compile_args(BASELINE, a, b, out, bias, alpha=0.5, beta=2.0)
    out_f, a_f, b_f, bias_f, ws, m, n, k, lda, ldb, ldc, alpha, beta, _stream = args
    assert ws.dtype == torch.float32 and ws.numel() == 1  # no split-K: never read
    assert (m, n, k, lda, ldb, ldc, alpha, beta) == (40, 48, 64, 72, 80, 56, 0.5, 2.0)
    for flat, t in ((out_f, out), (a_f, a), (b_f, b)):
        assert flat.dim() == 1 and flat.stride() == (1,) and flat.data_ptr() == t.data_ptr()
    assert out_f.numel() == 39 * 56 + 48 and a_f.numel() == 39 * 72 + 64 and b_f.numel() == 47 * 80 + 64
    assert bias_f.shape == (48,) and bias_f.stride() == (1,) and bias_f.data_ptr() == bias.data_ptr()


def test_beta_zero_selects_the_bias_free_kernel():
    a, b, out, bias = operands("nt", torch.float16, bias=True)
    fn_zero, args = compile_args(BASELINE, a, b, out, bias, beta=0.0)
    fn_none, _ = compile_args(BASELINE, a, b, out, None)
    fn_bias, _ = compile_args(BASELINE, a, b, out, bias, beta=1.0)
    assert fn_zero is fn_none and fn_bias is not fn_none


def test_launch_refuses_cpu_tensors():
    from torch_flydsl.templates.dense_gemm import launch

    a, b, out, _ = operands("nn", torch.bfloat16)
    with pytest.raises(RuntimeError, match="ROCm GPU"):
        launch(BASELINE, a, b, out)


def test_compile_args_rejects_mixed_dtypes():
    a, b, out, _ = operands("nt", torch.bfloat16)
    with pytest.raises(ValueError, match="bias dtype float32 differs"):
        compile_args(BASELINE, a, b, out, torch.empty(out.shape[1], dtype=torch.float32))
