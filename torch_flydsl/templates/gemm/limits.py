"""The gfx950 (MI350) numbers the GEMM configs are checked against and the kernels plan for.

Cheap to import: no FlyDSL (config modules and Inductor choice generation read it).
"""

from typing import Optional

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
# A config with this many stages or more is a deep one: it spends LDS on tiles in flight and
# gives up workgroups per CU for it; offered only where the whole grid is resident at once.
DEEP_STAGES = 5


def resident_workgroups(lds_bytes: int, threads: int) -> int:
    """Workgroups one CU holds at once, by LDS and threads (registers may hold fewer; the
    compiled kernel's resources say)."""
    return max(1, min(LDS_PER_CU_BYTES // lds_bytes, THREADS_PER_CU // threads))


def one_round_problem(key: str, workgroups: int, per_cu: int) -> Optional[str]:
    """Why a deep config does not fit ``workgroups`` (None when the whole grid is resident in
    one round of ``NUM_CUS`` CUs holding ``per_cu`` workgroups each)."""
    slots = NUM_CUS * per_cu
    if workgroups <= slots:
        return None
    return (f"{key}: {workgroups} workgroups exceed the {slots} a round of {NUM_CUS} CUs holds ({per_cu} each); "
            "a deep tile trades workgroups per CU for tiles in flight and pays only when the grid fits in one round")
