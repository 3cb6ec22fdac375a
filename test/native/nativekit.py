"""Shared pieces of the native-launcher tests: one build of the C++ library per test module,
the stand-in HIP library (plumbing only: it records, it runs nothing), and one launch case per
curated config of the three GEMM families with the operands it fits."""

from __future__ import annotations

import ctypes
import itertools
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import pytest
import torch

HERE = Path(__file__).resolve().parent
STANDIN_SOURCE = HERE / "standin_hip_for_plumbing.c"


def needs_native_build():
    from torch_flydsl.native.build import why_not_buildable

    why = why_not_buildable()
    return pytest.mark.skipif(why is not None, reason=f"native launcher not buildable here: {why}")


class LaunchRecord(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * 256), ("dims", ctypes.c_uint * 6), ("shared", ctypes.c_uint),
                ("stream", ctypes.c_uint64), ("size", ctypes.c_size_t), ("kernarg", ctypes.c_ubyte * 512),
                ("params_given", ctypes.c_int)]


class StandinHip:
    """The stand-in HIP library as the test reads it back (the same dlopen handle the native
    launcher got: TORCH_FLYDSL_HIP_LIBRARY names this file)."""

    def __init__(self, path: Path):
        self.path = path
        self.lib = ctypes.CDLL(str(path))
        self.lib.standin_launch.restype = ctypes.POINTER(LaunchRecord)

    def launches(self) -> int:
        return self.lib.standin_launch_count()

    def module_loads(self) -> int:
        return self.lib.standin_module_loads()

    def launch(self, i: int) -> dict:
        r = self.lib.standin_launch(i).contents
        return {"name": r.name.decode(), "grid": tuple(r.dims[:3]), "block": tuple(r.dims[3:]), "shared": r.shared,
                "stream": r.stream, "kernarg": bytes(r.kernarg[: r.size]), "params_given": bool(r.params_given)}

    def last(self) -> dict:
        return self.launch(self.launches() - 1)


def build_standin_hip(directory: Path) -> StandinHip:
    path = directory / "libstandin_hip_for_plumbing.so"
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-o", str(path), str(STANDIN_SOURCE)], check=True)
    return StandinHip(path)


def build_native_once(tmp_path_factory) -> tuple[Path, StandinHip]:
    """Build the library under a pytest temp dir (``TORCH_FLYDSL_TEST_NATIVE_BUILD``: a directory
    whose build is reused across runs) with the stand-in HIP library as the one it opens (the
    library reads TORCH_FLYDSL_HIP_LIBRARY once, at its first HIP use); (library, stand-in)."""
    import os

    from torch_flydsl.native import build

    root = tmp_path_factory.mktemp("native_build")
    standin = build_standin_hip(root)
    os.environ["TORCH_FLYDSL_HIP_LIBRARY"] = str(standin.path)
    lib = build.build(Path(os.environ.get("TORCH_FLYDSL_TEST_NATIVE_BUILD", root)))
    return lib, standin


# -- one case per curated config --------------------------------------------------------------


@dataclass
class Case:
    family: Any
    cfg: Any
    op: str  # the plugin's custom op
    args: tuple  # positional operands of the custom op
    kwargs: dict  # its keyword operands (cfg included)
    label: str

    def call(self):
        return self.family.parse_call(self.op, self.args, self.kwargs)


def _dense_operands(layout, dtype, m, n, k, bias):
    pad = 8
    a = torch.empty(m, k + pad, dtype=dtype)[:, :k] if layout[0] == "n" else \
        torch.empty(k, m + pad, dtype=dtype)[:, :m].t()
    b = torch.empty(k, n + pad, dtype=dtype)[:, :n] if layout[1] == "n" else \
        torch.empty(n, k + pad, dtype=dtype)[:, :k].t()
    out = torch.empty(m, n + pad, dtype=dtype)[:, :n]
    return a, b, out, (torch.empty(n + 8, dtype=dtype)[8:] if bias else None)


def dense_cases() -> list:
    from torch_flydsl.registry import require_family

    family = require_family("mm")
    combos = itertools.cycle(itertools.product(("nt", "nn", "tn", "tt"), (torch.bfloat16, torch.float16), (True, False)))
    out = []
    for cfg in family.curated():
        layout, dtype, bias = next(combos)
        for m, n, k in ((296, 200, 520), (16, 1024, 4096), (32, 512, 8192)):
            a, b, o, bias_t = _dense_operands(layout, dtype, m, n, k, bias)
            if bias:
                case = Case(family, cfg, "dense_addmm_out", (bias_t, a, b),
                            {"alpha": 0.5, "beta": 2.0, "cfg": cfg.key(), "out": o}, "")
            else:
                case = Case(family, cfg, "dense_mm_out", (a, b), {"cfg": cfg.key(), "out": o}, "")
            checked = family.check_call(case.call())
            if isinstance(checked, tuple):
                case.label = f"{cfg.key()}-{layout}-{str(dtype)[6:]}-{'bias' if bias else 'nobias'}-{m}x{n}x{k}"
                out.append(case)
                break
    return out


