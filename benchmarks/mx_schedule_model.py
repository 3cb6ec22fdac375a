"""A static MI355X model of the MX scaled GEMM's curated configs, before and after the chunked
no-drain pipeline (docs/mx_schedules.md), on issue 20's 8 MX shapes. A model, not a measurement:
nothing here runs or compiles a kernel; every constant is printed and can be overridden.

    python benchmarks/mx_schedule_model.py [--lds-bw 128] [--latency 2000] [--ghz 2.0] [--hbm 7.2]

Per config and shape (K tiles ``kt``, workgroups ``W``, ``r`` resident per CU by LDS and waves):

* MFMA: a wave issues ``(BM/16/mw) * (BN/16/nw) * block_k/128`` scaled 16x16x128 MFMAs per K
  tile, ``MFMA_CLK`` cycles each (32 with an FP8 operand, 16 for FP4 x FP4: AMD's published MI355X
  rates; LLVM's model says 16 for all); a CU's 4 SIMDs share its resident waves:
  ``T_mfma = max(r * waves, 4) / 4 * mfma * clk`` per round of ``r`` tiles.
* LDS: every tile's DMA writes ``(BM + BN) * row_bytes`` and each wave reads its
  ``(rep_m + rep_n) * 16`` operand rows: ``T_lds = r * bytes / LDS_BW``.
* Latency: ``stages - 1`` tiles in flight must cover a DMA round trip: ``T_lat = L / (stages - 1)``
  (a loop that waits ``vmcnt(0)`` every tile, stages = 2, exposes the whole ``L``).
* Issue: DMAs issued in one burst ahead of the MFMAs (the old loop) add ``ISSUE_CLK`` cycles each
  to the tile; DMAs between MFMAs (the new loop) add nothing. Scale DMAs count per tile (old:
  one round of 4-byte DMAs per operand and tile; new: per chunk).
* Time = max(HBM bytes / HBM_BW, ceil(W / (CUS * r)) * kt * max(T_mfma, T_lds, T_lat + T_issue) / GHz).

The "before" configs are the curated list before the chunked pipeline (keys fixed below); the
"after" configs are today's ``search_space("curated")``. Best config per shape on each side.
"""

from __future__ import annotations

import argparse
import math

from tabulate import tabulate

from torch_flydsl.templates.scaled_gemm.config import ScaledGemmConfig, search_space
from torch_flydsl.templates.scaled_gemm.problem import FORMATS

SHAPES = [(32, 4096, 4096), (128, 4096, 4096), (512, 4096, 4096), (2048, 4096, 4096), (4096, 4096, 4096),
          (8192, 4096, 4096), (32, 14336, 4096), (8192, 8192, 8192)]
BEFORE = ["mx_m128n128k128_w2x2_s2_g0", "mx_m32n16k512_w2x1_s3_g0", "mx_m16n16k512_w1x1_s4_g0",
          "mx_m16n32k512_w1x2_s3_g0", "mx_m32n64k256_w1x2_s3_g0", "mx_m64n64k256_w2x2_s3_g0",
          "mx_m64n128k256_w2x2_s2_g0", "mx_m128n64k256_w2x2_s2_g0", "mx_m128n128k128_w2x2_s3_g8",
          "mx_m128n128k256_w2x2_s2_g8", "mx_m256n128k128_w4x2_s2_g8", "mx_m128n256k128_w2x4_s2_g8"]
CUS, SIMDS, LDS_CU, MAX_WAVES = 256, 4, 160 * 1024, 8
MFMA_CLK = {"mxfp8": 32, "mxfp4": 16}
ISSUE_CLK = 16  # cycles a burst DMA costs the tile (address VALU + issue), stated assumption


def predict(cfg: ScaledGemmConfig, fmt: str, m: int, n: int, k: int, chunked: bool, c) -> float:
    f = FORMATS["e4m3" if fmt == "mxfp8" else "e2m1"]
    tb = cfg.tile_bytes(f, f)
    lds = cfg.lds_bytes(f, f)
    r = max(1, min(LDS_CU // lds, MAX_WAVES * SIMDS // cfg.waves))
    w = math.ceil(m / cfg.block_m) * math.ceil(n / cfg.block_n)
    r = min(r, math.ceil(w / CUS))
    kt = k // cfg.block_k
    rep_m, rep_n = cfg.block_m // cfg.m_waves // 16, cfg.block_n // cfg.n_waves // 16
    mfma = rep_m * rep_n * cfg.steps
    t_mfma = max(r * cfg.waves, SIMDS) / SIMDS * mfma * MFMA_CLK[fmt]
    row = tb.a_row  # A and B rows have the same bytes for one format
    lds_bytes = (cfg.block_m + cfg.block_n) * row + cfg.waves * (rep_m + rep_n) * 16 * row
    t_lds = r * lds_bytes / c.lds_bw
    t_lat = c.latency / (cfg.stages - 1)
    dmas = tb.data_per_tile + (tb.scales_per_chunk / cfg.chunk if chunked else tb.scales_per_chunk)
    t_issue = 0 if chunked else dmas * ISSUE_CLK
    t_round = max(t_mfma, t_lds, t_lat + t_issue)
    compute_s = math.ceil(w / (CUS * r)) * kt * t_round / (c.ghz * 1e9)
    hbm_s = (m * k + n * k) * row / cfg.block_k / (c.hbm * 1e12) + m * n * 2 / (c.hbm * 1e12)
    return max(compute_s, hbm_s) * 1e6


def best(configs, fmt, shape, chunked, c):
    f = FORMATS["e4m3" if fmt == "mxfp8" else "e2m1"]
    fits = [cfg for cfg in configs if cfg.fits_formats(f, f) and shape[2] % cfg.block_k == 0]
    return min(((predict(cfg, fmt, *shape, chunked, c), cfg.key()) for cfg in fits))


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--lds-bw", type=float, default=128.0, help="LDS bytes per clock per CU (128: CDNA3's)")
    p.add_argument("--latency", type=float, default=2000.0, help="DMA round trip, cycles")
    p.add_argument("--ghz", type=float, default=2.0, help="sustained clock")
    p.add_argument("--hbm", type=float, default=7.2, help="HBM TB/s")
    c = p.parse_args(argv)
    print(f"constants: LDS {c.lds_bw:g} B/clk/CU, DMA latency {c.latency:g} clk, {c.ghz:g} GHz, HBM {c.hbm:g} TB/s, "
          f"{CUS} CUs, MFMA clk {MFMA_CLK}, burst DMA issue {ISSUE_CLK} clk")
    before = [ScaledGemmConfig.from_key(key) for key in BEFORE]
    after = search_space("curated")
    rows: list[tuple] = []
    ratios: dict[str, list[float]] = {fmt: [] for fmt in MFMA_CLK}
    for fmt in MFMA_CLK:
        for shape in SHAPES:
            tb, kb = best(before, fmt, shape, False, c)
            ta, ka = best(after, fmt, shape, True, c)
            ratios[fmt].append(ta / tb)
            rows.append((fmt, "x".join(map(str, shape)), kb, f"{tb:.2f}", ka, f"{ta:.2f}", f"{ta / tb:.3f}"))
    print(tabulate(rows, headers=["format", "shape", "best before", "us", "best after", "us", "after/before"]))
    for fmt, rs in ratios.items():
        print(f"{fmt}: geomean after/before {math.exp(sum(map(math.log, rs)) / len(rs)):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
