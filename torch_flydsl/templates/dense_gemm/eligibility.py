"""Can the dense GEMM family take this problem at all? (Per-config fit is ``config_fits``.)

Inputs are ``TensorMeta`` descriptions, so Inductor lowering, eager code and the CLI share one
set of rules. Every "no" is a ``Decline`` whose reason a user can read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Union

import torch

from ..base import ALIGN_BYTES, BUFFER_SPAN_LIMIT, INT32_MAX, Decline, TensorMeta, check_aligned, check_span, dtype_name
from ..gemm.majors import leading_stride, major_of
from .problem import BiasKind, GemmProblem

if TYPE_CHECKING:
    from .problem import DynamicM

DTYPES = (torch.bfloat16, torch.float16)
K_VECTOR = 8  # elements per 16-byte load: a K-contiguous operand's vectors must not straddle K
K_TILE_MULTIPLE = 128  # the largest block_k: K a multiple of it never has a K tail


def _check_ends_on_a_dword(name: str, t: TensorMeta, contig_dim: str, size: int) -> Optional[Decline]:
    """An operand contiguous along M (A) or N (B) is loaded in 16-byte vectors that may run
    past its last element; the buffer unit zero-fills the dwords past the operand's span
    (range-checked per dword), which is exact only if the span ends on a dword boundary.
    Otherwise the dword holding the last element straddles the end: zeroed, it loses that
    element; fetched, it reads bytes past the tensor. Neither is acceptable, so decline."""
    if t.byte_span() % 4:
        return Decline(
            "shape",
            f"{name} is contiguous along {contig_dim} and {contig_dim}={size} is odd, so it ends "
            "in the middle of a 4-byte dword: the kernel's 16-byte loads are range-checked per "
            "dword and could not read its last element without reading past the tensor",
        )
    return None


def check_tensors(a, b, out, bias=None) -> Union[GemmProblem, Decline]:
    """``check_problem`` for real (or meta / CPU stand-in) tensors."""
    return check_problem(TensorMeta.of(a), TensorMeta.of(b), TensorMeta.of(out), TensorMeta.of_optional(bias))


def check_problem(
    a: TensorMeta,
    b: TensorMeta,
    out: TensorMeta,
    bias: Optional[TensorMeta] = None,
    *,
    out_dtype: Optional[torch.dtype] = None,
) -> Union[GemmProblem, Decline]:
    """The ``GemmProblem`` these operands pose, or why the family declines them."""
    if len(a.shape) != 2 or len(b.shape) != 2 or len(out.shape) != 2:
        return Decline("shape", "only 2-D operands (mm/addmm) are supported")
    (m, k), (k2, n) = a.shape, b.shape
    if k != k2 or tuple(out.shape) != (m, n):
        return Decline("shape", f"inconsistent shapes A{list(a.shape)} B{list(b.shape)} out{list(out.shape)}")
    if min(m, n, k) <= 0:
        return Decline("shape", f"empty problem M={m} N={n} K={k}")
    if max(m, n, k) > INT32_MAX:
        return Decline("shape", "a dimension exceeds int32")
    if out_dtype is not None and out_dtype != a.dtype:
        return Decline("dtype", f"out_dtype={dtype_name(out_dtype)} differs from the input dtype; not supported")
    if a.dtype not in DTYPES:
        return Decline("dtype", f"input dtype {dtype_name(a.dtype)} is not bfloat16 or float16")
    if b.dtype != a.dtype or out.dtype != a.dtype:
        return Decline("dtype", f"mixed dtypes A={dtype_name(a.dtype)} B={dtype_name(b.dtype)} out={dtype_name(out.dtype)}")

    a_major, b_major, out_major = major_of(a), major_of(b), major_of(out)
    if a_major is None:
        return Decline("layout", f"A strides {a.stride} are neither row- nor column-major")
    if b_major is None:
        return Decline("layout", f"B strides {b.stride} are neither row- nor column-major")
    if out_major != "row" or (out.stride[1] != 1 and n > 1):
        return Decline("layout", f"output strides {out.stride} are not row-major")

    if k % K_VECTOR and (a_major == "row" or b_major == "col"):
        which = "A is row-major" if a_major == "row" else "B is column-major"
        return Decline(
            "shape",
            f"K={k} is not a multiple of {K_VECTOR} and {which} (contiguous along K): its 16-byte "
            "loads would straddle K, reading elements past it that the K tail cannot mask",
        )
    for name, t, lead in (
        ("A", a, leading_stride(a, a_major)),
        ("B", b, leading_stride(b, b_major)),
        ("output", out, out.stride[0]),
    ):
        d = check_aligned(name, t, lead) or check_span(name, t)
        if d:
            return d
    if k % K_TILE_MULTIPLE:
        for name, t in (("A", a), ("B", b)):
            if t.byte_span() > BUFFER_SPAN_LIMIT - 2 * ALIGN_BYTES:
                # The masked K tail points its DMAs at the span's end (out of range: zeros);
                # that offset plus a 16-byte access must not wrap the 32-bit buffer offset.
                return Decline("size", f"{name} spans {t.byte_span()} bytes: with a K tail (K={k}) it must "
                                       f"stay {2 * ALIGN_BYTES} bytes under 4 GiB")
    if a_major == "col":
        d = _check_ends_on_a_dword("A", a, "M", m)
        if d:
            return d
    if b_major == "row":
        d = _check_ends_on_a_dword("B", b, "N", n)
        if d:
            return d

    bias_kind: BiasKind = None
    if bias is not None:
        if bias.dtype != a.dtype:
            return Decline("dtype", f"bias dtype {dtype_name(bias.dtype)} differs from the inputs")
        row_vector = (len(bias.shape) == 1 and bias.shape[0] == n and (bias.stride[0] == 1 or n == 1)) or (
            len(bias.shape) == 2 and tuple(bias.shape) == (m, n) and (bias.stride[0] == 0 or m == 1) and (bias.stride[1] == 1 or n == 1)
        )
        if not row_vector:
            return Decline("layout", f"bias shape {list(bias.shape)} strides {bias.stride}: only a per-column vector ([N], or [M, N] expanded with stride (0, 1)) is supported")
        d = check_aligned("bias", bias, None) or check_span("bias", bias)
        if d:
            return d
        bias_kind = "row"
    return GemmProblem(m, n, k, a.dtype, a_major, b_major, bias_kind)


# -- M known only at run time (torch.compile dynamic shapes) ---------------------------------
#
# Sizes, strides and offsets of the operands may then be symbolic expressions (sympy, from the
# compiler) besides ints. The family does no symbolic algebra itself: ``facts`` answers for it,
# for every value the symbols can take (never just the hint), with
#   hint(x) -> int                 the compiler's size hint of x (what autotuning times)
#   multiple_of(x, d) -> bool      True only when x is provably a multiple of d
#   geq(x, y) -> bool              True only when x >= y provably
#   bounds(x) -> (int, int | None) lower and upper bound of x (None: unbounded)


def _static(x) -> bool:
    return isinstance(x, int)


def _at_hint(t: TensorMeta, facts) -> TensorMeta:
    return t.replace(shape=tuple(map(facts.hint, t.shape)), stride=tuple(map(facts.hint, t.stride)),
                     offset=facts.hint(t.offset))


def _major_for_every_m(name: str, t: TensorMeta, major: str, facts) -> Optional[Decline]:
    """``t`` keeps the ``major`` it has at the hint for every M: unit stride along its inner
    dimension (or an inner extent of 1) and a leading stride no smaller than that extent."""
    (rows, cols), (s0, s1) = t.shape, t.stride
    unit, lead, inner, outer = (s1, s0, cols, rows) if major == "row" else (s0, s1, rows, cols)
    if (unit == 1 or inner == 1) and (outer == 1 or facts.geq(lead, inner)):
        return None
    return Decline("layout", f"{name} strides {t.stride} for shape {list(t.shape)} are {major}-major at the size "
                             "hint but not provably for every size")


def _aligned_for_every_m(name: str, t: TensorMeta, lead, facts) -> Optional[Decline]:
    """``check_aligned`` for every M: proven, not sampled at the hint."""
    from ..base import ALIGN_BYTES

    if not facts.multiple_of(t.offset * t.itemsize, ALIGN_BYTES):
        return Decline("alignment", f"{name} starts {t.offset} elements into its storage, which is not provably "
                                    f"on a {ALIGN_BYTES}-byte boundary for every size")
    if lead is not None and not facts.multiple_of(lead * t.itemsize, ALIGN_BYTES):
        return Decline("alignment", f"{name}'s leading stride {lead} is not provably a multiple of {ALIGN_BYTES} "
                                    "bytes for every size (one compiled kernel serves them all)")
    return None


def _ends_on_a_dword_for_every_m(name: str, t: TensorMeta, contig_dim: str, facts) -> Optional[Decline]:
    """``_check_ends_on_a_dword`` for every M (sizes and strides are non-negative)."""
    span = (sum((n - 1) * s for n, s in zip(t.shape, t.stride)) + 1) * t.itemsize
    if facts.multiple_of(span, 4):
        return None
    return Decline("shape", f"{name} is contiguous along {contig_dim} and its span of {span} bytes does not provably "
                            "end on a 4-byte dword for every size: the kernel's 16-byte loads are range-checked "
                            "per dword and could not read its last element without reading past the tensor")


def check_problem_for_every_m(a: TensorMeta, b: TensorMeta, out: TensorMeta, bias: Optional[TensorMeta] = None, *,
                              facts) -> Union["DynamicM", GemmProblem, Decline]:
    """``check_problem`` for operands whose M (and strides or offsets built from it) is symbolic.

    The rules are ``check_problem``'s, evaluated at the size hint, plus proofs that the layout
    and alignment facts the kernel relies on hold for every M. Limits that no proof can give for
    an unbounded M (a span under 4 GiB, M within int32) are re-checked by the custom op on every
    call, which computes PyTorch's result for operands past them. N and K must be static: they
    decide which configs fit (K tiles) and what the alignment proofs can rely on.
    """
    from .problem import DynamicM

    if len(a.shape) != 2 or len(b.shape) != 2 or len(out.shape) != 2:
        return Decline("shape", "only 2-D operands (mm/addmm) are supported")
    m = a.shape[0]
    varying = []
    for dim, sizes in (("K", (a.shape[1], b.shape[0])), ("N", (b.shape[1], out.shape[1]))):
        symbolic = [s for s in sizes if not _static(s)]
        if symbolic:
            varying.append(f"{dim}={symbolic[0]}")
    if varying:
        return Decline("shape", f"symbolic {' and '.join(varying)}: FlyDSL serves a size that varies at run time "
                                "only for M (N and K decide which configs fit and what the alignment proofs rest on)")
    if not (facts.geq(out.shape[0], m) and facts.geq(m, out.shape[0])):
        return Decline("shape", f"the output has {out.shape[0]} rows and A has {m}")

    a_hint = _at_hint(a, facts)
    problem = check_problem(a_hint, _at_hint(b, facts), _at_hint(out, facts),
                            None if bias is None else _at_hint(bias, facts))
    if isinstance(problem, Decline):
        if _static(m):
            return problem
        return Decline(problem.category, f"{problem.reason} (at the size hint M={a_hint.shape[0]})")
    checks = [("A", a, problem.a_major), ("B", b, problem.b_major), ("output", out, "row")]
    for name, t, major in checks:
        d = _major_for_every_m(name, t, major, facts) or _aligned_for_every_m(name, t, leading_stride(t, major), facts)
        if d:
            return d
    if problem.a_major == "col":
        d = _ends_on_a_dword_for_every_m("A", a, "M", facts)
        if d:
            return d
    if problem.b_major == "row":
        d = _ends_on_a_dword_for_every_m("B", b, "N", facts)
        if d:
            return d
    if bias is not None:
        # The kernel reads one bias row: a [N] vector, or [M, N] expanded with a row stride of 0.
        if not all(map(_static, bias.stride)) or (len(bias.shape) == 2 and bias.stride[0] != 0):
            return Decline("layout", f"bias strides {bias.stride}: only a per-column vector ([N], or [M, N] "
                                     "expanded with stride (0, 1)) is supported")
        d = _aligned_for_every_m("bias", bias, None, facts)
        if d:
            return d
    if _static(m):
        return problem  # only strides or offsets were symbolic, and they are proven
    low, high = facts.bounds(m)
    return DynamicM(problem, str(m), max(1, low), min(INT32_MAX, INT32_MAX if high is None else high))
