"""Dense split-K in one launch, compile tier: one kernel in the code object, the gfx950 code
of its handoff (recorded with expecttest: a change to the ordering code shows up as a diff),
and the launcher's workspace (counters zeroed once, reused per device and stream).

What the handoff must compile to on gfx950 (LLVM AMDGPUUsage, "Memory Model GFX942", the
GFX942/GFX950 code sequences; the emulator's race checker models the IR-level orderings,
``test/emulator/test_global_sync.py``):

* agent-scope release (``fence syncscope("agent") release``, or the release half of an
  acq_rel atomic): ``buffer_wbl2 sc1`` (write this XCD's L2 back so other XCDs see it) then
  ``s_waitcnt vmcnt(0)`` (every earlier store of the wave complete) before what it orders;
* the counter: ``global_atomic_add ... sc0`` (sc0: return the pre-op value);
* agent-scope acquire: ``s_waitcnt vmcnt(0)`` then ``buffer_inv sc1`` (drop stale L1/L2
  lines) before the partials are read;
* the counter reset: an agent-scope monotonic atomic store, ``global_store_dword ... sc1``.

Recorded with flydsl 0.5.0 (skipped with other releases). Re-record with EXPECTTEST_ACCEPT=1.
"""

import re

import pytest
import torch
from expecttest import assert_expected_inline

from torch_flydsl.runtime.probe import flydsl_info
from torch_flydsl.templates.dense_gemm import launcher
from torch_flydsl.templates.dense_gemm.config import SPLIT_K_COUNTERS, DenseGemmConfig

from rendered_kit import dump_isa_to, isa_code, resources, summary_in_subprocess

pytestmark = pytest.mark.compile

DECODE_SK4 = DenseGemmConfig(16, 64, 128, 1, 4, 3, 0, 4)  # the autotuning-off pick for M <= 16
HANDOFF = r"buffer_wbl2|buffer_inv|global_atomic|global_store|s_barrier|s_waitcnt vmcnt\(0\)|s_endpgm"


def render(dump_dir: str) -> str:
    from test_dense_gemm_compile import compile_one

    dump_isa_to(dump_dir)
    ck = compile_one(DECODE_SK4, "nt", torch.bfloat16, bias=True)
    code = isa_code(dump_dir)
    (k,) = ck.kernels
    # From the last partial-tile store (fp32 buffer stores at the workspace's partials) to the
    # first partial read of the reduction: the handoff, in program order.
    last_partial = max(i for i, ln in enumerate(code) if ln.startswith("buffer_store_dword "))
    first_read = next(i for i, ln in enumerate(code) if i > last_partial and ln.startswith("buffer_load_dword "))
    seq = [re.sub(r"\s+", " ", ln) for ln in code[last_partial + 1:first_read] if re.match(HANDOFF, ln)]
    seq = [re.sub(r" v\d+(, v\d+)*, s\[\d+:\d+\]", " ...", ln) for ln in seq]
    return "\n".join([
        resources(k),
        f"kernels: {len(ck.kernels)}; s_endpgm: {sum(ln == 's_endpgm' for ln in code)}",
        f"global atomics: {sorted({ln.split()[0] for ln in code if ln.startswith(('global_atomic', 'buffer_atomic'))})}",
        f"buffer_wbl2: {sum(ln.startswith('buffer_wbl2') for ln in code)}; "
        f"buffer_inv: {sum(ln.startswith('buffer_inv') for ln in code)}",
        "handoff:",
        *(f"  {ln}" for ln in seq),
    ])


@pytest.mark.skipif(flydsl_info().version != "0.5.0", reason="goldens recorded with flydsl 0.5.0")
def test_split_k_handoff_isa(tmp_path):
    assert_expected_inline(summary_in_subprocess(__file__, "render", (), tmp_path), """\
flydsl_dense_gemm_bf16_nt_m16n64k128_w1x4_s3_g0_sk4_b1: vgpr=84 agpr=0 sgpr=42 lds=61440 spills=0 scratch=0
kernels: 1; s_endpgm: 1
global atomics: ['global_atomic_add']
buffer_wbl2: 2; buffer_inv: 2
handoff:
  buffer_wbl2 sc1
  s_waitcnt vmcnt(0)
  s_barrier
  buffer_wbl2 sc1
  s_waitcnt vmcnt(0)
  global_atomic_add ... sc0
  s_waitcnt vmcnt(0)
  buffer_inv sc1
  global_store_dword ... sc1
  s_barrier
  s_waitcnt vmcnt(0)
  buffer_inv sc1
  s_barrier""")


def test_workspace_counters_are_zeroed_once_and_reused_per_stream(monkeypatch):
    # A fresh cache: split-K runs earlier in this process (emulator tests in the same worker)
    # leave their partials in the shared workspace, as they may (only the counters must be zero).
    monkeypatch.setattr(launcher, "_WORKSPACES", {})
    monkeypatch.setattr(launcher, "_KEPT", [])
    cpu = torch.device("cpu")
    ws = launcher._workspace(DECODE_SK4, 3, 200, cpu, None)
    assert ws.dtype == torch.float32 and ws.numel() == SPLIT_K_COUNTERS + 4 * 3 * 200
    assert not ws.any()
    # Same (device, stream): the same memory, counters still zero (the kernel leaves them so).
    again = launcher._workspace(DECODE_SK4, 2, 64, cpu, None)
    assert again.data_ptr() == ws.data_ptr() and again.numel() == SPLIT_K_COUNTERS + 4 * 2 * 64
    # Another stream: its own workspace (concurrent GEMMs never share counters).
    other = launcher._workspace(DECODE_SK4, 3, 200, cpu, 12345)
    assert other.data_ptr() != ws.data_ptr()
    # Outgrown: a larger one, zeroed; the old one stays allocated (a captured graph may use it).
    big = launcher._workspace(DECODE_SK4, 16, 4096, cpu, None)
    assert big.numel() == SPLIT_K_COUNTERS + 4 * 16 * 4096 and not big.any()
    assert any(t.data_ptr() == ws.data_ptr() for t in launcher._KEPT)
    # Placeholders for compile-only calls are not cached.
    meta = launcher._workspace(DECODE_SK4, 3, 200, torch.device("meta"), None)
    assert meta.device.type == "meta"


def test_workspace_refuses_more_tiles_than_counters():
    cfg = DenseGemmConfig(16, 64, 128, 1, 4, 3, 0, 4)
    with pytest.raises(ValueError, match="split-K counters"):
        launcher._workspace(cfg, 16 * 17, 64 * 16, torch.device("cpu"), None)  # 272 tiles


@pytest.mark.parametrize("cfg", [DECODE_SK4, DenseGemmConfig(16, 64, 128, 1, 4, 3, 0, 8),
                                 DenseGemmConfig(32, 64, 128, 2, 2, 3, 0, 4)], ids=lambda c: c.key())
def test_split_k_is_one_launch(cfg):
    from test_dense_gemm_compile import compile_one

    ck = compile_one(cfg, "nt", torch.bfloat16, bias=True)
    assert len(ck.kernels) == 1, ck.kernels
    assert ck.source_ir.count("gpu.launch_func") == 1  # the host function launches once
