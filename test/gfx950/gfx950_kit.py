"""What the gfx950 hardware tier shares: the device gate, GEMM cases with their ATen and float64
answers, the accuracy rule, a spy on the launcher, and subprocess runners.

Nothing here touches a GPU at import time: test modules are collected on machines without one.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

import torch

from torch_flydsl.templates.dense_gemm.config import DenseGemmConfig

NEED = "gfx950 tests need an AMD MI350 (gfx950) with a ROCm build of torch"
HERE = Path(__file__).parent
COMPILE_PROBE = HERE.parent / "inductor" / "compile_probe.py"
LAUNCH_PROBE = HERE / "launch_probe.py"


# -- the gate ------------------------------------------------------------------------------


def gfx950_devices() -> tuple[list[torch.device], Optional[str]]:
    """The GPUs this process may launch FlyDSL kernels on, or why there are none.

    Answered from torch's build, device properties and package metadata only: nothing is
    launched (a FlyDSL launch without HIP aborts the process). The caller sets
    ``TORCH_FLYDSL_EXECUTOR=device`` first, since the launch guard reads it.
    """
    from torch_flydsl.runtime import arch, launch_guard, probe

    if torch.version.hip is None:
        return [], f"torch.version.hip is None (torch {torch.__version__} is not a ROCm build)"
    if not probe.hip_runtime_present():
        return [], f"torch.version.hip is {torch.version.hip} but torch.cuda.is_available() is False (no visible GPU)"
    info = probe.flydsl_info()
    if not info.usable:
        return [], f"flydsl: {info.reason}"
    usable, seen = [], []
    for i in range(torch.cuda.device_count()):
        hardware = torch.cuda.get_device_properties(i).gcnArchName.split(":")[0]
        plugin = arch.device_arch(i)  # FLYDSL_GPU_ARCH / HSA_OVERRIDE_GFX_VERSION can differ
        why = launch_guard.device_decline(torch.device("cuda", i))
        if hardware in arch.SUPPORTED_ARCHS and why is None:
            usable.append(torch.device("cuda", i))
        seen.append(f"cuda:{i} is {hardware}" + (f" (compiled for as {plugin})" if plugin != hardware else "")
                    + (f": {why}" if why else ""))
    if not usable:
        return [], "device arch: " + ("; ".join(seen) or "no device") + " (none is a usable gfx950)"
    return usable, None


# -- GEMM cases ----------------------------------------------------------------------------


def _round_up(x: int, to: int) -> int:
    return -(-x // to) * to


def strided(rows: int, cols: int, major: str, dtype, device, pad: int = 0, offset: int = 0, fill=None):
    """A ``rows x cols`` matrix, row- or column-major, whose leading stride is the inner size
    rounded up to 16 bytes plus ``pad`` elements, starting ``offset`` elements into its storage.
    Returns ``(view, storage)``; the storage is random unless ``fill`` is given."""
    inner, outer = (cols, rows) if major == "row" else (rows, cols)
    lead = _round_up(inner, 16 // dtype.itemsize) + pad
    size = offset + lead * (outer - 1) + inner
    base = torch.full((size,), fill, dtype=dtype, device=device) if fill is not None else \
        torch.randn(size, dtype=dtype, device=device)
    stride = (lead, 1) if major == "row" else (1, lead)
    return base.as_strided((rows, cols), stride, offset), base


@dataclass(frozen=True)
class GemmCase:
    m: int
    n: int
    k: int
    layout: str = "nn"  # A then B: n = row-major, t = column-major
    dtype: torch.dtype = torch.bfloat16
    pad: int = 0  # extra elements in every leading stride (A, B and out)
    offset: int = 0  # storage offset of A, B and out, in elements
    bias: str = "none"  # none | vector ([N]) | expanded ([M, N] with strides (0, 1))
    alpha: float = 1.0
    beta: float = 1.0

    def __post_init__(self):
        assert self.bias != "none" or self.alpha == 1.0, "mm has no alpha: give a bias for alpha/beta"

    def operands(self, device, seed: int = 0) -> "Operands":
        torch.manual_seed(seed)
        major = {"n": "row", "t": "col"}
        a, a_base = strided(self.m, self.k, major[self.layout[0]], self.dtype, device, self.pad, self.offset)
        b, b_base = strided(self.k, self.n, major[self.layout[1]], self.dtype, device, self.pad, self.offset)
        out, out_base = strided(self.m, self.n, "row", self.dtype, device, self.pad, self.offset, fill=float("nan"))
        inputs, bias = [a_base, b_base], None
        if self.bias != "none":
            inputs.append(torch.randn(self.n, dtype=self.dtype, device=device))
            bias = inputs[-1] if self.bias == "vector" else inputs[-1].expand(self.m, self.n)
        return Operands(self, a, b, bias, out, inputs, out_base)


@dataclass
class Operands:
    case: GemmCase
    a: torch.Tensor
    b: torch.Tensor
    bias: Optional[torch.Tensor]
    out: torch.Tensor
    inputs: list  # the storages behind a, b and bias: refilled in place for a CUDA graph replay
    out_base: torch.Tensor  # the output's storage: NaN outside the view must stay NaN

    def refill(self, seed: int) -> None:
        g = torch.Generator(device=self.out.device).manual_seed(seed)
        for t in self.inputs:
            t.copy_(torch.randn(t.shape, dtype=t.dtype, device=t.device, generator=g))

    def aten(self) -> torch.Tensor:
        """What PyTorch computes for the same operands in the same dtype on the same device."""
        c = self.case
        if self.bias is None:
            return torch.mm(self.a, self.b)
        return torch.addmm(self.bias.expand(c.m, c.n), self.a, self.b, alpha=c.alpha, beta=c.beta)

    def reference(self) -> torch.Tensor:
        from torch_flydsl.templates.dense_gemm.reference import reference

        c = self.case
        return reference(self.a, self.b, self.bias, c.alpha, c.beta, device=self.out.device)

    def op_bias(self) -> Optional[torch.Tensor]:
        """The bias as Inductor's generated code passes it to the addmm op: [M, N], strides (0, 1)."""
        return None if self.bias is None else self.bias.as_strided((self.case.m, self.case.n), (0, 1))

    def decline(self, cfg: DenseGemmConfig, bias: Optional[torch.Tensor]):
        """The eligibility gate's verdict on these operands with ``bias`` for ``cfg`` (None: the
        kernel takes them)."""
        from torch_flydsl.templates.base import Decline, TensorMeta
        from torch_flydsl.templates.dense_gemm import check_problem, config_fits

        meta = lambda t: None if t is None else TensorMeta.of(t)  # noqa: E731
        problem = check_problem(meta(self.a), meta(self.b), meta(self.out), meta(bias))
        return problem if isinstance(problem, Decline) else config_fits(cfg, problem)


