"""Scaled MFMA (v_mfma_scale_f32_{16x16x128,32x32x64}_f8f6f4) against AMD's own description.

The expectations are built here from AMD's sources, not from the emulator's tables:

* [blog] ROCm blog "Matrix Core Programming on AMD CDNA3 and CDNA4 architecture"
  (github.com/ROCm/rocm-blogs, blogs/software-tools-optimization/matrix-cores-cdna/README.md,
  sections "__builtin_amdgcn_mfma_scale_f32_32x32x64_f8f8" and "..._f4f4"): the HIP kernels
  that fill the A/B registers of the 32x32x64 instruction for FP8 and for FP4, and the
  store loops that read C/D. ``_blog_32x32x64_regs`` transcribes their pointer arithmetic.
* [triton] triton-lang/triton: ``ScaledBlockedToScaledMFMAF8F6F4`` in
  third_party/amd/lib/TritonAMDGPUTransforms/AccelerateAMDMatmul.cpp gives the A/B dot
  operands ``kWidth = kBase / 2 = 16`` (so FP8 arrives as two runs of 16, FP4 as 16 bytes =
  32 consecutive values); ``chooseScaledMfmaScaleLayout`` in
  lib/Dialect/TritonGPU/IR/LinearLayoutConversions.cpp gives the lane bases of the E8M0
  scales; the ``mfma scaled`` lowering (DotOpToLLVM/MFMA.cpp) packs 4 scales per VGPR and
  picks one with opsel. ``_triton_16x16x128_regs`` and ``TRITON_SCALE_LANE_BASES`` follow them.
* [rocjitsu] ROCm/rocm-systems emulation/rocjitsu (AMD's ISA emulator): mma/layout.h
  ``input_loc`` ("sub-byte formats (fp4, fp6) pack contiguously"), mma_exec.h
  ``exec_f32_scaled_mixed`` (block sums scaled by 2^(sa+sb-254), 0xFF -> NaN). FP6 order and
  6-bit packing come from here (and FlyDSL PR #780's tested MXFP6 x MXFP4 GEMM, which feeds
  each lane a tight 24-byte K=32 chunk).
* [ck] AMD's Composable Kernel hardware test of these instructions, ROCm/rocm-libraries
  projects/composablekernel/test/mx_mfma_op/mx_mfma_op.hpp (commit 498ed361; also
  ROCm/composable_kernel test/mx_mfma_op/): the "Register Mapping" tables and the loaders
  ``load_A_row_major`` / ``load_B_col_major`` (FP8: 2 chunks of 16, chunk_offset =
  16 * 64 / M; FP4/FP6: 1 chunk of 32 packed values; FP6 table "Reg 0-2 [0:95] K = 0-15 |
  Reg 3-5 [0:95] K = 16-31" for lanes 0..M-1), ``load_mx_A_row_major`` (lane t's scale is
  x[t % M][t / M]) and ``f6_pk_t::pack`` (value i at bit 6*i of the little-endian dword
  array). mx_mfma_op.cpp runs MXFP6/MXBF6/MXFP8 x both shapes on gfx950 against a CPU
  reference with random E8M0 scales in [122, 129) per (row, K block). ``_ck_regs`` and
  ``_ck_scale_operand`` transcribe them.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("flydsl")

from irkit import kinds, run  # noqa: E402

from torch_flydsl.emulator.ops import mfma as mfma_mod  # noqa: E402

pytestmark = pytest.mark.emulator

SHAPES = {16: 128, 32: 64}
FMT_BITS = {"fp8_e4m3": 8, "fp8_e5m2": 8, "fp6_e2m3": 6, "fp6_e3m2": 6, "fp4_e2m1": 4}

# ---- number formats, written from the OCP MX spec (independent of the emulator's numerics) ------


def _minifloat(code, e_bits, m_bits, bias):
    s = -1.0 if code >> (e_bits + m_bits) & 1 else 1.0
    e = (code >> m_bits) & ((1 << e_bits) - 1)
    m = code & ((1 << m_bits) - 1)
    if e == 0:
        return s * m / (1 << m_bits) * 2.0 ** (1 - bias)
    return s * (1 + m / (1 << m_bits)) * 2.0 ** (e - bias)


def decode(codes, fmt):
    codes = np.asarray(codes)
    if fmt == "fp8_e4m3":
        return torch.from_numpy(codes.astype(np.uint8)).view(torch.float8_e4m3fn).double().numpy()
    if fmt == "fp8_e5m2":
        return torch.from_numpy(codes.astype(np.uint8)).view(torch.float8_e5m2).double().numpy()
    e, m, bias = {"fp6_e2m3": (2, 3, 1), "fp6_e3m2": (3, 2, 3), "fp4_e2m1": (2, 1, 1)}[fmt]
    return np.vectorize(lambda c: _minifloat(int(c), e, m, bias), otypes=[np.float64])(codes)


def e8m0(code):
    code = np.asarray(code, np.int64)
    return np.where(code == 255, np.nan, np.ldexp(1.0, code - 127))


def random_codes(rng, fmt, shape):
    bits = FMT_BITS[fmt]
    c = rng.integers(0, 1 << bits, shape)
    if fmt == "fp8_e4m3":
        c[(c & 0x7F) == 0x7F] = 0x38  # no NaN codes here (NaN gets its own test)
    if fmt == "fp8_e5m2":
        c[(c & 0x7C) == 0x7C] = 0x3C  # no Inf/NaN codes here
    return c.astype(np.uint8)


# ---- what goes into each lane's A/B registers, per AMD ------------------------------------------


def _blog_32x32x64_regs(mat, fmt, operand):
    """[blog] HIP kernels for the 32x32x64 instruction. ``mat`` is A (32x64) or B (64x32) codes,
    row-major; returns (64, 32) codes in register order (FP4: value 2i = low nibble of byte i)."""
    flat = mat.ravel()
    regs = np.zeros((64, 32), np.uint8)
    bits = FMT_BITS[fmt]
    for t in range(64):
        if bits == 8 and operand == "A":  # ldg_a = A + (t%32)*64 + (t/32)*16; a_reg[i*16+j] = ldg_a[i*32+j]
            base = (t % 32) * 64 + (t // 32) * 16
            for i in range(2):
                for j in range(16):
                    regs[t, i * 16 + j] = flat[base + i * 32 + j]
        elif bits == 8:  # ldg_b = B + t%32 + 32*16*(t/32); b_reg[i*16+j] = ldg_b[32*j + i*32*32]
            base = t % 32 + 32 * 16 * (t // 32)
            for i in range(2):
                for j in range(16):
                    regs[t, i * 16 + j] = flat[base + 32 * j + i * 32 * 32]
        elif bits == 4 and operand == "A":  # fp4x2 bytes: ldg_a = A + (t%32)*32 + (t/32)*16; a_reg[i] = ldg_a[i]
            for i in range(16):  # byte i of row t%32 from byte column (t/32)*16 + i: values 2i, 2i+1
                kk = 2 * ((t // 32) * 16 + i)
                regs[t, 2 * i], regs[t, 2 * i + 1] = mat[t % 32, kk], mat[t % 32, kk + 1]
        elif bits == 4:  # b_reg[i] = create(extract(ldg_b[16*2i], t%2), extract(ldg_b[16*(2i+1)], t%2))
            for i in range(16):  # rows (t/32)*32 + 2i and +1 of column t%32
                regs[t, 2 * i] = mat[(t // 32) * 32 + 2 * i, t % 32]
                regs[t, 2 * i + 1] = mat[(t // 32) * 32 + 2 * i + 1, t % 32]
        else:
            raise ValueError("the blog has no FP6 kernel")
    return regs


def _triton_16x16x128_regs(mat, fmt, operand):
    """[triton] dot operand of the 16x16x128 instruction: 16 lanes along M/N, 4 along K, each lane
    kWidth = 16 consecutive *bytes* of K per 64-byte K tile; the instruction takes kBase = 32
    elements = 2 tiles for FP8 (second run 64 k further on), 1 tile (32 values) for FP4."""
    regs = np.zeros((64, 32), np.uint8)
    bits = FMT_BITS[fmt]
    for t in range(64):
        idx, grp = t % 16, t // 16
        for v in range(32):
            if bits == 8:
                tile, w = divmod(v, 16)  # register holds tile 0 then tile 1
                k = tile * 64 + grp * 16 + w
            elif bits == 4:
                k = grp * 32 + v  # 16 bytes at byte offset 16*grp = 32 fp4 from 32*grp
            else:
                raise ValueError("Triton has no FP6 scaled path (NYI: mxfp6)")
            regs[t, v] = mat[idx, k] if operand == "A" else mat[k, idx]
    return regs


def _rocjitsu_fp6_regs(mat, M, operand):
    """[rocjitsu] input_loc: FP6 packs 32 consecutive k per lane group (like FP4)."""
    regs = np.zeros((64, 32), np.uint8)
    for t in range(64):
        for v in range(32):
            k = (t // M) * 32 + v
            regs[t, v] = mat[t % M, k] if operand == "A" else mat[k, t % M]
    return regs


def lane_regs(mat, fmt, M, operand):
    if FMT_BITS[fmt] == 6:
        return _rocjitsu_fp6_regs(mat, M, operand)
    return _blog_32x32x64_regs(mat, fmt, operand) if M == 32 else _triton_16x16x128_regs(mat, fmt, operand)


def pack(regs, bits):
    """(64, 32) codes -> (64, 32*bits/8) bytes, values packed little-endian (FP4: low nibble first)."""
    if bits == 8:
        return regs.astype(np.uint8)
    b = ((regs[:, :, None].astype(np.int64) >> np.arange(bits)) & 1).astype(np.uint8).reshape(64, -1)
    return np.packbits(b, axis=1, bitorder="little")


# [triton] chooseScaledMfmaScaleLayout: lane bit -> (scale K-block step, row step)
TRITON_SCALE_LANE_BASES = {
    32: [(0, 1), (0, 2), (0, 4), (0, 8), (0, 16), (1, 0)],
    16: [(0, 1), (0, 2), (0, 4), (0, 8), (1, 0), (2, 0)],
}


def scale_regs(scale_codes, M, opsel, rng):
    """(M or N, K/32) E8M0 codes -> the per-lane i32 scale operand: the code in byte ``opsel``,
    random garbage in the other three bytes (the instruction must ignore them)."""
    out = rng.integers(0, 1 << 32, 64, dtype=np.uint64)
    for t in range(64):
        kb = row = 0
        for bit, (dk, dr) in enumerate(TRITON_SCALE_LANE_BASES[M]):
            if t >> bit & 1:
                kb, row = kb + dk, row + dr
        out[t] &= ~np.uint64(0xFF << (8 * opsel))
        out[t] |= np.uint64(int(scale_codes[row, kb]) << (8 * opsel))
    return out.astype(np.uint32).view(np.int32)


def c_lane_rows(M):
    """[blog] store loops: lane t, accumulator value v -> (row, col) of C/D."""
    rows = np.zeros((64, M * M // 64), np.int64)
    for t in range(64):
        for v in range(M * M // 64):
            if M == 32:  # C[t%32 + (t/32)*4*32 + i*32*8 + 32*jj] = c_reg[i*4+jj]
                i, jj = divmod(v, 4)
                rows[t, v] = (t // 32) * 4 + i * 8 + jj
            else:  # *(C + i*16 + t%16 + (t/16)*64) = c_reg[i]
                rows[t, v] = (t // 16) * 4 + v
    cols = np.broadcast_to((np.arange(64) % M)[:, None], rows.shape)
    return rows, cols


def reference(a_codes, fa, b_codes, fb, sa_codes, sb_codes, C):
    """D = C + sum_k A[i,k] 2^(sa[i,k/32]-127) * B[k,j] 2^(sb[j,k/32]-127), in float64."""
    K = a_codes.shape[1]
    blk = np.arange(K) // 32
    A = decode(a_codes, fa) * e8m0(sa_codes)[:, blk]
    B = decode(b_codes, fb) * e8m0(sb_codes)[:, blk].T
    with np.errstate(all="ignore"):
        return C + np.einsum("ik,kj->ij", A, B)


# ---- running the instruction ----------------------------------------------------------------------


def run_scaled_mfma(M, fa, fb, a_regs, b_regs, c_lanes, sa_lanes, sb_lanes, opsel_a, opsel_b, scales=None):
    """One wave runs the instruction on per-lane registers; returns (64, nacc) results and the report."""
    K = SHAPES[M]
    nacc = M * M // 64
    a_bytes, b_bytes = pack(a_regs, FMT_BITS[fa]), pack(b_regs, FMT_BITS[fb])
    na, nb = a_bytes.shape[1] // 4, b_bytes.shape[1] // 4
    A = torch.from_numpy(a_bytes.copy())
    B = torch.from_numpy(b_bytes.copy())
    Cc = torch.from_numpy(np.ascontiguousarray(c_lanes, np.float32))
    SA = torch.from_numpy(np.ascontiguousarray(sa_lanes, np.int32))
    SB = torch.from_numpy(np.ascontiguousarray(sb_lanes, np.int32))
    out = torch.zeros(64, nacc)
    if scales is None:
        scales = """
      %psa = llvm.getelementptr %SA[%tid] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
      %sa = llvm.load %psa : !llvm.ptr<1> -> i32
      %psb = llvm.getelementptr %SB[%tid] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
      %sb = llvm.load %psb : !llvm.ptr<1> -> i32"""
    body = f"""
      %pa = llvm.getelementptr %A[%tid] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, vector<{na}xi32>
      %va = llvm.load %pa : !llvm.ptr<1> -> vector<{na}xi32>
      %pb = llvm.getelementptr %B[%tid] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, vector<{nb}xi32>
      %vb = llvm.load %pb : !llvm.ptr<1> -> vector<{nb}xi32>
      %pc = llvm.getelementptr %C[%tid] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, vector<{nacc}xf32>
      %vc = llvm.load %pc : !llvm.ptr<1> -> vector<{nacc}xf32>{scales}
      %d = rocdl.mfma.scale.f32.{M}x{M}x{K}.f8f6f4 %va, %vb, %vc, {fa}, {fb}, {opsel_a}, %sa, {opsel_b}, %sb : (vector<{na}xi32>, vector<{nb}xi32>, vector<{nacc}xf32>, i32, i32) -> vector<{nacc}xf32>
      %po = llvm.getelementptr %out[%tid] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, vector<{nacc}xf32>
      llvm.store %d, %po : vector<{nacc}xf32>, !llvm.ptr<1>
