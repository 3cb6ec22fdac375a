"""Helpers for op-level tests: wrap a hand-written kernel body in a module and run it."""

from __future__ import annotations

import pytest

pytest.importorskip("flydsl")

from torch_flydsl.emulator.api import run_kernel_ir  # noqa: E402


def module(params: str, body: str, lds_bytes: int = 0) -> str:
    glob = ""
    if lds_bytes:
        glob = (
            f"llvm.mlir.global external @lds() {{addr_space = 3 : i32, alignment = 16 : i64, dso_local}}"
            f" : !llvm.array<{lds_bytes} x i8>"
        )
    return f"""
module attributes {{gpu.container_module}} {{
  gpu.module @kernels {{
    {glob}
    gpu.func @k({params}) kernel {{
      %tid_idx = gpu.thread_id x
      %tid = arith.index_cast %tid_idx : index to i32
{body}
      gpu.return
    }}
  }}
}}
"""


def run(params, body, args, *, block=64, lds_bytes=0, grid=(1, 1, 1), check=True):
    return run_kernel_ir(module(params, body, lds_bytes), "k", args, grid=grid, block=(block, 1, 1), check=check)


def kinds(report):
    return sorted({f.kind for f in report.findings})


#: Kernel body: each lane copies its 8 input bytes into LDS, then reads them back with the
#: transposing ``ds_read_b64_tr_b16`` and stores what it got (args ``%in``, ``%out``).
TR16_ROUNDTRIP = """
      %lds = llvm.mlir.addressof @lds : !llvm.ptr<3>
      %c8 = arith.constant 8 : i32
      %off = arith.muli %tid, %c8 : i32
      %pin = llvm.getelementptr %in[%off] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i8
      %x = llvm.load %pin : !llvm.ptr<1> -> vector<4xi16>
      %pl = llvm.getelementptr %lds[%off] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i8
      llvm.store %x, %pl : vector<4xi16>, !llvm.ptr<3>
      gpu.barrier
      %t = rocdl.ds.read.tr16.b64 %pl : <3> -> vector<4xi16>
      %po = llvm.getelementptr %out[%off] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i8
      llvm.store %t, %po : vector<4xi16>, !llvm.ptr<1>
"""
