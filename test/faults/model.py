"""The user's program of the fault suite, run as a file in a fresh process by ``faultkit``.

``torch.compile(mode="max-autotune")`` of a tiny bf16 ``nn.Linear`` on CPU tensors with
``FLYDSL`` among the GEMM backends, checked against a float64 reference. Options: one JSON
argument, {"force_win": bool, "shape": [M, N, K]}. With ``force_win`` every FlyDSL choice
reports itself fastest when benchmarked (CPU timings of an emulated kernel say nothing), so
the generated code calls ``torch.ops.torch_flydsl.*`` deterministically.

The last stdout line is JSON: max_rel_err, calls (the GEMM calls of the generated code),
fx_hits/fx_misses, emulated (kernels run through the gfx950 emulator), plugin (whether
torch_flydsl imported and is enabled), ops (whether ``torch.ops.torch_flydsl`` has its ops). Nothing here catches an exception: a crash must show.
"""

import json
import sys

import torch


def plugin_hooks(force_win: bool) -> list:
    """Counts emulated kernel runs and forces FlyDSL wins, when the plugin is importable."""
    emulated = []
    try:
        import torch_flydsl
        from torch_flydsl.inductor import choices
        from torch_flydsl.templates.dense_gemm.family import FAMILY as emu
    except Exception as e:  # a broken plugin is one of the faults under test
        print(f"[model] torch_flydsl unavailable: {type(e).__name__}: {e}", file=sys.stderr)
        return emulated
    run = emu.run_emulated

    def counted(cfg, *args, **kwargs):
        report = run(cfg, *args, **kwargs)
        emulated.append(cfg.key())
        return report

    emu.run_emulated = counted
    if force_win:
        bind = choices.FlyDSLChoicesMixin._flydsl_bind

        def bind_winning(self, kernel_inputs, op_name, offer):
            callers = bind(self, kernel_inputs, op_name, offer)
            for c in callers:
                c.benchmark = lambda *a, **k: 1e-6
            return callers

        choices.FlyDSLChoicesMixin._flydsl_bind = bind_winning
    return emulated


def main(opts: dict) -> None:
    import torch._inductor.config as ic
    from torch._dynamo.utils import counters
    from torch._inductor.utils import run_and_get_code

    emulated = plugin_hooks(opts.get("force_win", False))
    m, n, k = opts.get("shape", [64, 128, 256])
    g = torch.Generator().manual_seed(0)
    model = torch.nn.Linear(k, n, dtype=torch.bfloat16)
    with torch.no_grad():
        model.weight.copy_(torch.randn(n, k, generator=g))
        model.bias.copy_(torch.randn(n, generator=g))
    x = torch.randn(m, k, dtype=torch.bfloat16, generator=g)
    with torch.no_grad(), ic.patch(
        max_autotune=True, max_autotune_gemm_backends="ATEN,FLYDSL", fx_graph_cache=True, autotune_local_cache=True
    ):
        out, code = run_and_get_code(torch.compile(model, mode="max-autotune"), x)
        ref = torch.nn.functional.linear(x.double(), model.weight.double(), model.bias.double())
    calls = [ln.strip() for ln in code[0].splitlines() if ("torch.ops.torch_flydsl" in ln or "extern_kernels." in ln)]
    try:
        import torch_flydsl

        plugin = torch_flydsl.is_enabled()
    except Exception:
        plugin = False
    print(json.dumps({
        "max_rel_err": float(((out.double() - ref).abs().max() / ref.abs().max()).item()),
        "calls": [c for c in calls if not c.startswith(("from ", "import "))],
        "fx_hits": counters["inductor"]["fxgraph_cache_hit"],
        "fx_misses": counters["inductor"]["fxgraph_cache_miss"],
        "emulated": len(emulated),
        "plugin": plugin,
        "ops": hasattr(torch.ops.torch_flydsl, "dense_addmm_out"),
    }))


if __name__ == "__main__":
    main(json.loads(sys.argv[1]) if len(sys.argv) > 1 else {})