def curated_cases(cfg: DenseGemmConfig, layout: str, dtype) -> dict[str, GemmCase]:
    """Three problems per config: whole tiles; M/N tails with padded strides, a storage offset
    and a bias with alpha/beta; decode-sized M with a bias. Tails are even: the gate declines
    an odd extent along a contiguous dimension (it would end inside a dword), so M=1 is used
    only where A is row-major (M=2 otherwise; an [N] bias expanded to [1, N] is not stride 0)."""
    bm, bn, bk = cfg.block_m, cfg.block_n, cfg.block_k
    base = GemmCase(2 * bm, 2 * bn, 4 * bk, layout, dtype)
    m_decode = 1 if layout[0] == "n" else 2
    return {
        "tiles": base,
        "tails": replace(base, m=2 * bm - 6, n=bn + 6, k=3 * bk, pad=8, offset=8, bias="vector", alpha=0.75, beta=-1.5),
        "decode": replace(base, m=m_decode, n=3 * bn + 6, k=2 * bk, bias="vector" if m_decode == 1 else "expanded"),
    }


def run_flydsl(cfg: DenseGemmConfig, ops: Operands, via: str = "launcher") -> None:
    """Run the FlyDSL kernel on ``ops`` on the current stream: through the launcher, or through
    the custom op that Inductor's generated code calls. Refuses (as a test bug) a problem the
    kernel does not take, rather than launching it."""
    c = ops.case
    bias = ops.bias if via == "launcher" else ops.op_bias()
    why = ops.decline(cfg, bias)
    assert why is None, f"test bug: {cfg.key()} does not take {c}: {why}"
    if via == "launcher":
        from torch_flydsl.templates.dense_gemm import launcher

        launcher.launch(cfg, ops.a, ops.b, ops.out, bias=bias, alpha=c.alpha, beta=c.beta)
    elif bias is None:
        torch.ops.torch_flydsl.dense_mm_out(ops.a, ops.b, cfg=cfg.key(), out=ops.out)
    else:
        torch.ops.torch_flydsl.dense_addmm_out(bias, ops.a, ops.b, alpha=c.alpha, beta=c.beta, cfg=cfg.key(),
                                               out=ops.out)


