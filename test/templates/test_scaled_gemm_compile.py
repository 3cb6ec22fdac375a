"""Every shipped MX scaled GEMM config compiles for gfx950 on the CPU: no spills, no scratch,
static LDS as the config computes it and within 160 KiB, the scaled MFMA in the ISA with its
E8M0 scale operands in VGPRs.

Matrix (for a 2-core CI, ~1-3 s per compile): the baseline for every format pair, and every
curated config once, rotating through format pairs, output dtypes and bias. The full curated x
format pair x output dtype x bias product is marked ``slow``.
"""

import itertools
import re
from pathlib import Path

import pytest
import torch

from torch_flydsl.templates.scaled_gemm import BASELINE, ScaledGemmConfig, compile_args, search_space
from torch_flydsl.templates.scaled_gemm.config import LDS_LIMIT_BYTES
from torch_flydsl.templates.scaled_gemm.problem import DTYPE_OF_FORMAT, FORMATS, SCALE_DTYPE

pytestmark = pytest.mark.compile

PAIRS = [("e4m3", "e4m3"), ("e5m2", "e5m2"), ("e2m1", "e2m1"), ("e4m3", "e2m1"), ("e2m1", "e4m3"), ("e4m3", "e5m2")]
OUTS = (torch.bfloat16, torch.float16)


