"""The coexistence rule inside a real compile, against this torch's own in-tree backend (if any).

Runs in a fresh process with the reference stand-in executor (plumbing only: the CPU stands for
a gfx950 for both backends, see torch_flydsl/runtime/intree.py). On torch 2.11-2.14 there is no
in-tree backend; on torch 2.15 with flydsl 0.5 it is off; with flydsl 0.3.x it is on, and then
the plugin defers mm and still offers addmm (scripts/test_torch_versions.sh runs both).
"""

import textwrap

from script_runner import run_script

SCRIPT = textwrap.dedent(
    """
    import torch, torch_flydsl
    import torch._inductor.config as ic
    from torch_flydsl.runtime import intree
    torch_flydsl.enable()
    ic.max_autotune_gemm_backends = "ATEN,FLYDSL"
    a, b = torch.randn(64, 128, dtype=torch.bfloat16), torch.randn(128, 128, dtype=torch.bfloat16)
    bias = torch.randn(128, dtype=torch.bfloat16)
    torch.compile(lambda a, b: a @ b, mode="max-autotune-no-cudagraphs")(a, b)
    torch.compile(lambda bias, a, b: torch.addmm(bias, a, b), mode="max-autotune-no-cudagraphs")(bias, a, b)
    print("INTREE", intree.install_status().usable)
    """
)


def test_mm_is_deferred_only_where_the_in_tree_backend_serves_it_and_addmm_is_always_offered(tmp_path):
    r = run_script(SCRIPT, tmp_path, TORCH_FLYDSL_EXECUTOR="reference-standin", TORCH_FLYDSL_LOG="info",
                   TORCH_FLYDSL_INTREE_POLICY="defer")
    intree_on = r.stdout.split("INTREE")[-1].strip() == "True"
    offers = [ln for ln in r.stderr.splitlines() if "offering" in ln]
    deferred = [ln for ln in r.stderr.splitlines() if "[coexistence]" in ln]
    assert any(ln.split("]", 1)[1].lstrip().startswith("INFO addmm") for ln in offers), r.stderr
    mm_offered = any("INFO mm node" in ln for ln in offers)
    assert mm_offered is (not intree_on), r.stderr
    assert bool(deferred) is intree_on and all("mm node" in ln and "addmm" not in ln for ln in deferred)
