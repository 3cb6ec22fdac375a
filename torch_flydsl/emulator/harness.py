"""The standard check every kernel family plugs into: run on fresh random inputs in the
emulator and compare against a float64 reference by relative error.

A run passes when (1) the emulator reports no race / async-wait / out-of-bounds / uninitialized
LDS finding, (2) no output element is left unwritten (outputs are pre-filled with NaN, or
with a sentinel for integer outputs), (3) ``max|out - ref| / max|ref|`` over each output
is within the tolerance (a fixed number, or ``BaselineTolerance``: a multiple of a trusted
implementation's own error on the same inputs), and (4) no byte changed outside the logical outputs: every byte of
every input's storage, and of every output's storage outside the output elements the
reference defines, is what it was before the launch (a kernel that writes into an output's
padding, another part of its storage, or an input is wrong even when the numbers match).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch

from .api import emulate
from .executor import EmulationReport
from .memory import element_offsets

INT_SENTINEL = -0x5A5A5A5A


@dataclass(frozen=True)
class BaselineTolerance:
    """A tolerance stated against a trusted implementation (e.g. PyTorch's own op in the same
    dtype) on the same inputs: an output passes when

        max|out - ref| <= factor * max|baseline - ref| + floor * max|ref|

    over the elements the reference defines. ``baseline_fn`` is called after the inputs are
    randomized and returns tensors shaped like the reference's (``nan`` where undefined)."""

    baseline_fn: Callable[[], Union[torch.Tensor, Sequence[torch.Tensor]]]
    factor: float = 2.0
    floor: float = 0.0

    def __str__(self) -> str:
        return f"{self.factor:g} x baseline error + {self.floor:.1e}"


@dataclass
class OutputCheck:
    index: int
    max_abs_err: float
    max_abs_ref: float
    rel_err: float
    unwritten: int
    tolerance: float = 0.0  # relative to max_abs_ref
    baseline_rel_err: Optional[float] = None  # the baseline's own error, with a BaselineTolerance

    @property
    def ok_for(self):
        return lambda tol: self.unwritten == 0 and self.rel_err <= tol


@dataclass
class HarnessReport:
    ok: bool
    tolerance: Union[float, BaselineTolerance]
    outputs: List[OutputCheck] = field(default_factory=list)
    emulation: Optional[EmulationReport] = None
    reasons: List[str] = field(default_factory=list)

    @property
    def max_rel_err(self) -> float:
        return max((o.rel_err for o in self.outputs), default=0.0)

    def __str__(self) -> str:
        head = "PASS" if self.ok else "FAIL"
        lines = [f"{head}: max rel err {self.max_rel_err:.3e} (tolerance {self.tolerance})"]
        for o in self.outputs:
            base = "" if o.baseline_rel_err is None else f", baseline's {o.baseline_rel_err:.3e}"
            lines.append(f"  output {o.index}: rel err {o.rel_err:.3e} (allowed {o.tolerance:.3e}{base})")
        lines += [f"  - {r}" for r in self.reasons]
        if self.emulation is not None:
            lines.append(str(self.emulation))
        return "\n".join(lines)


def fill_random_(t: torch.Tensor, gen: torch.Generator, scale: float = 1.0) -> None:
    """Fresh random values in place (the storage, pointer and strides are kept)."""
    if t.dtype.is_floating_point:
        t.copy_((torch.randn(t.shape, generator=gen, dtype=torch.float32) * scale).to(t.dtype))
    elif t.dtype == torch.bool:
        t.copy_(torch.randint(0, 2, t.shape, generator=gen).bool())
    else:
        t.copy_(torch.randint(-100, 100, t.shape, generator=gen).to(t.dtype))


# NaNs with a payload no arithmetic produces (hardware and numpy return the canonical quiet
# NaN): a kernel that writes a NaN into a poisoned byte still shows up as a change.
_NAN_PAYLOAD = {
    torch.float64: (torch.int64, 0x7FFA5A5A5A5A5A5A),
    torch.float32: (torch.int32, 0x7FDA5A5A),
    torch.float16: (torch.int16, 0x7E5A),
    torch.bfloat16: (torch.int16, 0x7FDA),
}