"""
    rep = run(
        "%A: !llvm.ptr<1>, %B: !llvm.ptr<1>, %C: !llvm.ptr<1>, %SA: !llvm.ptr<1>, %SB: !llvm.ptr<1>, %out: !llvm.ptr<1>",
        body,
        [A, B, Cc, SA, SB, out],
    )
    return out.numpy().astype(np.float64), rep


class Case:
    """Matrices in their math form, their register images per AMD, and the expected D."""

    def __init__(self, M, fa, fb, opsel_a=0, opsel_b=0, seed=0, a=None, b=None, sa=None, sb=None, c=None):
        rng = np.random.default_rng(seed)
        K = SHAPES[M]
        self.M, self.fa, self.fb, self.opsel_a, self.opsel_b = M, fa, fb, opsel_a, opsel_b
        self.a = random_codes(rng, fa, (M, K)) if a is None else a
        self.b = random_codes(rng, fb, (K, M)) if b is None else b
        # a different scale for every (row, block) and (column, block): 2^-7 .. 2^7
        self.sa = rng.integers(120, 135, (M, K // 32)) if sa is None else sa
        self.sb = rng.integers(120, 135, (M, K // 32)) if sb is None else sb
        self.c = rng.standard_normal((M, M)) if c is None else c
        rows, cols = c_lane_rows(M)
        self.rows, self.cols = rows, cols
        self.c_lanes = self.c.astype(np.float32)[rows, cols]
        self.sa_lanes = scale_regs(self.sa, M, opsel_a, rng)
        self.sb_lanes = scale_regs(self.sb, M, opsel_b, rng)
        self.expect = reference(self.a, fa, self.b, fb, self.sa, self.sb, self.c.astype(np.float32).astype(np.float64))

    lane_regs = staticmethod(lane_regs)  # how AMD's source at hand fills the A/B registers

    def run(self, scales=None):
        got, rep = run_scaled_mfma(
            self.M, self.fa, self.fb,
            self.lane_regs(self.a, self.fa, self.M, "A"), self.lane_regs(self.b, self.fb, self.M, "B"),
            self.c_lanes, self.sa_lanes, self.sb_lanes, self.opsel_a, self.opsel_b, scales=scales,
        )
        D = np.full((self.M, self.M), np.nan)
        D[self.rows, self.cols] = got
        return D, rep

    def matches(self, D):
        exp = self.expect.astype(np.float32).astype(np.float64)
        same_nan = np.array_equal(np.isnan(D), np.isnan(exp))
        fin = np.isfinite(exp)
        same_inf = np.array_equal(D[~fin & ~np.isnan(exp)], exp[~fin & ~np.isnan(exp)])
        scale = np.abs(exp[fin]).max() if fin.any() else 1.0
        close = np.allclose(D[fin], exp[fin], rtol=1e-5, atol=1e-6 * scale)
        return same_nan and same_inf and close


FORMAT_PAIRS = [
    ("fp8_e4m3", "fp8_e4m3"),
    ("fp8_e5m2", "fp8_e4m3"),
    ("fp8_e4m3", "fp4_e2m1"),  # mixed: A two runs of 16, B 32 consecutive
    ("fp4_e2m1", "fp8_e5m2"),
    ("fp4_e2m1", "fp4_e2m1"),
    ("fp6_e2m3", "fp4_e2m1"),
    ("fp8_e4m3", "fp6_e3m2"),
]


@pytest.mark.parametrize("M", [16, 32])
@pytest.mark.parametrize("fa, fb", FORMAT_PAIRS)
def test_operand_k_order_and_per_block_scales_match_amd(M, fa, fb):
    case = Case(M, fa, fb, opsel_a=(M // 16 + len(fa)) % 4, opsel_b=(len(fb) + 1) % 4, seed=M + sum(map(ord, fa + fb)))
    D, rep = case.run()
    assert rep.findings == []
    assert case.matches(D), f"max |err| {np.nanmax(np.abs(D - case.expect))}"


@pytest.mark.parametrize("M", [16, 32])
def test_e8m0_extremes_are_exact_powers_of_two(M):
    K = SHAPES[M]
    a = np.zeros((M, K), np.uint8)
    b = np.zeros((K, M), np.uint8)
    a[:, 0] = 0x38  # 1.0 (e4m3) at k = 0 (block 0) ...
    b[0, :] = 0x38
    a[:, K - 1] = 0x40  # ... and 2.0 at k = K-1 (last block)
    b[K - 1, :] = 0x38
    sa = np.zeros((M, K // 32), np.int64)  # 0x00 = 2^-127, not zero
    sb = np.full((M, K // 32), 128)  # 2^1
    sb[:, -1] = 254  # 2^127
    sa[:, -1] = 1  # 2^-126: block K/32-1 contributes 2 * 2^-126 * 2^127 = 4
    case = Case(M, "fp8_e4m3", "fp8_e4m3", a=a, b=b, sa=sa, sb=sb, c=np.zeros((M, M)))
    D, _ = case.run()
    # block 0: 1 * 2^-127 * 2^1 = 2^-126, far below 4 in f32: the sum rounds to 4 exactly
    assert np.all(D == 4.0)
    case = Case(M, "fp8_e4m3", "fp8_e4m3", a=a * (np.arange(K) < 32), b=b, sa=sa, sb=sb, c=np.zeros((M, M)))
    D, _ = case.run()
    assert np.all(D == 2.0**-126)  # 2^-127 (0x00) times 2^1: the smallest normal f32, exactly
    sa[:, -1] = 254
    case = Case(M, "fp8_e4m3", "fp8_e4m3", a=a, b=b, sa=sa, sb=sb, c=np.zeros((M, M)))
    D, _ = case.run()
    assert np.all(D == np.inf)  # 2 * 2^127 * 2^127 overflows f32


@pytest.mark.parametrize("M", [16, 32])
def test_e8m0_nan_code_poisons_exactly_its_row_or_column(M):
    K = SHAPES[M]
    rng = np.random.default_rng(5)
    sa = rng.integers(120, 135, (M, K // 32))
    sb = rng.integers(120, 135, (M, K // 32))
    sa[3, 1] = 0xFF  # row 3, block 1 of A
    sb[5, K // 32 - 1] = 0xFF  # column 5, last block of B
    case = Case(M, "fp8_e4m3", "fp4_e2m1", opsel_a=2, opsel_b=1, sa=sa, sb=sb, seed=6)
    D, _ = case.run()
    nan = np.isnan(D)
    assert nan[3, :].all() and nan[:, 5].all()
    nan[3, :] = False
    nan[:, 5] = False
    assert not nan.any()
    assert case.matches(D)


@pytest.mark.parametrize("M", [16, 32])
def test_nan_scale_byte_not_selected_by_opsel_is_ignored(M):
    case = Case(M, "fp4_e2m1", "fp8_e4m3", opsel_a=1, opsel_b=3, seed=7)
    case.sa_lanes = (case.sa_lanes.view(np.uint32) | np.uint32(0xFF0000FF)).view(np.int32)  # bytes 0 and 3
    case.sb_lanes = (case.sb_lanes.view(np.uint32) | np.uint32(0x00FFFF00)).view(np.int32)  # bytes 1 and 2
    D, _ = case.run()
    assert np.isfinite(D).all() and case.matches(D)


@pytest.mark.parametrize("M", [16, 32])
def test_nan_and_inf_in_data_land_in_their_rows(M):
    K = SHAPES[M]
    rng = np.random.default_rng(11)
    a = random_codes(rng, "fp8_e4m3", (M, K))
    a[2, 17] = 0x7F  # e4m3 NaN at row 2, k 17 (lane group 1 of the first run)
    b = random_codes(rng, "fp4_e2m1", (K, M))
    case = Case(M, "fp8_e4m3", "fp4_e2m1", a=a, b=b, seed=12)
    D, _ = case.run()
    assert np.isnan(D[2]).all() and np.isfinite(np.delete(D, 2, axis=0)).all()
    assert case.matches(D)

    a = random_codes(rng, "fp8_e5m2", (M, K))
    a[4, K - 3] = 0x7C  # e5m2 +inf
    b = np.full((K, M), 0x2, np.uint8)  # fp4 +1.0 everywhere ...
    b[K - 3, 6] = 0x0  # ... except a zero under the inf: inf * 0 = NaN in column 6
    case = Case(M, "fp8_e5m2", "fp4_e2m1", a=a, b=b, seed=13)
    D, _ = case.run()
    assert np.isnan(D[4, 6]) and np.isposinf(np.delete(D[4], 6)).all()
    assert np.isfinite(np.delete(D, 4, axis=0)).all()
    assert case.matches(D)


CONST = """
      %sa = llvm.mlir.constant({a} : i32) : i32
      %sb = llvm.mlir.constant({b} : i32) : i32"""


@pytest.mark.parametrize("M", [16, 32])
def test_constant_zero_scales_are_reported_and_run_unscaled(M):
    """FlyDSL 0.5.0's LLVM turns mfma.scale with constant-0 scales into the unscaled
    v_mfma_*_f8f6f4 (checked on its gfx950 ISA), i.e. factor 1, not 2^-127 * 2^-127."""
    K = SHAPES[M]
    case = Case(M, "fp8_e4m3", "fp8_e4m3", sa=np.full((M, K // 32), 127), sb=np.full((M, K // 32), 127), seed=3)
    D, rep = case.run(scales=CONST.format(a=0, b=0))
    assert kinds(rep) == [mfma_mod.SCALED_MFMA_CONSTANT_SCALE] and rep.ok
    assert "unscaled" in rep.findings[0].message
    assert case.matches(D)  # == the scale-1.0 product


def test_constant_nonzero_scale_is_reported_with_the_bits_an_sgpr_would_give():
    M, K = 16, 128
    case = Case(M, "fp8_e4m3", "fp8_e4m3", sa=np.full((M, 4), 127), sb=np.full((M, 4), 127), seed=4)
    D, rep = case.run(scales=CONST.format(a=0x7F7F7F7F, b=0x7F7F7F7F))
    assert kinds(rep) == [mfma_mod.SCALED_MFMA_CONSTANT_SCALE] and rep.ok
    msg = rep.findings[0].message
    assert "bits [30:23] = 0xfe" in msg and "#158117" in msg  # 0x7F7F7F7F as an SGPR would be 2^127
    assert case.matches(D)


# ---- planted bugs: each wrong model must fail at least one of the checks above -------------------

_REAL_LAYOUT = mfma_mod.scaled_mfma_operand_layout
_REAL_SCALE_BYTES = mfma_mod.scale_bytes


def _old_flydsl_atom_order(m, k, bits):
    """FlyDSL 0.5.0 MFMA_Scale atom (and this emulator before): 32 consecutive k for every format."""
    lane = np.arange(64)[:, None]
    j = np.arange(32)[None, :]
    return np.broadcast_to(lane % m, (64, 32)), 32 * (lane // m) + j


def _fp8_runs_in_wrong_order(m, k, bits):
    idx, kk = _REAL_LAYOUT(m, k, bits)
    if bits != 8:
        return idx, kk
    j = np.arange(32)[None, :]
    return idx, np.where(j < 16, kk + k // 2, kk - k // 2)


def _fp8_order_for_every_format(m, k, bits):
    return _REAL_LAYOUT(m, k, 8)


def _scale_lanes_transposed(m, k):
    i = np.arange(m)[:, None]
    b = np.arange(k // 32)[None, :]
    return (i * (k // 32) + b) % 64


def _scale_lanes_of_own_data_lane_group_for_fp8(m, k):
    # lane m*b + i holds its scale; a model that takes the scale of the lane group holding
    # the first run of block b instead (block b -> group (2b) % G) for 16x16x128
    i = np.arange(m)[:, None]
    b = np.arange(k // 32)[None, :]
    return m * ((2 * b) % (64 // m)) + i


PLANTED = {
    "old_flydsl_atom_order": ("scaled_mfma_operand_layout", _old_flydsl_atom_order),
    "fp8_runs_swapped": ("scaled_mfma_operand_layout", _fp8_runs_in_wrong_order),
    "fp8_order_for_fp4_and_fp6": ("scaled_mfma_operand_layout", _fp8_order_for_every_format),
    "scale_lanes_transposed": ("scaled_mfma_scale_lanes", _scale_lanes_transposed),
    "scale_from_data_lane_group": ("scaled_mfma_scale_lanes", _scale_lanes_of_own_data_lane_group_for_fp8),
    "opsel_ignored": ("scale_bytes", lambda s, opsel: _REAL_SCALE_BYTES(s, 0)),
    "nan_scale_decoded_as_2^128": ("decode_e8m0", lambda c: np.ldexp(1.0, c.astype(np.int64) - 127)),
}


def _checks():
    """A compact version of the suite above: (name, runs-and-returns-ok)."""
    out = []
    for M in (16, 32):
        for fa, fb in [("fp8_e4m3", "fp8_e4m3"), ("fp8_e4m3", "fp4_e2m1"), ("fp4_e2m1", "fp4_e2m1"), ("fp6_e2m3", "fp4_e2m1")]:
            case = Case(M, fa, fb, opsel_a=1, opsel_b=2, seed=M + len(fa) + 3 * len(fb))
            out.append((f"{M} {fa}x{fb}", case))
        K = SHAPES[M]
        sa = np.full((M, K // 32), 127)
        sa[3, 1] = 0xFF
        out.append((f"{M} nan scale", Case(M, "fp4_e2m1", "fp4_e2m1", opsel_a=2, sa=sa, seed=9)))
    return out


def test_hardware_model_passes_the_planted_bug_checks():
    for name, case in _checks():
        D, _ = case.run()
        assert case.matches(D), name


@pytest.mark.parametrize("bug", list(PLANTED))
def test_planted_wrong_semantics_are_caught(bug, monkeypatch):
    attr, fn = PLANTED[bug]
    monkeypatch.setattr(mfma_mod, attr, fn)
    failed = []
    for name, case in _checks():
        D, _ = case.run()
        if not case.matches(D):
            failed.append(name)
    assert failed, f"planted bug {bug!r} went unnoticed"
    if bug == "old_flydsl_atom_order":
        # the old order is exactly right for FP4/FP6 and wrong for every case with an FP8 operand
        assert sorted(failed) == sorted(n for n, _ in _checks() if "fp8" in n)


# ---- [ck] AMD Composable Kernel's gfx950 MX-MFMA test: FP6 / FP8 lanes under K-varying scales ----
#
# For operands of one format on both sides a K permutation shared by A and B does not change
# A @ B; what makes the per-lane K order observable is a scale that differs between the K
# blocks of a row (or a mixed format pair). [ck]'s MXFP6/MXFP8 tests use exactly that (a
# random E8M0 per (row, block)), so these cases pin the FP6 order and the 32x32x64 FP8 order.


def _ck_regs(mat, fmt, M, operand):
    """[ck] load_A_row_major / load_B_col_major: lane t starts at k = (t / M) * chunk_size and
    loads num_chunks runs of chunk_size consecutive k, run c starting c * chunk_size * 64 / M
    further on; FP8/BF8: 2 runs of 16, FP4 and FP6/BF6 (packed types): 1 run of 32. Register
    value v is the v-th element loaded."""
    chunk, runs = (32, 1) if FMT_BITS[fmt] < 8 else (16, 2)
    offset = chunk * 64 // M
    regs = np.zeros((64, 32), np.uint8)
    for t in range(64):
        for c in range(runs):
            for i in range(chunk):
                k = (t // M) * chunk + c * offset + i
                regs[t, c * chunk + i] = mat[t % M, k] if operand == "A" else mat[k, t % M]
    return regs


def _ck_f6_pk_dwords(regs):
    """[ck] f6_pk_t<.., 32>::pack: value i goes to bit (6 i) % 32 of dword 6 i / 32, its high
    bits spilling into the next dword; 6 dwords per lane."""
    out = np.zeros((64, 6), np.uint64)
    for t in range(64):
        for i in range(32):
            pos = 6 * i
            bits = np.uint64(int(regs[t, i]) & 0x3F) << np.uint64(pos % 32)
            out[t, pos // 32] |= bits & np.uint64(0xFFFFFFFF)
            if pos % 32 > 26:
                out[t, pos // 32 + 1] |= bits >> np.uint64(32)
    return out.astype(np.uint32)


def _ck_scale_operand(codes, M):
    """[ck] load_mx_A_row_major / load_mx_B_col_major: lane t passes the E8M0 of row (A) /
    column (B) t % M, K block t / M, as the low byte (opsel 0) of its scale operand."""
    t = np.arange(64)
    return codes[t % M, t // M].astype(np.int32)


def _k_varying_scales(rng, M, K):
    """Per row/column a different E8M0 exponent in every K block (2^-6 .. 2^5)."""
    nblk = K // 32
    order = np.argsort(rng.random((M, nblk)), axis=1)
    return 121 + 3 * order + rng.integers(0, 3, (M, 1))


class CKCase(Case):
    """Registers, scale operands and K-varying scales as in [ck]'s MX-MFMA test."""

    lane_regs = staticmethod(_ck_regs)

    def __init__(self, M, fa, fb, seed):
        rng = np.random.default_rng(seed)
        K = SHAPES[M]
        super().__init__(M, fa, fb, seed=seed, sa=_k_varying_scales(rng, M, K), sb=_k_varying_scales(rng, M, K))
        self.sa_lanes, self.sb_lanes = _ck_scale_operand(self.sa, M), _ck_scale_operand(self.sb, M)