# -- the accuracy rule ---------------------------------------------------------------------


def assert_as_accurate_as(result: torch.Tensor, baseline: torch.Tensor, ref: torch.Tensor, what: str) -> None:
    """``result`` is at most twice as far from the float64 ``ref`` as PyTorch's own ``baseline``
    (ATen in the same dtype, or the eager model), plus a floor of half an epsilon of the
    largest reference value: a different GEMM rounds differently, but no worse."""
    assert bool(torch.isfinite(result).all()), f"{what}: non-finite values in the result"
    err = (result.double() - ref).abs().max().item()
    base_err = (baseline.double() - ref).abs().max().item()
    floor = torch.finfo(result.dtype).eps / 2 * ref.abs().max().item()
    limit = 2 * base_err + floor
    assert err <= limit, f"{what}: max error {err:.4g} > {limit:.4g} (PyTorch's own error {base_err:.4g})"


def check_gemm(ops: Operands, what: str) -> None:
    """The output matches ATen's accuracy and nothing outside the output view was written."""
    assert_as_accurate_as(ops.out, ops.aten(), ops.reference(), what)
    outside = torch.ones_like(ops.out_base, dtype=torch.bool)
    outside.as_strided(ops.out.shape, ops.out.stride(), ops.out.storage_offset()).fill_(False)
    assert bool(ops.out_base[outside].isnan().all()), f"{what}: wrote outside the output view (padding)"


# -- watching the launcher -----------------------------------------------------------------


@dataclass
class LaunchSpy:
    """Counts kernels that really launched and launches that raised (the op then computes
    PyTorch's result without raising), compiles, and compiles during CUDA-graph capture."""

    launches: int = 0
    failed_launches: int = 0
    compiles: int = 0
    compiles_while_capturing: int = 0


@contextlib.contextmanager
def spy_on_launcher(monkeypatch):
    from torch_flydsl.runtime import kernel_cache
    from torch_flydsl.templates.dense_gemm import launcher

    spy = LaunchSpy()
    launch, first_use = launcher.launch, kernel_cache.first_use

    def counted_launch(*args, **kwargs):
        try:
            result = launch(*args, **kwargs)
        except Exception:
            spy.failed_launches += 1
            raise
        spy.launches += 1
        return result

    def watched_first_use(key, compile_fn, prebuild=None):
        capturing = torch.cuda.is_current_stream_capturing()
        hit, ran_now = first_use(key, compile_fn, prebuild)
        spy.compiles += ran_now
        spy.compiles_while_capturing += ran_now and capturing
        return hit, ran_now

    with monkeypatch.context() as m:
        m.setattr(launcher, "launch", counted_launch)
        m.setattr(kernel_cache, "first_use", watched_first_use)
        yield spy


# -- busy streams --------------------------------------------------------------------------


def keep_busy(stream: torch.cuda.Stream, ms: float) -> None:
    """Enqueue a spin kernel of about ``ms`` milliseconds on ``stream``."""
    probe_cycles = 10_000_000
    with torch.cuda.stream(stream):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(probe_cycles)
        end.record()
        end.synchronize()
        torch.cuda._sleep(int(probe_cycles * ms / max(start.elapsed_time(end), 1e-3)))


# -- subprocesses --------------------------------------------------------------------------


def run_json(script: Path, opts: dict, env: dict, timeout: int = 900) -> dict:
    """Run a probe script in a fresh process; its last stdout line is JSON."""
    r = subprocess.run([sys.executable, str(script), json.dumps(opts)], capture_output=True, text=True,
                       env={**os.environ, **env}, timeout=timeout)
    assert r.returncode == 0, r.stderr[-6000:]
    return json.loads(r.stdout.strip().splitlines()[-1])