def poison_(t: torch.Tensor) -> None:
    if t.dtype in _NAN_PAYLOAD:
        as_int, bits = _NAN_PAYLOAD[t.dtype]
        t.view(as_int).fill_(bits)
    elif t.dtype.is_floating_point:
        t.fill_(float("nan"))
    else:
        t.fill_(INT_SENTINEL if t.dtype in (torch.int32, torch.int64) else -1)


def _defined(ref: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Where the reference defines ``out`` (not nan), as a bool mask of ``out``'s shape."""
    if tuple(ref.shape) != tuple(out.shape):
        raise ValueError(f"reference shape {tuple(ref.shape)} differs from output shape {tuple(out.shape)}")
    return ~torch.isnan(ref) if ref.dtype.is_floating_point else torch.ones(out.shape, dtype=torch.bool)


def _as_list(x, n: int, what: str) -> list:
    x = [x] if isinstance(x, torch.Tensor) else list(x)
    if len(x) != n:
        raise ValueError(f"{what} returned {len(x)} tensors for {n} outputs")
    return x


def _max_abs_err(got: torch.Tensor, ref: torch.Tensor, care: torch.Tensor) -> float:
    """max |got - ref| where the reference is defined and ``got`` was written (not nan)."""
    diff = (got - ref).abs()[care & ~torch.isnan(got)]
    return float(diff.max()) if diff.numel() else 0.0


def check_output(i: int, out: torch.Tensor, ref: torch.Tensor, care: torch.Tensor, base, tolerance):
    """Compare one output with its reference where the reference is defined (``care``).

    Infinite reference values must be matched exactly (same sign); the relative error is taken
    over the finite ones. (An infinite reference used to make the error inf/inf = nan, which
    compared as "within tolerance", whatever the kernel wrote.)"""
    ref = ref.detach().to(torch.float64)
    got = out.detach().to(torch.float64)
    reasons = []
    unwritten = int(torch.isnan(got[care]).sum()) if out.dtype.is_floating_point else _unwritten(out)
    at_inf = care & torch.isinf(ref)
    wrong_inf = int((got[at_inf] != ref[at_inf]).sum())
    finite = care & torch.isfinite(ref)
    max_abs_ref = float(ref[finite].abs().max()) if finite.any() else 0.0
    scale = max(max_abs_ref, 1e-30)
    rel = _max_abs_err(got, ref, finite) / scale
    base_rel = None
    if base is None:
        tol = tolerance
    else:
        base_rel = _max_abs_err(base.detach().to(torch.float64), ref, finite) / scale
        tol = tolerance.factor * base_rel + tolerance.floor
    chk = OutputCheck(i, rel * scale, max_abs_ref, rel, unwritten, tol, base_rel)
    if unwritten:
        reasons.append(f"output {i}: {unwritten} element(s) never written")
    if wrong_inf:
        reasons.append(f"output {i}: {wrong_inf} element(s) differ where the reference is +-inf")
    if not rel <= tol:  # also catches a nan error
        reasons.append(f"output {i}: relative error {rel:.3e} exceeds {tol:.3e}")
    return chk, reasons


def _unwritten(t: torch.Tensor) -> int:
    if t.dtype.is_floating_point:
        return int(torch.isnan(t).sum())
    return int((t == INT_SENTINEL).sum()) if t.dtype in (torch.int32, torch.int64) else 0


def _storage_bytes(t: torch.Tensor) -> torch.Tensor:
    """The whole storage under ``t`` as a 1-D uint8 tensor (shares memory)."""
    return torch.empty(0, dtype=torch.uint8).set_(t.untyped_storage())


def _element_bytes(t: torch.Tensor, which: torch.Tensor) -> torch.Tensor:
    """Storage byte indices of the elements of ``t`` selected by the bool mask ``which``."""
    pos = int(t.storage_offset()) + torch.from_numpy(element_offsets(t))  # an int: a concrete tensor
    size = t.element_size()
    return (pos[which].unsqueeze(1) * size + torch.arange(size)).reshape(-1)


class StorageWatch:
    """Snapshots of the storages under the inputs and outputs; ``stray_changes()`` names every
    storage with a changed byte outside the output elements the reference defines."""

    def __init__(self, inputs: Sequence[torch.Tensor], outputs: Sequence[torch.Tensor], defined: Sequence[torch.Tensor]):
        # storage address -> (bytes view, snapshot, may-change mask, names)
        self.storages: Dict[int, Tuple[torch.Tensor, torch.Tensor, torch.Tensor, List[str]]] = {}
        for kind, tensors in (("input", inputs), ("output", outputs)):
            for i, t in enumerate(tensors):
                key = t.untyped_storage().data_ptr()
                if key not in self.storages:
                    raw = _storage_bytes(t)
                    self.storages[key] = (raw, raw.clone(), torch.zeros(raw.shape, dtype=torch.bool), [])
                self.storages[key][3].append(f"{kind} {i}")
        for out, which in zip(outputs, defined):
            self.storages[out.untyped_storage().data_ptr()][2][_element_bytes(out, which)] = True

    def stray_changes(self) -> List[str]:
        found = []
        for raw, before, may_change, names in self.storages.values():
            stray = (raw != before) & ~may_change
            if stray.any():
                msg = f"{' / '.join(names)} storage: {int(stray.sum())} byte(s) changed"
                if any(n.startswith("output") for n in names):
                    msg += " outside the logical output"
                found.append(f"{msg} (first at storage byte {int(stray.nonzero()[0])})")
        return found


def run_and_compare(
    jit_fn,
    args: Sequence[Any],
    reference_fn: Callable[[], Union[torch.Tensor, Sequence[torch.Tensor]]],
    *,
    inputs: Sequence[torch.Tensor],
    outputs: Sequence[torch.Tensor],
    tolerance: Union[float, BaselineTolerance],
    kwargs: Optional[dict] = None,
    seed: int = 0,
    randomize: bool = True,
    input_scale: float = 1.0,
    check: bool = True,
    workgroups=None,
    ignore_findings: Sequence[str] = (),
) -> HarnessReport:
    """Randomize ``inputs`` in place, NaN-poison ``outputs``, emulate ``jit_fn(*args)`` and
    compare each output with ``reference_fn()`` (float64; called after the inputs are set).

    ``args`` must reference ``inputs``/``outputs`` (or views of their storage) so the kernel
    sees the fresh values. The whole storage under each input and output is watched: only
    output elements where the reference is not ``nan`` may change. With ``workgroups`` only
    those workgroups run; compare only what they cover by returning ``nan`` from
    ``reference_fn`` elsewhere (those are skipped, and must stay unwritten).
    ``ignore_findings`` lists checker kinds that do not fail the run (they stay in the report).
    ``tolerance`` bounds ``max|out - ref| / max|ref|`` per output, or is a ``BaselineTolerance``.
    """
    gen = torch.Generator().manual_seed(seed)
    if randomize:
        for t in inputs:
            fill_random_(t, gen, input_scale)
    for t in outputs:
        poison_(t)
    expected = _as_list(reference_fn(), len(outputs), "reference_fn")
    baselines = [None] * len(outputs)
    if isinstance(tolerance, BaselineTolerance):
        baselines = _as_list(tolerance.baseline_fn(), len(outputs), "baseline_fn")
    defined = [_defined(ref, out) for out, ref in zip(outputs, expected)]
    watch = StorageWatch(inputs, outputs, defined)
    emu = emulate(jit_fn, args, kwargs, check=check, tensors=list(inputs) + list(outputs), workgroups=workgroups)
    rep = HarnessReport(ok=True, tolerance=tolerance, emulation=emu)
    for f in emu.errors:
        if f.kind not in ignore_findings:
            rep.reasons.append(str(f))
    rep.reasons += watch.stray_changes()
    for i, (out, ref, care, base) in enumerate(zip(outputs, expected, defined, baselines)):
        chk, reasons = check_output(i, out, ref, care, base, tolerance)
        rep.outputs.append(chk)
        rep.reasons += reasons
    rep.ok = not rep.reasons
    return rep