def operands(formats, out_dtype=torch.bfloat16, m=296, n=200, k=1024, bias=False):
    """CPU stand-ins (never launched) with padded leading strides and offsets, so the compile
    sees what real callers pass."""
    fa, fb = (FORMATS[f] for f in formats)
    ka, kb = fa.row_bytes(k), fb.row_bytes(k)
    a = torch.empty(m * (ka + 16) + 16, dtype=torch.uint8)[16:].view(DTYPE_OF_FORMAT[fa.name]).as_strided(
        (m, ka), (ka + 16, 1))
    b = torch.empty(n, kb + 32, dtype=torch.uint8).view(DTYPE_OF_FORMAT[fb.name])[:, :kb].t()
    sa = torch.empty(round(m / 128 + 0.5) * 128, k // 32, dtype=torch.uint8).view(SCALE_DTYPE)
    sb = torch.empty(n, k // 32 + 4, dtype=torch.uint8).view(SCALE_DTYPE)[:, : k // 32]
    out = torch.empty(m, n + 8, dtype=out_dtype)[:, :n]
    bias_t = torch.empty(n + 8, dtype=out_dtype)[8:] if bias else None
    return a, b, sa, sb, out, bias_t


def compile_one(cfg, formats, out_dtype, bias, **kw):
    from torch_flydsl.runtime.compile import compile_gfx950

    jit_fn, args = compile_args(cfg, *operands(formats, out_dtype, bias=bias, **kw))
    return compile_gfx950(jit_fn, *args)


def assert_clean(ck, cfg, formats, out_dtype=torch.bfloat16):
    (k,) = ck.kernels
    assert k.vgpr_spill == 0 and k.sgpr_spill == 0, k
    assert k.scratch_bytes == 0, k
    assert k.lds_bytes == cfg.lds_bytes(FORMATS[formats[0]], FORMATS[formats[1]], out_dtype) <= LDS_LIMIT_BYTES, k
    assert k.max_workgroup_size == cfg.threads, k
    assert k.vgpr <= 512, k


@pytest.mark.parametrize("formats", PAIRS, ids="x".join)
def test_baseline_compiles_clean_for_every_format_pair(formats):
    i = PAIRS.index(formats)
    out, bias = OUTS[i % 2], i % 3 == 0
    ck = compile_one(BASELINE, formats, out, bias)
    assert_clean(ck, BASELINE, formats, out)
    o = "bf16" if out == torch.bfloat16 else "fp16"
    assert ck.kernels[0].name == f"flydsl_scaled_gemm_{'x'.join(formats)}_{o}_{BASELINE.key()}_b{int(bias)}"


def _rotation():
    # Formats rotate; an MXFP4-only deep tile takes e2m1 x e2m1 (it does not fit the others).
    from torch_flydsl.templates.scaled_gemm.problem import FORMATS

    combos = itertools.cycle(itertools.product(PAIRS, OUTS, (True, False)))
    out = []
    for cfg in search_space("curated"):
        if cfg == BASELINE:
            continue
        formats, dtype, bias = next(combos)
        if not cfg.fits_formats(FORMATS[formats[0]], FORMATS[formats[1]], dtype):
            formats = ("e2m1", "e2m1")
        out.append((cfg, formats, dtype, bias))
    return out


@pytest.mark.parametrize("cfg, formats, out, bias", _rotation(), ids=lambda v: str(v).replace("torch.", ""))
def test_curated_config_compiles_clean(cfg, formats, out, bias):
    assert_clean(compile_one(cfg, formats, out, bias), cfg, formats, out)


@pytest.mark.slow
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("out", OUTS, ids=["bf16", "fp16"])
@pytest.mark.parametrize("formats", PAIRS, ids="x".join)
@pytest.mark.parametrize("cfg", search_space("curated"), ids=str)
def test_every_curated_combination_compiles_clean(cfg, formats, out, bias):
    assert_clean(compile_one(cfg, formats, out, bias), cfg, formats, out)


MFMA_RE = re.compile(r"v_mfma_scale_f32_16x16x128_f8f6f4 (\S+), (\S+), (\S+), (\S+), (\S+), (\S+)(.*)$")


@pytest.mark.parametrize("formats, fmt_flags", [(("e4m3", "e2m1"), "blgp:4"), (("e2m1", "e5m2"), "cbsz:4 blgp:1")])
def test_isa_scaled_mfma_with_vgpr_scales_and_one_opsel_byte_per_k_step(formats, fmt_flags, tmp_path, monkeypatch):
    monkeypatch.setenv("FLYDSL_DUMP_IR", "1")
    monkeypatch.setenv("FLYDSL_DUMP_DIR", str(tmp_path))
    monkeypatch.setenv("FLYDSL_RUNTIME_ENABLE_CACHE", "0")
    # A config no other test compiles (a cached kernel would not be dumped again); 4 K steps.
    cfg = ScaledGemmConfig(32, 32, 512, 1, 1, 2)
    compile_one(cfg, formats, torch.bfloat16, bias=False)
    (isa_file,) = Path(tmp_path).glob("*/*final_isa.s")
    lines = [m for m in map(MFMA_RE.search, isa_file.read_text().splitlines()) if m]
    per_tile = 2 * 2 * cfg.steps  # (32/16) x (32/16) blocks x 4 K steps, one wave
    assert len(lines) >= per_tile and len(lines) % per_tile == 0, len(lines)
    for m in lines:
        # Scale operands in VGPRs: the hardware misreads an SGPR or inline-constant scale.
        assert m.group(5).startswith("v") and m.group(6).startswith("v"), m.group(0)
        assert fmt_flags in m.group(7), m.group(0)
    # Step kk selects byte kk of both scale words: op_sel (bit 0) and op_sel_hi (bit 1).
    opsel = {(("op_sel:[1,1,0]" in m.group(7)), ("op_sel_hi:[1,1,0]" in m.group(7))) for m in lines}
    assert opsel == {(False, False), (True, False), (False, True), (True, True)}
    isa = isa_file.read_text()
    assert re.search(r"buffer_load_dwordx4 .* lds", isa) and re.search(r"buffer_load_dword .* lds", isa)


def test_one_compiled_kernel_serves_every_shape_stride_and_offset():
    """Sizes, leading strides and pointers are runtime values: the traced kernel is the same."""
    from torch_flydsl.runtime.compile import compile_gfx950

    def traced(**kw):
        jit_fn, args = compile_args(BASELINE, *operands(("e4m3", "e2m1"), **kw))
        return jit_fn, re.sub(r"loc\([^)]*\)", "", compile_gfx950(jit_fn, *args).source_ir)

    fn1, ir1 = traced(m=296, n=200, k=1024)
    fn2, ir2 = traced(m=17, n=24, k=128)
    assert fn1 is fn2 and ir1 == ir2


def test_compile_args_pack_strides_in_units_and_flat_byte_views():
    a, b, sa, sb, out, bias = operands(("e4m3", "e2m1"), bias=True)  # A 1024 B/row (+16), B 512 (+32)
    jit_fn, args = compile_args(BASELINE, a, b, sa, sb, out, bias)
    out_f, a_f, b_f, sa_f, sb_f, bias_f, m, n, k, lda, ldb, ldsa, ldsb, ldc, _stream = args
    assert (m, n, k) == (296, 200, 1024)
    assert (lda, ldb, ldsa, ldsb, ldc) == ((1024 + 16) // 2, (512 + 32) // 2, 32 // 4, 36 // 4, 208)
    assert a_f.dtype == b_f.dtype == torch.int16 and sa_f.dtype == sb_f.dtype == torch.int32
    for flat, t in ((out_f, out), (a_f, a), (b_f, b), (sa_f, sa), (sb_f, sb), (bias_f, bias)):
        assert flat.dim() == 1 and flat.stride() == (1,) and flat.data_ptr() == t.data_ptr()
    assert a_f.numel() * 2 == 295 * 1040 + 1024 and sb_f.numel() * 4 == 199 * 36 + 32  # exact byte spans


def test_bias_selects_its_own_kernel():
    ops = operands(("e4m3", "e4m3"), bias=True)
    fn_bias, _ = compile_args(BASELINE, *ops)
    fn_none, _ = compile_args(BASELINE, *ops[:5])
    assert fn_bias is not fn_none


def test_launch_refuses_cpu_tensors():
    from torch_flydsl.templates.scaled_gemm import launch

    with pytest.raises(RuntimeError, match="ROCm GPU"):
        launch(BASELINE, *operands(("e4m3", "e4m3")))


def test_compile_args_runs_the_gate_for_direct_callers():
    a, b, sa, sb, out, _ = operands(("e4m3", "e4m3"))
    with pytest.raises(ValueError, match="not bfloat16 or float16"):
        compile_args(BASELINE, a, b, sa, sb, torch.empty(out.shape, dtype=torch.float32))