# [ck] tests each format against itself; a mixed pair takes each operand's table for its own
# cbsz / blgp format ([blog]: "FP4, FP6 or FP8 can be used independently for A and B").
CK_PAIRS = [
    ("fp6_e2m3", "fp6_e2m3"),
    ("fp6_e3m2", "fp6_e3m2"),
    ("fp6_e2m3", "fp6_e3m2"),
    ("fp8_e4m3", "fp8_e4m3"),
    ("fp8_e5m2", "fp8_e5m2"),
    ("fp8_e4m3", "fp6_e2m3"),
    ("fp6_e3m2", "fp8_e5m2"),
    ("fp6_e2m3", "fp4_e2m1"),
    ("fp4_e2m1", "fp4_e2m1"),
]


def _ck_cases():
    return [(f"{M} {fa}x{fb}", CKCase(M, fa, fb, seed=100 + 7 * M + i)) for M in (16, 32) for i, (fa, fb) in enumerate(CK_PAIRS)]


@pytest.mark.parametrize("M", [16, 32])
@pytest.mark.parametrize("fa, fb", CK_PAIRS)
def test_fp6_and_fp8_lanes_under_k_varying_scales_match_ck(M, fa, fb):
    """[ck] register tables for v_mfma_scale_f32_{16x16x128,32x32x64}_f8f6f4: FP6/BF6 lane t
    holds k = 32 (t / M) .. +31 (VGPRs 0-2 the first 16, VGPRs 3-5 the next 16, 6-bit fields
    LSB first), FP8/BF8 two runs of 16 (k = 16 (t / M) + i and K/2 further on), every row's K
    blocks scaled differently, scale of row/col t % M, block t / M in lane t."""
    case = CKCase(M, fa, fb, seed=100 + 7 * M + CK_PAIRS.index((fa, fb)))
    for fmt, mat, op in ((fa, case.a, "A"), (fb, case.b, "B")):
        if FMT_BITS[fmt] == 6:  # the image the emulator gets is f6_pk_t's
            regs = _ck_regs(mat, fmt, M, op)
            assert np.array_equal(pack(regs, 6), _ck_f6_pk_dwords(regs).view(np.uint8))
    D, rep = case.run()
    assert rep.findings == []
    assert case.matches(D), f"max |err| {np.nanmax(np.abs(D - case.expect))}"


