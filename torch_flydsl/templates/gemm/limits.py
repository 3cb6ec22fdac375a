"""The gfx950 (MI350) numbers the GEMM configs are checked against and the kernels plan for.

Cheap to import: no FlyDSL (config modules and Inductor choice generation read it).
"""

WAVE_SIZE = 64
DMA_BYTES = 16  # one async buffer->LDS load moves 16 bytes per lane
LDS_LIMIT_BYTES = 160 * 1024  # gfx950 LDS per workgroup
MAX_THREADS = 1024
MAX_VMCNT = 63  # s_waitcnt vmcnt field on gfx950
NUM_CUS = 256  # MI355X
LDS_PER_CU_BYTES = 160 * 1024  # one CU's LDS, shared by the workgroups resident on it
THREADS_PER_CU = 2048  # 32 waves of 64 lanes (8 per SIMD)
NUM_XCDS = 8  # MI350: workgroups are dispatched round-robin over 8 XCDs (separate L2s)
# Accumulator budget per lane (fp32 registers); beyond this the register allocator spills.
MAX_ACC_REGS_PER_LANE = 128
