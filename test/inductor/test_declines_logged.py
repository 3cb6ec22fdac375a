"""What README promises about declines and the log, checked in real compiles (fresh processes,
reference stand-in executor: plumbing only, the CPU stands for a gfx950)."""

import re
import textwrap

from script_runner import run_script

COMPILE = textwrap.dedent(
    """
    import torch, torch_flydsl
    import torch._inductor.config as ic
    from torch._inductor.utils import run_and_get_code
    torch_flydsl.enable()
    ic.max_autotune_gemm_backends = "ATEN,FLYDSL"
    ic.cpp_wrapper = {cpp_wrapper}
    k = {k}
    a, b = torch.randn(64, k, dtype=torch.bfloat16), torch.randn(k, 128, dtype=torch.bfloat16)
    f = torch.compile(lambda a, b: a @ b, mode="max-autotune-no-cudagraphs", dynamic={dynamic})
    out, code = run_and_get_code(f, a, b)
    assert torch.allclose(out.float(), (a.float() @ b.float()), rtol=2e-2, atol=2e-2)
    print("PLUGIN_CALL", "torch_flydsl" in "".join(code))
    """
)


def compile_mm(tmp_path, k=128, dynamic=False, cpp_wrapper=False):
    code = COMPILE.format(k=k, dynamic=dynamic, cpp_wrapper=cpp_wrapper)
    # The plugin's own declines, also where an in-tree backend would serve mm (torch 2.15 + flydsl 0.3.x).
    r = run_script(code, tmp_path, TORCH_FLYDSL_EXECUTOR="reference-standin", TORCH_FLYDSL_LOG="info",
                   TORCH_FLYDSL_INTREE_POLICY="plugin")
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("[torch_flydsl]")]
    return r.stdout.split("PLUGIN_CALL")[-1].strip() == "True", lines


def test_info_log_names_the_node_and_the_configs_offered(tmp_path):
    _, lines = compile_mm(tmp_path)
    assert any(re.fullmatch(r"\[torch_flydsl\] INFO mm node \S+: offering 1 FlyDSL config\(s\): m128n128k32_w2x2_s4_g0", ln)
               for ln in lines), lines


def test_a_k_the_kernel_cannot_take_is_declined_at_info(tmp_path):
    # Regression: a K the kernel cannot take showed only at DEBUG. K tails are served now
    # (K=96 with block_k 32..128 included); K=100 with a row-major A is not: its 16-byte loads
    # would straddle K.
    used, lines = compile_mm(tmp_path, k=100)
    assert not used
    assert any("INFO mm node" in ln and "no FlyDSL choice: [shape] K=100 is not a multiple of 8 and A is row-major"
               in ln for ln in lines), lines


def test_a_k_tail_is_offered(tmp_path):
    # Offered, not necessarily the winner: the reference stand-in may lose the benchmark to ATen.
    _, lines = compile_mm(tmp_path, k=96)
    assert any(re.fullmatch(r"\[torch_flydsl\] INFO mm node \S+: offering 1 FlyDSL config\(s\): m128n128k32_w2x2_s4_g0", ln)
               for ln in lines), lines


def test_symbolic_n_and_k_are_declined_with_a_reason(tmp_path):
    # dynamic=True on a @ b makes M, N and K symbolic; only a symbolic M is served
    # (test_dynamic_m_glue.py).
    used, lines = compile_mm(tmp_path, dynamic=True)
    assert not used
    assert any(re.search(r"INFO mm node \S+: no FlyDSL choice: \[shape\] symbolic K=s\d+ and N=s\d+: FlyDSL serves a "
                         r"size that varies at run time only for M", ln) for ln in lines), lines


def test_cpp_wrapper_is_offered_like_the_python_wrapper(tmp_path):
    # cpp_wrapper graphs get FlyDSL choices too (docs/export.md); the old decline is gone.
    _, lines = compile_mm(tmp_path, cpp_wrapper=True)
    assert any(re.fullmatch(r"\[torch_flydsl\] INFO mm node \S+: offering 1 FlyDSL config\(s\): m128n128k32_w2x2_s4_g0", ln)
               for ln in lines), lines
    assert not any("cpp_wrapper" in ln for ln in lines), lines