def _fp8_32x32x64_in_fp4_order(m, k, bits):
    """Issue 23 item 12's description: 32x32x64 FP8 with the FP4 order (32 consecutive k)."""
    return _old_flydsl_atom_order(m, k, bits) if (m, bits) == (32, 8) else _REAL_LAYOUT(m, k, bits)


def _fp6_in_fp8_two_runs(m, k, bits):
    """Triton's chooseScaledMfmaScaleLayout comment read literally ("for mxfp6/mxfp8, there are
    2 16-consecutive elements blocks, so 2 scale elements are required"): FP6 as FP8."""
    return _REAL_LAYOUT(m, k, 8 if bits == 6 else bits)


@pytest.mark.parametrize(
    "model, fails",
    [
        (_fp8_32x32x64_in_fp4_order, lambda name: name.startswith("32 ") and "fp8" in name),
        (_fp6_in_fp8_two_runs, lambda name: "fp6" in name),
    ],
    ids=["fp8_32x32x64_in_fp4_order", "fp6_in_fp8_two_runs"],
)
def test_models_that_contradict_ck_fail_exactly_their_cases(model, fails, monkeypatch):
    monkeypatch.setattr(mfma_mod, "scaled_mfma_operand_layout", model)
    cases = _ck_cases()
    failed = sorted(name for name, case in cases if not case.matches(case.run()[0]))
    assert failed == sorted(name for name, _ in cases if fails(name))