def _scaled_operands(fa, fb, out_dtype, m, n, k, bias):
    from torch_flydsl.templates.scaled_gemm.problem import DTYPE_OF_FORMAT, FORMATS, SCALE_DTYPE

    a_fmt, b_fmt = FORMATS[fa], FORMATS[fb]
    ka, kb = a_fmt.row_bytes(k), b_fmt.row_bytes(k)
    a = torch.empty(m * (ka + 16) + 16, dtype=torch.uint8)[16:].view(DTYPE_OF_FORMAT[a_fmt.name]).as_strided(
        (m, ka), (ka + 16, 1))
    b = torch.empty(n, kb + 32, dtype=torch.uint8).view(DTYPE_OF_FORMAT[b_fmt.name])[:, :kb].t()
    sa = torch.empty(-(-m // 128) * 128, k // 32, dtype=torch.uint8).view(SCALE_DTYPE)
    sb = torch.empty(n, k // 32 + 4, dtype=torch.uint8).view(SCALE_DTYPE)[:, : k // 32]
    out = torch.empty(m, n + 8, dtype=out_dtype)[:, :n]
    return a, b, sa, sb, out, (torch.empty(n + 8, dtype=out_dtype)[8:] if bias else None)


def scaled_cases() -> list:
    from torch_flydsl.registry import require_family

    family = require_family("scaled_mm")
    pairs = (("e4m3", "e4m3"), ("e2m1", "e2m1"), ("e5m2", "e5m2"), ("e4m3", "e2m1"))
    combos = itertools.cycle(itertools.product(pairs, (torch.bfloat16, torch.float16), (True, False)))
    out = []
    for cfg in family.curated():
        for _ in range(16):  # the next combination this config takes
            (fa, fb), od, bias = next(combos)
            a, b, sa, sb, o, bias_t = _scaled_operands(fa, fb, od, 296, 200, 1024, bias)
            case = Case(family, cfg, "scaled_mm_out", (a, b, sa, sb, bias_t), {"cfg": cfg.key(), "out": o}, "")
            if isinstance(family.check_call(case.call()), tuple):
                case.label = f"{cfg.key()}-{fa}x{fb}-{str(od)[6:]}-{'bias' if bias else 'nobias'}"
                out.append(case)
                break
    return out


def grouped_cases() -> list:
    from torch_flydsl.registry import require_family

    family = require_family("grouped_mm")
    combos = itertools.cycle(itertools.product(("col", "row"), (torch.bfloat16, torch.float16)))
    out = []
    for cfg in family.curated():
        b_major, dtype = next(combos)
        tokens, n, k, groups = 296, 200, 512, 8
        a = torch.empty(tokens * (k + 8) + 8, dtype=dtype)[8:].as_strided((tokens, k), (k + 8, 1))
        b = (torch.empty(groups, n, k + 8, dtype=dtype)[:, :, :k].transpose(1, 2) if b_major == "col"
             else torch.empty(groups, k, n + 8, dtype=dtype)[:, :, :n])
        offs = torch.tensor([37 * (g + 1) for g in range(groups)], dtype=torch.int32)
        o = torch.empty(tokens, n + 8, dtype=dtype)[:, :n]
        case = Case(family, cfg, "grouped_mm_out", (a, b, offs), {"cfg": cfg.key(), "out": o},
                    f"{cfg.key()}-b{b_major}-{str(dtype)[6:]}")
        assert isinstance(family.check_call(case.call()), tuple), case.label
        out.append(case)
    return out


def all_cases() -> list:
    return dense_cases() + scaled_cases() + grouped_cases()


# -- what each launcher passes ---------------------------------------------------------------


def python_launch(case: Case):
    """``(jit_fn, args, (grid, block))`` the Python launcher uses for the case's operands."""
    call = case.call()
    cfg, problem = case.family.check_call(call)
    name = case.family.name
    if name == "dense_gemm":
        from torch_flydsl.templates.dense_gemm import launcher

        jit_fn, args = launcher.compile_args(cfg, call.a, call.b, call.out, call.bias, call.alpha, call.beta,
                                             problem=problem)
        bias = call.bias is not None and call.beta != 0.0
        dims = launcher.grid_block(cfg, problem.m, problem.n)
        unit = case.family.compiled_unit(cfg, problem, bias)
    elif name == "scaled_gemm":
        from torch_flydsl.templates.scaled_gemm import launcher

        jit_fn, args = launcher.compile_args(cfg, call.a, call.b, call.scale_a, call.scale_b, call.out, call.bias,
                                             problem=problem)
        dims = launcher.grid_block(cfg, problem.m, problem.n)
        unit = case.family.compiled_unit(cfg, problem)
    else:
        from torch_flydsl.templates.grouped_gemm import launcher

        jit_fn, args = launcher.compile_args(cfg, call.a, call.b, call.offs, call.out, problem=problem)
        dims = launcher.grid_block(cfg, problem.tokens, problem.groups, problem.n)
        unit = case.family.compiled_unit(cfg, problem)
    return jit_fn, args, dims, unit.id


def native_call(case: Case, stream: int) -> None:
    getattr(torch.ops.torch_flydsl_native, case.op + "_on_stream")(*case.args, **case.kwargs, stream=stream)


def placeholder_slots(case: Case) -> set:
    """Host-slot indices whose address each launcher allocates itself: the dense workspace (a
    split-K workspace, or the unread element without split-K). Their extents must still agree."""
    return {8} if case.family.name == "dense_gemm" else set()


def compare(case: Case, py, native: bytes, offsets: list) -> Optional[str]:
    """None when the native buffer equals the Python one outside the placeholder addresses."""
    if len(native) != len(py):
        return f"{len(native)} native bytes, {len(py)} Python bytes"
    skip = set()
    for i in placeholder_slots(case):
        skip |= set(range(offsets[i], offsets[i] + 8))
    diff = [i for i in range(len(py)) if i not in skip and py[i] != native[i]]
    return None if not diff else f"bytes {diff[:8]}... differ: native {native.hex()} python {py.hex()}"
