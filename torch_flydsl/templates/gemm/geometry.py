"""The tile geometry the GEMM kernel pieces share: the 16-bit units their LDS tiles and DMA
vectors are counted in, the MFMA block of ``mma.Mma``, and the epilogue's C tile row in LDS.

bf16/fp16 elements are such units; the scaled kernels move and address their byte tiles as
16-bit units too. Cheap to import: no FlyDSL (config modules read it).
"""

from .limits import DMA_BYTES

UNIT_BYTES = 2
VEC = DMA_BYTES // UNIT_BYTES  # units per 16-byte DMA vector
MMA_M, MMA_N, MMA_K = 16, 16, 32  # v_mfma_f32_16x16x32_{bf16,f16}


def c_lds_row_stride(block_n: int) -> int:
    """Row stride (elements) of the epilogue's C tile in LDS: padded by one 16-byte vector so
    the four row groups of an MFMA output block land in different banks."""
    return block_n + VEC
