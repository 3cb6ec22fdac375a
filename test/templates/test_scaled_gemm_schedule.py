"""The MX scaled GEMM kernels' main K loop, per curated config and format, from their gfx950 ISA:
recorded with expecttest so that a schedule change shows up in review as a diff of per-tile
MFMAs, DMAs (and how many sit between MFMAs), waits, barriers, branches and resources; and
issue 20's checks for the MX families asserted for every config.

Dense MX: every curated config with MXFP8 (e4m3 x e4m3) and MXFP4 (e2m1 x e2m1) operands; grouped:
every curated MXFP8 grouped config. Each set compiles in one fresh process (FlyDSL writes the ISA
only when it lowers a kernel); counts are defined in ``torch_flydsl/runtime/isa.py``. One loop
iteration is one scale chunk of ``chunk`` K tiles (the pipeline unrolls them), so counts are per
K tile. Recorded with flydsl 0.5.0 (skipped with other releases). Re-record with
EXPECTTEST_ACCEPT=1 and ``-m slow``.

Tiers: the default tier checks the dense MXFP8 set (its loops and issue 20's checks); the golden
of all three sets and their checks run under ``-m slow`` (about 35 compiles, minutes on 2 cores).
"""

import json
import os

import pytest
from expecttest import assert_expected_inline

from torch_flydsl.runtime.probe import flydsl_info

from rendered_kit import summary_in_subprocess

pytestmark = [
    pytest.mark.compile,
    pytest.mark.skipif(flydsl_info().version != "0.5.0", reason="goldens recorded with flydsl 0.5.0"),
]

MIN_STEADY_K_TILES = 4  # issue 20: the checks apply where a workgroup runs >= 4 K tiles


def _isa_of(jit_fn, args, dump_dir):
    import contextlib
    import io
    from pathlib import Path

    from torch_flydsl.runtime.compile import compile_gfx950

    os.environ.update(FLYDSL_DUMP_IR="1", FLYDSL_DUMP_DIR=str(dump_dir))
    with contextlib.redirect_stdout(io.StringIO()):  # FlyDSL prints a line per dumped pass
        ck = compile_gfx950(jit_fn, *args)
    (isa,) = Path(dump_dir).glob("**/*final_isa.s")
    return ck.kernels[0], isa.read_text().splitlines()


