"""``emulate()``: compile a FlyDSL jit function for gfx950 and run it on the CPU tensors passed."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, List, Optional, Sequence, Tuple

from .capture import capture
from .checker import Findings
from .executor import EmulationReport, compiled_program, run_host, run_launch
from .memory import GlobalMemory, tensor_span

if TYPE_CHECKING:  # torch is imported where it is used
    import torch


def _collect_tensors(obj, out, depth=0):
    import torch

    if depth > 6:
        return
    if isinstance(obj, torch.Tensor):
        out.append(obj)
        return
    for attr in ("torch_tensor", "dltensor"):
        inner = getattr(obj, attr, None)
        if isinstance(inner, torch.Tensor):
            out.append(inner)
            return
    if isinstance(obj, (list, tuple)):
        for x in obj:
            _collect_tensors(x, out, depth + 1)
    elif isinstance(obj, dict):
        for x in obj.values():
            _collect_tensors(x, out, depth + 1)
    else:
        try:
            from flydsl.expr.struct import _runtime_fields, is_struct_type

            if is_struct_type(type(obj)):
                for _name, v in _runtime_fields(obj):
                    _collect_tensors(v, out, depth + 1)
        except Exception:
            pass


def emulate(
    jit_fn,
    args: Sequence[Any],
    kwargs: Optional[dict] = None,
    *,
    check: bool = True,
    tensors: Iterable = (),
    workgroups: Optional[Iterable[Tuple[int, int, int]]] = None,
    grid: Optional[Tuple[int, int, int]] = None,
    track_writers: bool = False,
) -> EmulationReport:
    """Run ``jit_fn(*args, **kwargs)`` on the CPU with gfx950 semantics.

    The jit function is compiled for gfx950 (never launched); its host code is interpreted to
    find the kernel launches (grid, block, dynamic LDS) and each launch is emulated, writing
    results into the CPU tensors in ``args``. Every tensor reachable from ``args`` (plus
    ``tensors``) is valid global memory; other accesses are reported out of bounds.
    ``workgroups`` restricts execution to some workgroup ids (for speed); ``grid`` overrides
    the grid the host code computed (the block size is fixed at compile time). With ``check`` the
    LDS race / async-wait / uninitialized-read checker runs as well. With ``track_writers``
    global memory remembers which workgroup wrote each byte: ``report.writers_of(tensor)``.
    """
    kwargs = dict(kwargs or {})
    for t in list(args) + list(kwargs.values()) + list(tensors):
        import torch

        if isinstance(t, torch.Tensor) and t.device.type != "cpu":
            raise ValueError("emulate() runs on CPU tensors only")
    captured = capture(jit_fn, *args, **kwargs)
    found: List[torch.Tensor] = []
    _collect_tensors(list(args) + list(kwargs.values()) + list(tensors), found)
    spans = []
    for i, t in enumerate(found):
        s, e = tensor_span(t)
        spans.append((s, e, f"tensor{i}{tuple(t.shape)}"))
    mem = GlobalMemory(spans, track_writers=track_writers)
    cp = compiled_program(captured)
    findings = Findings()
    report = EmulationReport(memory=mem if track_writers else None)
    for launch in run_host(cp, captured.slots):
        if grid is not None:
            launch["grid"] = tuple(int(g) for g in grid)
        report.launches.append(run_launch(cp, launch, mem, findings, check=check, workgroups=workgroups))
    report.findings = findings.all()
    return report


def run_kernel_ir(
    module_asm: str,
    kernel: str,
    args: Sequence[Any],
    *,
    grid=(1, 1, 1),
    block=(64, 1, 1),
    dynamic_smem: int = 0,
    tensors: Iterable = (),
    check: bool = True,
    workgroups=None,
):
    """Run one ``gpu.func`` of a hand-written (or dumped) module at the emulated IR stage.

    ``args`` follow the kernel signature: a torch tensor for a pointer argument (its address),
    Python numbers for scalars. Meant for op-level tests and for replaying IR dumps.
    """
    import numpy as np
    import torch

    from .executor import CompiledProgram

    cp = CompiledProgram(module_asm, None)
    if kernel not in cp.kernels:
        raise KeyError(f"kernel {kernel!r} not in module: {list(cp.kernels)}")
    plan = cp.kernels[kernel]
    values, found = [], []
    for t, a in zip(plan.func.body.arg_types, args):
        if isinstance(a, torch.Tensor):
            found.append(a)
            values.append(np.array([a.data_ptr()], np.int64))
        elif t.kind == "ptr":
            values.append(np.array([int(a)], np.int64))
        else:
            values.append(np.array([a], dtype=t.np_dtype))
    _collect_tensors(list(tensors), found)
    mem = GlobalMemory([(*tensor_span(t), f"tensor{i}") for i, t in enumerate(found)])
    findings = Findings()
    report = EmulationReport()
    launch = dict(kernel=kernel, grid=tuple(grid), block=tuple(block), dynamic_smem=dynamic_smem, args=values)
    report.launches.append(run_launch(cp, launch, mem, findings, check=check, workgroups=workgroups))
    report.findings = findings.all()
    return report


def emulate_checked(jit_fn, args: Sequence[Any], what: str, **kwargs: Any) -> EmulationReport:
    """``emulate(jit_fn, args, **kwargs)``, raising ``EmulatorError`` (naming ``what``, e.g. a
    family and config key) when the checker reports a race or an out-of-bounds access: a kernel
    that is wrong on some hardware timing must not look right here. Every family's emulator
    executor runs its kernel through this."""
    from .errors import EmulatorError

    report = emulate(jit_fn, args, **kwargs)
    if not report.ok:
        raise EmulatorError(f"{what}: {report}")
    return report
