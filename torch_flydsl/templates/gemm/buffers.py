"""Global operands as buffer resources whose range is the operand's exact byte span."""

import flydsl.expr as fx
from flydsl.expr import rocdl

from .geometry import UNIT_BYTES


def buffer_of(t, elem_bytes: int = UNIT_BYTES):
    """A buffer view of the 1-D operand ``t`` (``elem_bytes`` per element) whose num_records
    is its exact byte span.

    The buffer unit range-checks every dword of a 16-byte access on its own and zero-fills
    the ones past num_records without fetching them, so a DMA vector that runs past the
    operand's last element reads nothing beyond it. The eligibility gates keep the
    M/N-contiguous operands' spans whole dwords (a dword straddling the end would be zeroed,
    losing the last element).
    """
    n_bytes = fx.Int64(fx.get_scalar(fx.size(fx.get_layout(t)))) * elem_bytes
    return rocdl.make_buffer_tensor(t, num_records_bytes=n_bytes)