def _facts(cfg, kernel, lines):
    """One config's loop line and check inputs. A ping-pong kernel (two wave groups, a loop each:
    ``isa.wave_group_loops``) reports both loops, and its checks count both."""
    from torch_flydsl.runtime.isa import loop_metrics, metrics_of, wave_group_loops

    per_tile = (cfg.block_m // 16) * (cfg.block_n // 16) * cfg.steps / cfg.waves
    groups = wave_group_loops(lines)
    ms = [metrics_of(lp, per_tile) for lp in groups] if groups else [m for m in [loop_metrics(lines, per_tile)] if m]
    summary = (" | ".join(f"group {g}: {m.summary()}" for g, m in enumerate(ms)) if groups
               else ms[0].summary() if ms else "no main loop")
    waves = kernel.waves_per_simd(cfg.threads)
    line = (f"{summary}; vgpr {kernel.vgpr} agpr {kernel.agpr} lds {kernel.lds_bytes} "
            f"spills {kernel.vgpr_spill + kernel.sgpr_spill} scratch {kernel.scratch_bytes}; {waves} waves/SIMD")
    facts = {"line": line, "waves": waves, "spills": kernel.vgpr_spill + kernel.sgpr_spill,
             "scratch": kernel.scratch_bytes, "loop": bool(ms)}
    if ms:
        facts.update(vmcnt=[v for m in ms for v in m.vmcnt], dma=sum(m.dma for m in ms),
                     between=sum(m.dma_between for m in ms), branches=max(m.extra_branches for m in ms))
    return facts


def render(family: str, fmt: str, dump_dir: str) -> str:
    """Run in the fresh process: every curated config's loop facts (512 x 512 x 8 K tiles; sizes
    are runtime values, so the loop is the same for every shape)."""
    from pathlib import Path

    import torch

    from torch_flydsl.templates.scaled_gemm.problem import DTYPE_OF_FORMAT, FORMATS, SCALE_DTYPE

    f = FORMATS[fmt]
    out = []
    if family == "dense":
        from torch_flydsl.templates.scaled_gemm import compile_args, search_space

        for cfg in search_space("curated"):
            if not cfg.fits_formats(f, f):  # the MXFP4-only deep tiles
                continue
            m = n = 512
            k = 8 * cfg.block_k
            a = torch.empty(m, f.row_bytes(k), dtype=torch.uint8).view(DTYPE_OF_FORMAT[fmt])
            b = torch.empty(n, f.row_bytes(k), dtype=torch.uint8).view(DTYPE_OF_FORMAT[fmt]).t()
            sa = torch.empty(m, k // 32, dtype=torch.uint8).view(SCALE_DTYPE)
            sb = torch.empty(n, k // 32, dtype=torch.uint8).view(SCALE_DTYPE)
            jit_fn, args = compile_args(cfg, a, b, sa, sb, torch.empty(m, n, dtype=torch.bfloat16))
            kernel, lines = _isa_of(jit_fn, args, Path(dump_dir) / cfg.key())
            out.append({"config": cfg.key(), **_facts(cfg, kernel, lines)})
    else:
        from torch_flydsl.templates.scaled_grouped_gemm.config import search_space
        from torch_flydsl.templates.scaled_grouped_gemm.launcher import compile_args

        for cfg in search_space("curated"):
            tokens, n, groups = 512, 512, 8
            k = 8 * cfg.block_k
            a = torch.empty(tokens, k, dtype=torch.uint8).view(DTYPE_OF_FORMAT[fmt])
            b = torch.empty(groups, n, k, dtype=torch.uint8).view(DTYPE_OF_FORMAT[fmt]).transpose(1, 2)
            sa = torch.empty(tokens, k // 32, dtype=torch.uint8).view(SCALE_DTYPE)
            sb = torch.empty(groups, n * k // 32, dtype=torch.uint8).view(SCALE_DTYPE)
            offs = torch.arange(1, groups + 1, dtype=torch.int32) * (tokens // groups)
            jit_fn, args = compile_args(cfg, a, b, sa, sb, offs, torch.empty(tokens, n, dtype=torch.bfloat16))
            kernel, lines = _isa_of(jit_fn, args, Path(dump_dir) / cfg.key())
            out.append({"config": cfg.key(), **_facts(cfg, kernel, lines)})
    return json.dumps(out)


def _render_sets(tmp_path_factory, sets) -> dict:
    out = {}
    for family, fmt in sets:
        d = tmp_path_factory.mktemp(f"isa_{family}_{fmt}")
        out[family, fmt] = json.loads(summary_in_subprocess(__file__, "render", (family, fmt), d))
    return out


@pytest.fixture(scope="module")
def loops(tmp_path_factory):
    """All three sets (about 35 compiles: the slow tier)."""
    return _render_sets(tmp_path_factory, (("dense", "e4m3"), ("dense", "e2m1"), ("grouped", "e4m3")))


@pytest.fixture(scope="module")
def fp8_loops(tmp_path_factory):
    """The dense MXFP8 set alone (17 compiles: the default tier's check of the MX schedule)."""
    return _render_sets(tmp_path_factory, (("dense", "e4m3"),))


def lines(rows):
    return "\n".join(f"{r['config']}: {r['line']}" for r in rows)


@pytest.mark.slow
def test_every_curated_config_is_reported_with_a_main_loop(loops):
    from torch_flydsl.templates.scaled_gemm import search_space
    from torch_flydsl.templates.scaled_grouped_gemm.config import search_space as grouped_space

    from torch_flydsl.templates.scaled_gemm.problem import FORMATS

    for (family, fmt), rows in loops.items():
        space = search_space("curated") if family == "dense" else grouped_space("curated")
        f = FORMATS[fmt]
        assert [r["config"] for r in rows] == [c.key() for c in space if c.fits_formats(f, f)]
        assert all(r["loop"] for r in rows), lines(rows)


@pytest.mark.slow
def test_main_loop_of_every_curated_config(loops):
    """The three sets' loop lines, then the stated reason of every config below 2 waves per SIMD."""
    from torch_flydsl.templates.scaled_gemm.config import ONE_WAVE_PER_SIMD

    text = "\n".join(f"# {family} {fmt}\n{lines(rows)}" for (family, fmt), rows in loops.items())
    below = sorted({r["config"].replace("mxgrp_", "mx_") for rows in loops.values() for r in rows if r["waves"] < 2})
    text += "\n# below 2 waves per SIMD\n" + "\n".join(f"{k}: {ONE_WAVE_PER_SIMD.get(k, '(no reason)')}" for k in below)
    assert_expected_inline(text, """\
# dense e4m3
mx_m128n128k128_w2x2_s3_g0_c2: 2 tile(s)/iter; per tile mfma 16, dma 9 (9 between mfma), vmcnt [8,10], lgkmcnt x13, barrier 1, branches 0+1, salu 28.5; mfma-free run 61, loop 243 instrs; vgpr 180 agpr 0 lds 102400 spills 0 scratch 0; 1 waves/SIMD
mx_m16n32k512_w1x2_s4_g0_c4: 4 tile(s)/iter; per tile mfma 4, dma 13.5 (12.5 between mfma), vmcnt [24,30,30,24], lgkmcnt x16, barrier 1, branches 0+1, salu 18.75; mfma-free run 69, loop 444 instrs; vgpr 144 agpr 0 lds 104448 spills 0 scratch 0; 0 waves/SIMD
mx_m32n16k512_w2x1_s3_g0_c2: 2 tile(s)/iter; per tile mfma 4, dma 13.5 (12 between mfma), vmcnt [12,15], lgkmcnt x8, barrier 1, branches 0+1, salu 35; mfma-free run 83, loop 274 instrs; vgpr 166 agpr 0 lds 76800 spills 0 scratch 0; 1 waves/SIMD
mx_m32n16k256_w2x1_s3_g0_c2: 2 tile(s)/iter; per tile mfma 2, dma 7 (5 between mfma), vmcnt [6,8], lgkmcnt x4, barrier 1, branches 0+1, salu 28.5; mfma-free run 102, loop 169 instrs; vgpr 98 agpr 0 lds 38912 spills 0 scratch 0; 2 waves/SIMD
mx_m32n64k256_w1x4_s3_g0_c2: 2 tile(s)/iter; per tile mfma 4, dma 7 (6 between mfma), vmcnt [6,8], lgkmcnt x6, barrier 1, branches 0+1, salu 28.5; mfma-free run 76, loop 186 instrs; vgpr 120 agpr 0 lds 77824 spills 0 scratch 0; 2 waves/SIMD
mx_m32n64k256_w1x2_s4_g0_c4: 4 tile(s)/iter; per tile mfma 8, dma 13.5 (13 between mfma), vmcnt [24,30,30,24], lgkmcnt x15, barrier 1, branches 0+1, salu 18.75; mfma-free run 54, loop 463 instrs; vgpr 154 agpr 0 lds 104448 spills 0 scratch 0; 0 waves/SIMD
mx_m64n64k128_w2x2_s3_g0_c4: 4 tile(s)/iter; per tile mfma 4, dma 4.5 (4.25 between mfma), vmcnt [4,6,4,4], lgkmcnt x12, barrier 1, branches 0+1, salu 16.75; mfma-free run 66, loop 252 instrs; vgpr 104 agpr 0 lds 53248 spills 0 scratch 0; 3 waves/SIMD
mx_m64n128k128_w2x2_s3_g0_c4: 4 tile(s)/iter; per tile mfma 8, dma 6.75 (6.5 between mfma), vmcnt [6,9,6,6], lgkmcnt x19, barrier 1, branches 0+1, salu 21.5; mfma-free run 66, loop 352 instrs; vgpr 136 agpr 0 lds 79872 spills 0 scratch 0; 2 waves/SIMD
mx_m128n64k128_w2x2_s3_g0_c4: 4 tile(s)/iter; per tile mfma 8, dma 6.75 (6.5 between mfma), vmcnt [6,9,6,6], lgkmcnt x20, barrier 1, branches 0+1, salu 21.5; mfma-free run 64, loop 355 instrs; vgpr 140 agpr 0 lds 79872 spills 0 scratch 0; 2 waves/SIMD
mx_m256n128k128_w2x2_s3_g8_c4: 4 tile(s)/iter; per tile mfma 32, dma 13.5 (13.5 between mfma), vmcnt [12,18,12,12], lgkmcnt x20, barrier 1, branches 0+1, salu 31.25; mfma-free run 90, loop 670 instrs; vgpr 304 agpr 48 lds 159744 spills 0 scratch 0; 1 waves/SIMD
mx_m256n128k128_w4x2_s3_g8_c4: 4 tile(s)/iter; per tile mfma 16, dma 6.75 (6.75 between mfma), vmcnt [6,9,6,6], lgkmcnt x23, barrier 1, branches 0+1, salu 23.5; mfma-free run 54, loop 422 instrs; vgpr 178 agpr 0 lds 159744 spills 0 scratch 0; 2 waves/SIMD
mx_m128n256k128_w2x4_s3_g8_c4: 4 tile(s)/iter; per tile mfma 16, dma 6.75 (6.75 between mfma), vmcnt [6,9,6,6], lgkmcnt x23, barrier 1, branches 0+1, salu 22.5; mfma-free run 55, loop 426 instrs; vgpr 180 agpr 0 lds 159744 spills 0 scratch 0; 2 waves/SIMD
mx_m16n32k512_w1x2_s6_g0_c8: 8 tile(s)/iter; per tile mfma 4, dma 13.5 (12.75 between mfma), vmcnt [48,60,60,60,60,48,48,48], lgkmcnt x12, barrier 1, branches 0+1, salu 28.75; mfma-free run 99, loop 1015 instrs; vgpr 132 agpr 0 lds 159744 spills 0 scratch 0; 0 waves/SIMD
mx_m32n64k256_w1x4_s6_g0_c4: 4 tile(s)/iter; per tile mfma 4, dma 6.75 (6.25 between mfma), vmcnt [24,27,27,27], lgkmcnt x12, barrier 1, branches 0+1, salu 25; mfma-free run 90, loop 349 instrs; vgpr 142 agpr 0 lds 153600 spills 0 scratch 0; 1 waves/SIMD
mx_m64n128k128_w2x2_s6_g0_c8: 8 tile(s)/iter; per tile mfma 8, dma 6.75 (6.625 between mfma), vmcnt [24,30,30,30,30,24,24,24], lgkmcnt x40, barrier 1, branches 0+1, salu 21.25; mfma-free run 66, loop 697 instrs; vgpr 142 agpr 0 lds 159744 spills 0 scratch 0; 1 waves/SIMD
mx_m128n128k128_w2x2_s4_g8_c4: 4 tile(s)/iter; per tile mfma 16, dma 9 (9 between mfma), vmcnt [16,20,20,16], lgkmcnt x28, barrier 1, branches 0+1, salu 13.75; mfma-free run 44, loop 409 instrs; vgpr 180 agpr 0 lds 139264 spills 0 scratch 0; 1 waves/SIMD
mx_m256n256k128_w2x4_s2_g8_pp: group 0: 2 tile(s)/iter; per tile mfma 32, dma 10 (7.5 between mfma), vmcnt [10,10,10,10], lgkmcnt x4, barrier 4, branches 0+1, salu 18; mfma-free run 75, loop 293 instrs | group 1: 2 tile(s)/iter; per tile mfma 32, dma 9 (9 between mfma), vmcnt [9,9], lgkmcnt x4, barrier 4, branches 0+1, salu 15; mfma-free run 34, loop 255 instrs; vgpr 256 agpr 0 lds 139264 spills 0 scratch 0; 2 waves/SIMD
# dense e2m1
mx_m128n128k128_w2x2_s3_g0_c2: 2 tile(s)/iter; per tile mfma 16, dma 5 (5 between mfma), vmcnt [4,6], lgkmcnt x11, barrier 1, branches 0+1, salu 25.5; mfma-free run 57, loop 187 instrs; vgpr 140 agpr 0 lds 53248 spills 0 scratch 0; 3 waves/SIMD
mx_m16n32k512_w1x2_s4_g0_c4: 4 tile(s)/iter; per tile mfma 4, dma 7.5 (6.75 between mfma), vmcnt [12,18,18,12], lgkmcnt x16, barrier 1, branches 0+1, salu 12.75; mfma-free run 56, loop 261 instrs; vgpr 108 agpr 0 lds 55296 spills 0 scratch 0; 1 waves/SIMD
mx_m32n16k512_w2x1_s3_g0_c2: 2 tile(s)/iter; per tile mfma 4, dma 7.5 (6.5 between mfma), vmcnt [6,9], lgkmcnt x8, barrier 1, branches 0+1, salu 29.5; mfma-free run 67, loop 183 instrs; vgpr 98 agpr 0 lds 39936 spills 0 scratch 0; 2 waves/SIMD
mx_m32n16k256_w2x1_s3_g0_c2: 2 tile(s)/iter; per tile mfma 2, dma 4 (3 between mfma), vmcnt [3,5], lgkmcnt x4, barrier 1, branches 0+1, salu 25.5; mfma-free run 76, loop 123 instrs; vgpr 64 agpr 0 lds 20480 spills 0 scratch 0; 4 waves/SIMD
mx_m32n64k256_w1x4_s3_g0_c2: 2 tile(s)/iter; per tile mfma 4, dma 4 (3.5 between mfma), vmcnt [3,5], lgkmcnt x6, barrier 1, branches 0+1, salu 24.5; mfma-free run 62, loop 134 instrs; vgpr 76 agpr 0 lds 40960 spills 0 scratch 0; 4 waves/SIMD
mx_m32n64k256_w1x2_s4_g0_c4: 4 tile(s)/iter; per tile mfma 8, dma 7.5 (7.25 between mfma), vmcnt [12,18,18,12], lgkmcnt x20, barrier 1, branches 0+1, salu 13.25; mfma-free run 61, loop 300 instrs; vgpr 124 agpr 0 lds 55296 spills 0 scratch 0; 1 waves/SIMD
mx_m64n64k128_w2x2_s3_g0_c4: 4 tile(s)/iter; per tile mfma 4, dma 2.5 (2.25 between mfma), vmcnt [2,4,2,2], lgkmcnt x12, barrier 1, branches 0+1, salu 14.75; mfma-free run 64, loop 186 instrs; vgpr 74 agpr 0 lds 28672 spills 0 scratch 0; 5 waves/SIMD
mx_m64n128k128_w2x2_s3_g0_c4: 4 tile(s)/iter; per tile mfma 8, dma 3.75 (3.75 between mfma), vmcnt [3,6,3,3], lgkmcnt x17, barrier 1, branches 0+1, salu 18.75; mfma-free run 73, loop 266 instrs; vgpr 108 agpr 0 lds 43008 spills 0 scratch 0; 3 waves/SIMD
mx_m128n64k128_w2x2_s3_g0_c4: 4 tile(s)/iter; per tile mfma 8, dma 3.75 (3.75 between mfma), vmcnt [3,6,3,3], lgkmcnt x17, barrier 1, branches 0+1, salu 19.75; mfma-free run 74, loop 273 instrs; vgpr 110 agpr 0 lds 43008 spills 0 scratch 0; 3 waves/SIMD
mx_m256n128k128_w2x2_s3_g8_c4: 4 tile(s)/iter; per tile mfma 32, dma 7.5 (7.5 between mfma), vmcnt [6,12,6,6], lgkmcnt x34, barrier 1, branches 0+1, salu 24.25; mfma-free run 54, loop 528 instrs; vgpr 236 agpr 0 lds 86016 spills 0 scratch 0; 1 waves/SIMD
mx_m256n128k128_w4x2_s3_g8_c4: 4 tile(s)/iter; per tile mfma 16, dma 3.75 (3.75 between mfma), vmcnt [3,6,3,3], lgkmcnt x16, barrier 1, branches 0+1, salu 19.5; mfma-free run 52, loop 317 instrs; vgpr 140 agpr 0 lds 86016 spills 0 scratch 0; 2 waves/SIMD
mx_m128n256k128_w2x4_s3_g8_c4: 4 tile(s)/iter; per tile mfma 16, dma 3.75 (3.75 between mfma), vmcnt [3,6,3,3], lgkmcnt x16, barrier 1, branches 0+1, salu 18.5; mfma-free run 51, loop 313 instrs; vgpr 140 agpr 0 lds 86016 spills 0 scratch 0; 2 waves/SIMD
mx_m16n32k512_w1x2_s6_g0_c8: 8 tile(s)/iter; per tile mfma 4, dma 7.5 (7 between mfma), vmcnt [24,36,36,36,36,24,24,24], lgkmcnt x11, barrier 1, branches 0+1, salu 22.75; mfma-free run 70, loop 646 instrs; vgpr 84 agpr 0 lds 86016 spills 0 scratch 0; 0 waves/SIMD
mx_m32n64k256_w1x4_s6_g0_c4: 4 tile(s)/iter; per tile mfma 4, dma 3.75 (3.5 between mfma), vmcnt [12,15,15,15], lgkmcnt x13, barrier 1, branches 0+1, salu 22; mfma-free run 89, loop 258 instrs; vgpr 92 agpr 0 lds 79872 spills 0 scratch 0; 2 waves/SIMD
mx_m64n128k128_w2x2_s6_g0_c8: 8 tile(s)/iter; per tile mfma 8, dma 3.75 (3.625 between mfma), vmcnt [12,18,18,18,18,12,12,12], lgkmcnt x33, barrier 1, branches 0+1, salu 17; mfma-free run 68, loop 512 instrs; vgpr 126 agpr 0 lds 86016 spills 0 scratch 0; 1 waves/SIMD
mx_m32n64k512_w1x4_s6_g0_c4: 4 tile(s)/iter; per tile mfma 8, dma 7.5 (7.25 between mfma), vmcnt [24,30,30,30], lgkmcnt x16, barrier 1, branches 0+1, salu 26.75; mfma-free run 69, loop 385 instrs; vgpr 148 agpr 0 lds 159744 spills 0 scratch 0; 1 waves/SIMD
mx_m64n128k256_w2x2_s5_g0_c4: 4 tile(s)/iter; per tile mfma 16, dma 7.5 (7.5 between mfma), vmcnt [18,24,24,24], lgkmcnt x33, barrier 1, branches 0+1, salu 27.75; mfma-free run 67, loop 436 instrs; vgpr 150 agpr 0 lds 135168 spills 0 scratch 0; 1 waves/SIMD
mx_m256n256k128_w4x2_s4_g8_c4: 4 tile(s)/iter; per tile mfma 32, dma 5 (5 between mfma), vmcnt [8,12,12,8], lgkmcnt x32, barrier 1, branches 0+1, salu 10.25; mfma-free run 44, loop 403 instrs; vgpr 224 agpr 0 lds 147456 spills 0 scratch 0; 2 waves/SIMD
mx_m128n128k128_w2x2_s4_g8_c4: 4 tile(s)/iter; per tile mfma 16, dma 5 (5 between mfma), vmcnt [8,12,12,8], lgkmcnt x19, barrier 1, branches 0+1, salu 10.25; mfma-free run 43, loop 295 instrs; vgpr 144 agpr 0 lds 73728 spills 0 scratch 0; 2 waves/SIMD
mx_m256n256k128_w2x4_s2_g8_pp: group 0: 2 tile(s)/iter; per tile mfma 32, dma 6 (4.5 between mfma), vmcnt [6,6,6,6], lgkmcnt x4, barrier 4, branches 0+1, salu 16; mfma-free run 50, loop 226 instrs | group 1: 2 tile(s)/iter; per tile mfma 32, dma 5 (5 between mfma), vmcnt [5,5], lgkmcnt x4, barrier 4, branches 0+1, salu 12; mfma-free run 27, loop 205 instrs; vgpr 220 agpr 0 lds 135168 spills 0 scratch 0; 2 waves/SIMD
mx_m256n256k256_w2x4_s2_g8_pp: group 0: 2 tile(s)/iter; per tile mfma 64, dma 10 (7.5 between mfma), vmcnt [10,10,10,10], lgkmcnt x4, barrier 4, branches 0+1, salu 15.5; mfma-free run 67, loop 354 instrs | group 1: 2 tile(s)/iter; per tile mfma 64, dma 10 (10 between mfma), vmcnt [10,10], lgkmcnt x4, barrier 4, branches 0+1, salu 15; mfma-free run 34, loop 340 instrs; vgpr 250 agpr 0 lds 139264 spills 0 scratch 0; 2 waves/SIMD
# grouped e4m3
mxgrp_m128n128k128_w2x2_s3_g0_c2: 2 tile(s)/iter; per tile mfma 16, dma 9 (9 between mfma), vmcnt [8,10], lgkmcnt x13, barrier 1, branches 0+1, salu 27; mfma-free run 62, loop 244 instrs; vgpr 192 agpr 0 lds 102400 spills 0 scratch 0; 1 waves/SIMD
mxgrp_m16n32k512_w1x2_s4_g0_c2: 2 tile(s)/iter; per tile mfma 4, dma 13.5 (12 between mfma), vmcnt [24,27], lgkmcnt x8, barrier 1, branches 0+1, salu 26.5; mfma-free run 81, loop 245 instrs; vgpr 206 agpr 0 lds 101376 spills 0 scratch 0; 0 waves/SIMD
mxgrp_m32n16k512_w2x1_s3_g0_c2: 2 tile(s)/iter; per tile mfma 4, dma 13.5 (12 between mfma), vmcnt [12,15], lgkmcnt x2, barrier 1, branches 0+1, salu 33.5; mfma-free run 89, loop 270 instrs; vgpr 164 agpr 0 lds 76800 spills 0 scratch 0; 1 waves/SIMD
mxgrp_m32n16k256_w2x1_s3_g0_c2: 2 tile(s)/iter; per tile mfma 2, dma 7 (5 between mfma), vmcnt [6,8], lgkmcnt x4, barrier 1, branches 0+1, salu 27; mfma-free run 118, loop 170 instrs; vgpr 110 agpr 0 lds 38912 spills 0 scratch 0; 2 waves/SIMD
mxgrp_m32n64k256_w1x4_s3_g0_c2: 2 tile(s)/iter; per tile mfma 4, dma 7 (6 between mfma), vmcnt [6,8], lgkmcnt x6, barrier 1, branches 0+1, salu 27; mfma-free run 104, loop 187 instrs; vgpr 132 agpr 0 lds 77824 spills 0 scratch 0; 2 waves/SIMD
mxgrp_m32n64k256_w1x2_s4_g0_c2: 2 tile(s)/iter; per tile mfma 8, dma 13.5 (13 between mfma), vmcnt [24,27], lgkmcnt x9, barrier 1, branches 0+1, salu 26.5; mfma-free run 76, loop 252 instrs; vgpr 190 agpr 0 lds 101376 spills 0 scratch 0; 0 waves/SIMD
mxgrp_m64n64k128_w2x2_s3_g0_c2: 2 tile(s)/iter; per tile mfma 4, dma 5 (4.5 between mfma), vmcnt [4,6], lgkmcnt x6, barrier 1, branches 0+1, salu 22; mfma-free run 75, loop 147 instrs; vgpr 102 agpr 0 lds 53248 spills 0 scratch 0; 3 waves/SIMD
mxgrp_m64n128k128_w2x2_s3_g0_c2: 2 tile(s)/iter; per tile mfma 8, dma 7 (6.5 between mfma), vmcnt [6,8], lgkmcnt x10, barrier 1, branches 0+1, salu 27; mfma-free run 69, loop 197 instrs; vgpr 144 agpr 0 lds 77824 spills 0 scratch 0; 2 waves/SIMD
mxgrp_m128n64k128_w2x2_s3_g0_c2: 2 tile(s)/iter; per tile mfma 8, dma 7 (6.5 between mfma), vmcnt [6,8], lgkmcnt x10, barrier 1, branches 0+1, salu 27; mfma-free run 69, loop 197 instrs; vgpr 140 agpr 0 lds 77824 spills 0 scratch 0; 2 waves/SIMD
# below 2 waves per SIMD
mx_m128n128k128_w2x2_s3_g0_c2: FP8: 3 stages of 32 KiB + scale slots (100 KiB) leave LDS for one workgroup of 4 waves per CU; the 2-workgroup 128x64 / 64x128 tiles are its alternatives
mx_m128n128k128_w2x2_s4_g8_c4: FP8: 4 stages of 32 KiB + scale slots (136 KiB) leave LDS for one workgroup of 4 waves per CU; with FP4 (72 KiB), the case it is curated for, two fit (2 waves per SIMD). FP8's 2-workgroup alternatives are the 128x64 / 64x128 tiles
mx_m16n32k512_w1x2_s4_g0_c2: the grouped family's mx_m16n32k512_w1x2_s4_g0_c4 (chunk 2): deep decode tile: 512 K values per tile (8 tiles at K = 4096) with 3 tiles in flight per workgroup; its LDS (FP8 99 KiB) leaves room for 1 (FP8) workgroup(s) of 2 waves per CU. A decode GEMM is bound by the bytes in flight, not by waves; mx_m32n16k256_w2x1_s3_g0_c2 is the 2-waves-per-SIMD decode alternative
mx_m16n32k512_w1x2_s4_g0_c4: deep decode tile: 512 K values per tile (8 tiles at K = 4096) with 3 tiles in flight per workgroup; its LDS (FP8 102 KiB, FP4 54 KiB) leaves room for 1 (FP8) / 2 (FP4) workgroup(s) of 2 waves per CU. A decode GEMM is bound by the bytes in flight, not by waves; mx_m32n16k256_w2x1_s3_g0_c2 is the 2-waves-per-SIMD decode alternative
mx_m16n32k512_w1x2_s6_g0_c8: deep tile, offered only where the whole grid is resident at once: 5 tiles in flight and scale chunks of 8 tiles per workgroup (FP8 156 KiB, FP4 84 KiB). With so few workgroups the bytes in flight per CU, not the waves, set the pace; more waves per SIMD would need workgroups the grid does not have
mx_m256n128k128_w2x2_s3_g8_c4: by design: 4 waves of 128x64 outputs each read 12 operand rows per 32 MFMAs, the fewest LDS bytes per MFMA of the curated tiles (its 8-wave twin mx_m256n128k128_w4x2_s3_g8_c4 holds 2 waves per SIMD)
mx_m32n16k512_w2x1_s3_g0_c2: deep decode tile: 512 K values per tile (8 tiles at K = 4096) with 2 tiles in flight per workgroup; its LDS (FP8 75 KiB) leaves room for 2 (FP8) workgroup(s) of 2 waves per CU. A decode GEMM is bound by the bytes in flight, not by waves; mx_m32n16k256_w2x1_s3_g0_c2 is the 2-waves-per-SIMD decode alternative
mx_m32n64k256_w1x2_s4_g0_c2: the grouped family's mx_m32n64k256_w1x2_s4_g0_c4 (chunk 2): decode tile of 2 waves (32 x 32 outputs each: the fewest LDS bytes per MFMA of the decode tiles) with 3 K tiles in flight; its LDS (FP8 102 KiB, FP4 54 KiB) leaves room for 1 (FP8) / 2 (FP4) workgroups per CU. A decode GEMM is bound by the bytes in flight, not by waves; mx_m32n16k256_w2x1_s3_g0_c2 is the 2-waves-per-SIMD decode alternative
mx_m32n64k256_w1x2_s4_g0_c4: decode tile of 2 waves (32 x 32 outputs each: the fewest LDS bytes per MFMA of the decode tiles) with 3 K tiles in flight; its LDS (FP8 102 KiB, FP4 54 KiB) leaves room for 1 (FP8) / 2 (FP4) workgroups per CU. A decode GEMM is bound by the bytes in flight, not by waves; mx_m32n16k256_w2x1_s3_g0_c2 is the 2-waves-per-SIMD decode alternative
mx_m32n64k256_w1x4_s6_g0_c4: deep tile, offered only where the whole grid is resident at once: 5 tiles in flight and scale chunks of 4 tiles per workgroup (FP8 150 KiB, FP4 78 KiB). With so few workgroups the bytes in flight per CU, not the waves, set the pace; more waves per SIMD would need workgroups the grid does not have
mx_m32n64k512_w1x4_s6_g0_c4: deep tile, offered only where the whole grid is resident at once: 5 tiles in flight and scale chunks of 4 tiles per workgroup (FP4 156 KiB). With so few workgroups the bytes in flight per CU, not the waves, set the pace; more waves per SIMD would need workgroups the grid does not have
mx_m64n128k128_w2x2_s6_g0_c8: deep tile, offered only where the whole grid is resident at once: 5 tiles in flight and scale chunks of 8 tiles per workgroup (FP8 156 KiB, FP4 84 KiB). With so few workgroups the bytes in flight per CU, not the waves, set the pace; more waves per SIMD would need workgroups the grid does not have
mx_m64n128k256_w2x2_s5_g0_c4: deep tile, offered only where the whole grid is resident at once: 4 tiles in flight and scale chunks of 4 tiles per workgroup (FP4 132 KiB). With so few workgroups the bytes in flight per CU, not the waves, set the pace; more waves per SIMD would need workgroups the grid does not have""")


def problems(row, reasons) -> list[str]:
    """Issue 20's MX checks for one config and format, as the reasons it fails them: no
    ``vmcnt(0)`` in the main loop, at least half its DMAs between MFMAs, no branch besides the
    back edge, no spills or scratch, and >= 2 waves per SIMD unless ``reasons`` says why not."""
    p = []
    if 0 in row["vmcnt"]:
        p.append(f"vmcnt(0) in the loop (waits {row['vmcnt']})")
    if 2 * row["between"] < row["dma"]:
        p.append(f"{row['between']} of {row['dma']} DMAs between MFMAs")
    if row["branches"]:
        p.append(f"{row['branches']} branch(es) besides the back edge")
    if row["spills"] or row["scratch"]:
        p.append("spills or scratch")
    if row["waves"] < 2 and row["config"].replace("mxgrp_", "mx_") not in reasons:
        p.append(f"{row['waves']} wave(s) per SIMD and no stated reason")
    return p


@pytest.mark.slow
def test_issue_20_checks_hold_for_every_curated_mx_config(loops):
    """Every curated config runs >= 4 K tiles on the issue's shapes (K = 4096, block_k <= 512)."""
    from torch_flydsl.templates.scaled_gemm import search_space
    from torch_flydsl.templates.scaled_gemm.config import ONE_WAVE_PER_SIMD

    # Scale chunks span several K tiles, except in the ping-pong loop, where each A half's and B's
    # scales ride with its data DMAs (one more DMA per half tile, no wait of their own).
    assert all(4096 // c.block_k >= MIN_STEADY_K_TILES and (c.chunk > 1 or c.pingpong) for c in search_space("curated"))
    failing = {f"{family} {fmt} {r['config']}": problems(r, ONE_WAVE_PER_SIMD)
               for (family, fmt), rows in loops.items() for r in rows}
    failing = {k: v for k, v in failing.items() if v}
    assert not failing, "\n".join(f"{k}: {'; '.join(v)}" for k, v in failing.items())


def test_issue_20_checks_hold_for_every_curated_mxfp8_config(fp8_loops):
    """The default tier's share of the two tests above: the dense MXFP8 loops (the FP8 loads are
    the larger; MXFP4 and the grouped family are checked under slow)."""
    from torch_flydsl.templates.scaled_gemm import search_space
    from torch_flydsl.templates.scaled_gemm.config import ONE_WAVE_PER_SIMD

    from torch_flydsl.templates.scaled_gemm.problem import FORMATS

    rows = fp8_loops["dense", "e4m3"]
    fp8 = FORMATS["e4m3"]
    assert [r["config"] for r in rows] == [c.key() for c in search_space("curated") if c.fits_formats(fp8, fp8)]
    assert all(r["loop"] for r in rows), lines(rows)
    failing = {r["config"]: p for r in rows if (p := problems(r, ONE_WAVE_PER_SIMD))}
    assert not failing, "\n".join(f"{k}: {'; '.join(v)}" for k, v in failing.items())


def test_a_big_tile_is_offered_for_m_2048_and_up():
    from torch_flydsl.templates.scaled_gemm import ScaledGemmProblem, configs_for

    for fmt in ("e4m3", "e2m1"):
        for m in (2048, 8192):
            fitting, _ = configs_for(ScaledGemmProblem(m, 4096, 4096, fmt, fmt), "curated")
            assert any(c.block_m * c.block_n >= 256 * 128 and c.stages >= 3 for c in fitting), (fmt, m)
