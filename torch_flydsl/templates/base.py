"""Vocabulary shared by every kernel family: a decline with a reason, and tensor metadata.

A template family never sees Inductor IR nodes or real tensors when deciding eligibility:
callers describe operands as ``TensorMeta`` (what a layout says), so the same check serves
Inductor lowering, eager dispatch and the ``explain`` CLI.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import cast

import torch

# AMD buffer descriptors address at most 2**32 bytes per resource.
BUFFER_SPAN_LIMIT = 2**32
# Vector loads need 16-byte aligned origins and leading strides.
ALIGN_BYTES = 16
INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class Decline:
    """Why a kernel family (or one config of it) does not take a problem.

    ``category`` is a short machine-readable tag (device, dtype, layout, alignment, shape,
    version, config); ``reason`` is the sentence shown to users.
    """

    category: str
    reason: str

    def __post_init__(self):
        # A decline is what a user reads to learn why FlyDSL was not used: never blank.
        if not isinstance(self.category, str) or not self.category.strip():
            raise ValueError("a Decline needs a category")
        if not isinstance(self.reason, str) or not self.reason.strip():
            raise ValueError(f"a Decline ({self.category}) needs a reason a user can read")

    def __str__(self) -> str:
        return f"[{self.category}] {self.reason}"


@dataclass(frozen=True)
class TensorMeta:
    """Static description of one operand: sizes and strides in elements, offset in elements."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype
    offset: int = 0
    device_type: str = "cuda"

    @classmethod
    def of(cls, t: torch.Tensor) -> "TensorMeta":
        # Real tensors only (eager calls): their offset is an int, never a SymInt.
        return cls(tuple(t.shape), tuple(t.stride()), t.dtype, cast(int, t.storage_offset()), t.device.type)

    @classmethod
    def of_optional(cls, t) -> "TensorMeta | None":
        """``of(t)``, or None for an absent optional operand (a bias)."""
        return None if t is None else cls.of(t)

    @classmethod
    def contiguous(cls, shape, dtype, device_type="cuda", offset=0) -> "TensorMeta":
        stride, acc = [], 1
        for s in reversed(shape):
            stride.append(acc)
            acc *= max(s, 1)
        return cls(tuple(shape), tuple(reversed(stride)), dtype, offset, device_type)

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    def byte_span(self) -> int:
        """Bytes from the tensor's first element to one past its last one."""
        if any(s == 0 for s in self.shape):
            return 0
        last = sum((n - 1) * abs(st) for n, st in zip(self.shape, self.stride))
        return (last + 1) * self.itemsize

    def replace(self, **kw) -> "TensorMeta":
        return dataclasses.replace(self, **kw)


# -- checks every family's eligibility gate shares ------------------------------------------


def dtype_name(d: torch.dtype) -> str:
    return str(d).replace("torch.", "")


def check_aligned(name: str, t: TensorMeta, lead, align: int = ALIGN_BYTES):
    """A Decline unless ``t`` starts on an ``align``-byte boundary and its leading stride
    ``lead`` (elements; None: not checked) keeps rows on one."""
    if (t.offset * t.itemsize) % align:
        return Decline("alignment", f"{name} starts {t.offset} elements into its storage, not on a {align}-byte boundary")
    if lead is not None and (lead * t.itemsize) % align:
        return Decline("alignment", f"{name}'s leading stride {lead} is not a multiple of {align} bytes")
    return None


def check_span(name: str, t: TensorMeta):
    """A Decline when ``t`` spans 4 GiB or more: buffer descriptors carry the exact span in a
    32-bit num_records field."""
    span = t.byte_span()
    if span >= BUFFER_SPAN_LIMIT:
        return Decline("size", f"{name} spans {span} bytes; AMD buffer descriptors address < 4 GiB")
    return None


def split_by_fit(configs, fits) -> tuple[list, list]:
    """``(the configs that fit, [(config, Decline)] for the others)``; ``fits(config)`` returns
    None when the config fits, else the Decline saying why not."""
    fitting, declined = [], []
    for cfg in configs:
        why = fits(cfg)
        if why is None:
            fitting.append(cfg)
        else:
            declined.append((cfg, why))
    return fitting, declined


def pick_by_size(size: float, table, fits, default):
    """The first config that fits among those of the first ``(limit, configs)`` row of
    ``table`` with ``size <= limit``, else ``default``: the one config a family offers with
    autotuning off. ``fits(config)`` is True when the config can take the problem."""
    for limit, configs in table:
        if size <= limit:
            for cfg in configs:
                if fits(cfg):
                    return cfg
    return default


def meta_tensor(t: TensorMeta) -> torch.Tensor:
    """A meta-device tensor with ``t``'s sizes, strides, offset and dtype (nothing allocated):
    what compile-only callers pass where a launch would pass the real operand."""
    span = t.byte_span() // t.itemsize + t.offset
    base = torch.empty(max(span, 1), dtype=t.dtype, device="meta")
    return base.as_strided(t.shape, t.stride, t.offset)
