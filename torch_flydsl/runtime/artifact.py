"""Read a compiled FlyDSL module's per-kernel resources without ISA parsing or a GPU.

The compiled module text carries ``#gpu.kernel_metadata<"name", ..., metadata = {...}>`` for
every kernel in its ``gpu.binary``; that is enough for spills, scratch, LDS and occupancy.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# gfx950 (CDNA4) limits used for occupancy estimates.
LDS_BYTES_PER_CU = 160 * 1024
SIMDS_PER_CU = 4
MAX_WAVES_PER_SIMD = 8
UNIFIED_VGPRS_PER_LANE = 512
VGPR_GRANULE = 8
WAVE_SIZE = 64

_META_RE = re.compile(r'#gpu\.kernel_metadata<"(?P<name>[^"]+)"(?P<body>.*?)metadata = \{(?P<meta>[^}]*)\}')
_FIELD_RE = re.compile(r"(\w+) = (array<[^>]*>|-?\d+)")


@dataclass(frozen=True)
class KernelResources:
    name: str
    vgpr: int  # unified count (arch VGPRs + AGPRs)
    agpr: int
    sgpr: int
    vgpr_spill: int
    sgpr_spill: int
    lds_bytes: int  # static LDS (group segment)
    scratch_bytes: int  # private segment per lane
    max_workgroup_size: int
    wavefront_size: int

    @property
    def spills(self) -> int:
        return self.vgpr_spill + self.sgpr_spill

    def waves_per_simd(self, threads_per_block: int, dynamic_lds: int = 0) -> int:
        """Rough occupancy: resident waves per SIMD limited by VGPRs, LDS and the hardware cap."""
        waves_per_block = max(1, -(-threads_per_block // WAVE_SIZE))
        vgprs = max(VGPR_GRANULE, -(-self.vgpr // VGPR_GRANULE) * VGPR_GRANULE)
        by_vgpr = min(MAX_WAVES_PER_SIMD, UNIFIED_VGPRS_PER_LANE // vgprs)
        lds = self.lds_bytes + dynamic_lds
        blocks_by_lds = LDS_BYTES_PER_CU // lds if lds else 10**9
        blocks_by_vgpr = (by_vgpr * SIMDS_PER_CU) // waves_per_block
        blocks = min(blocks_by_lds, blocks_by_vgpr)
        return min(MAX_WAVES_PER_SIMD, blocks * waves_per_block // SIMDS_PER_CU)


def parse_kernel_resources(module_text: str) -> list[KernelResources]:
    out = []
    for m in _META_RE.finditer(module_text):
        f = {k: v for k, v in _FIELD_RE.findall(m.group("meta")) if not v.startswith("array")}
        g = lambda key: int(f.get(key, 0))  # noqa: E731
        out.append(
            KernelResources(
                name=m.group("name"),
                vgpr=g("vgpr_count"),
                agpr=g("agpr_count"),
                sgpr=g("sgpr_count"),
                vgpr_spill=g("vgpr_spill_count"),
                sgpr_spill=g("sgpr_spill_count"),
                lds_bytes=g("group_segment_fixed_size"),
                scratch_bytes=g("private_segment_fixed_size"),
                max_workgroup_size=g("max_flat_workgroup_size"),
                wavefront_size=g("wavefront_size"),
            )
        )
    return out
