"""What compiling FlyDSL kernels in worker processes costs, and what running one autotuning
round's candidates side by side saves (``runtime.workers``, ``runtime.isolated``).

Measured on this machine, compile-only for gfx950 (no GPU needed; on an MI350 the device path's
worker job is the same compile plus a disk-cache write):

1. worker start: a fresh worker's first job, bare (Python only) and importing torch + FlyDSL;
2. per compile: the same kernels compiled in this process, one after another (what every
   compile did before), against a warm worker (the emulated-module job: the full gfx950
   compile plus the lowering to the emulated stage);
3. the cached path: a second request for a kernel already compiled (what every later call pays);
4. real models' FlyDSL compile time under ``TORCH_FLYDSL_AUTOTUNE=1``: the candidates Inductor
   offers for each GEMM node of the demo's MLP and of a tiny Llama (transformers' own
   ``LlamaForCausalLM`` with a small config when transformers is installed, else a hand-built
   Llama-shaped decoder layer, said so), compiled serially in this process (before) and through
   the pool with every candidate prefetched at once (after).

Run: ``python benchmarks/compile_isolation_cost.py [--workers N] [--quick]``. It prints tables.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch


def _fresh(jit_fn):
    """The same kernel as a jit function nobody compiled yet (FlyDSL keeps compiled ones in memory)."""
    from torch_flydsl.runtime.recipe import recipe_of

    recipe = recipe_of(jit_fn)
    module, _, name = recipe.builder.partition(":")
    import importlib

    return getattr(importlib.import_module(module), name).__wrapped__(recipe.spec)


def worker_start(pool_size: int) -> list:
    from torch_flydsl.runtime import workers

    rows = []
    for what, ref in (("bare worker (Python)", "os:getpid"),
                      ("worker importing torch + FlyDSL", "torch_flydsl.runtime.isolated:warm_up")):
        pool = workers.Pool(1)
        t0 = time.perf_counter()
        out = pool.run(ref)
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        pool.run("os:getpid")
        again = time.perf_counter() - t0
        pool.shutdown()
        rows.append((what, f"{first * 1e3:.0f}", f"{again * 1e3:.2f}", "ok" if out.ok else out.error))
    return rows


def _dense_calls(configs, m, n, k):
    from torch_flydsl.registry import family_for
    from torch_flydsl.templates.dense_gemm.family import FAMILY

    impl = family_for("mm")
    problem = FAMILY.explain_problem("mm", m, n, k, torch.bfloat16)
    fitting, _ = impl.configs_for(problem, "curated")
    chosen = fitting[:configs]
    return [(c.key(), *impl.placeholder_call(c, problem)) for c in chosen]


def in_process(jit_fn, args) -> None:
    """What the emulator executor did in the user's process before: the whole gfx950 compile,
    then the lowering of the traced IR to the emulated stage."""
    from torch_flydsl.emulator.capture import _lower
    from torch_flydsl.runtime.compile import compile_gfx950, compile_only_env

    fresh = _fresh(jit_fn)
    artifact = compile_gfx950(fresh, *args).artifact
    with compile_only_env():
        _lower(artifact.source_ir, fresh._effective_compile_hints())


def per_compile(calls, pool_size: int) -> tuple[list, dict]:
    from torch_flydsl.runtime import isolated, workers
    from torch_flydsl.runtime.recipe import placeholders, recipe_of

    pool = workers.Pool(pool_size)
    warm = [pool.submit(f"{isolated.JOB_MODULE}:warm_up") for _ in range(pool_size)]
    assert all(f.result().ok for f in warm)
    in_process(*calls[0][1:])  # this process warmed up the same way (FlyDSL's first compile)
    rows, inproc, inworker = [], [], []
    for key, jit_fn, args in calls:
        t0 = time.perf_counter()
        in_process(jit_fn, args)
        here = time.perf_counter() - t0
        recipe = recipe_of(jit_fn)
        t0 = time.perf_counter()
        out = pool.run(f"{isolated.JOB_MODULE}:emulated_module", (recipe, placeholders(args)))
        there = time.perf_counter() - t0
        assert out.ok, out.error
        inproc.append(here)
        inworker.append(there)
        rows.append((key, f"{here:.2f}", f"{there:.2f}", f"{(there - here) * 1e3:+.0f}"))
    pool.shutdown()
    # One round side by side, in a fresh pool (the workers above hold these kernels in memory):
    # each worker first compiles the first kernel (its one-time FlyDSL start, as this process
    # had), then every other candidate is sent at once.
    fresh = workers.Pool(pool_size)
    first = (recipe_of(calls[0][1]), placeholders(calls[0][2]))
    assert all(f.result().ok for f in [fresh.submit(f"{isolated.JOB_MODULE}:emulated_module", first)
                                       for _ in range(pool_size)])
    jobs = [(recipe_of(j), placeholders(a)) for _, j, a in calls[1:]]
    t0 = time.perf_counter()
    futures = [fresh.submit(f"{isolated.JOB_MODULE}:emulated_module", job) for job in jobs]
    assert all(f.result().ok for f in futures)
    together = time.perf_counter() - t0
    fresh.shutdown()
    summary = {"all but the first, serial in this process": sum(inproc[1:]),
               "all but the first, serial in one warm worker": sum(inworker[1:]),
               f"all but the first, side by side in {pool_size} warm worker(s)": together}
    return rows, summary


def cached_path(call) -> list:
    from torch_flydsl.runtime import isolated

    key, jit_fn, args = call
    isolated.emulator_stage(jit_fn, args)  # compiled once
    n = 2000
    t0 = time.perf_counter()
    for _ in range(n):
        isolated.emulator_stage(jit_fn, args)
    per = (time.perf_counter() - t0) / n
    return [(f"emulator stage of {key}, already compiled", f"{per * 1e6:.1f}")]


# -- real models -----------------------------------------------------------------------------


def _llama():
    try:
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError:
        return None, "transformers not installed"
    cfg = LlamaConfig(vocab_size=512, hidden_size=256, intermediate_size=688, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    return model, "transformers LlamaForCausalLM (hidden 256, MLP 688, 2 layers, GQA 4/2 heads, vocab 512)"


class LlamaShapedLayer(torch.nn.Module):
    """Not transformers' model: a decoder layer's GEMMs in Llama's shapes (q/k/v/o, gate/up/down)."""

    def __init__(self, d=256, kv=128, hidden=688):
        super().__init__()
        self.q, self.k, self.v = (torch.nn.Linear(d, n, bias=False) for n in (d, kv, kv))
        self.o = torch.nn.Linear(d, d, bias=False)
        self.gate, self.up = torch.nn.Linear(d, hidden, bias=False), torch.nn.Linear(d, hidden, bias=False)
        self.down = torch.nn.Linear(hidden, d, bias=False)

    def forward(self, x):
        a = self.o(self.q(x) + torch.nn.functional.pad(self.k(x) * self.v(x), (0, x.shape[-1] - self.k.out_features)))
        return self.down(torch.nn.functional.silu(self.gate(a)) * self.up(a))


def _models(quick: bool) -> dict:
    from torch_flydsl.demo import MLP

    models = {"mlp": ("demo MLP (batch 48, 128->256->128, bias, bf16)",
                      lambda: (MLP(128, 256).to(torch.bfloat16), (torch.randn(48, 128, dtype=torch.bfloat16),)))}
    if not quick:
        llama, what = _llama()
        if llama is not None:
            models["llama"] = (what, lambda: (llama, (torch.randint(0, 512, (1, 32)),)))
        else:
            models["llama"] = (f"Llama-shaped decoder layer, hand-built ({what})",
                               lambda: (LlamaShapedLayer().to(torch.bfloat16), (torch.randn(32, 256, dtype=torch.bfloat16),)))
    return models


def child(mode: str, name: str) -> None:
    """One fresh process: torch.compile(max-autotune) of the model with FlyDSL's curated
    candidates run through the emulator; prints the compile's wall time and kernel count.
    ``before``: every compile in this process, each at its candidate's first benchmark, as the
    plugin did before compile isolation (the worker path patched out); ``after``: as shipped."""
    import json

    import torch._inductor.config as ic

    os.environ.update(TORCH_FLYDSL_EXECUTOR="emulator", TORCH_FLYDSL_AUTOTUNE="1")
    from torch_flydsl.emulator import capture
    from torch_flydsl.inductor import choices
    from torch_flydsl.runtime import isolated

    compiled = set()  # distinct traced kernels lowered for the emulator
    if mode == "before":
        isolated.emulator_stage = lambda jit_fn, args: None  # capture() compiles in this process
        choices.prefetch_compiles = lambda offer, scalars: None
    real_lower = capture.lower_source_ir
    capture.lower_source_ir = lambda *a, **k: compiled.add(a[0]) or real_lower(*a, **k)
    model, example = _models(False)[name][1]()
    t0 = time.perf_counter()
    with torch.no_grad(), ic.patch(max_autotune=True, max_autotune_gemm_backends="ATEN,FLYDSL", fx_graph_cache=False,
                                   autotune_local_cache=False):
        torch.compile(model, mode="max-autotune")(*example)
    seconds = time.perf_counter() - t0
    jobs = len(isolated._jobs)
    print(json.dumps({"seconds": seconds, "kernels": jobs if mode == "after" else len(compiled)}))


def model_compile_time(name: str, what: str) -> tuple:
    import json
    import subprocess

    out = {}
    for mode in ("before", "after"):
        r = subprocess.run([sys.executable, __file__, "--child", mode, name], capture_output=True, text=True,
                           timeout=3600, env={**os.environ, "TORCHINDUCTOR_COMPILE_THREADS": "1"})
        if r.returncode != 0:
            raise RuntimeError(f"{mode} {name} failed:\n{r.stderr[-3000:]}")
        out[mode] = json.loads(r.stdout.strip().splitlines()[-1])
    b, a = out["before"], out["after"]
    return (what, b["kernels"], a["kernels"], f"{b['seconds']:.1f}", f"{a['seconds']:.1f}", f"{b['seconds'] / a['seconds']:.2f}x")


def main(argv=None) -> int:
    from tabulate import tabulate

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=None, help="pool size (default: the plugin's, min(4, CPUs))")
    p.add_argument("--quick", action="store_true", help="3 kernels per table instead of 6; the MLP only")
    p.add_argument("--child", nargs=2, metavar=("MODE", "MODEL"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child(*args.child)
        return 0
    from torch_flydsl.runtime import workers

    size = args.workers or workers.default_size()
    print(f"compile isolation cost | {os.cpu_count()} CPU(s) | pool of {size} | torch {torch.__version__}\n")
    print(tabulate(worker_start(size), headers=["worker", "first job ms", "next job ms", "status"]), "\n")
    calls = _dense_calls(3 if args.quick else 6, 256, 512, 512)
    rows, summary = per_compile(calls, size)
    print(tabulate(rows, headers=["dense config (256x512x512 bf16 nt)", "in process s", "in warm worker s", "added ms"]))
    extra = [ta - tb for ta, tb in zip([float(r[2]) for r in rows], [float(r[1]) for r in rows])]
    print(f"median added per compile: {statistics.median(extra) * 1e3:+.0f} ms")
    print(tabulate([(k, f"{v:.1f}") for k, v in summary.items()], headers=["one round of these", "s"]), "\n")
    print(tabulate(cached_path(calls[0]), headers=["cached path", "us per call"]), "\n")

    table = [model_compile_time(name, what) for name, (what, _) in _models(args.quick).items()]
    print(tabulate(table, headers=["model: torch.compile, TORCH_FLYDSL_AUTOTUNE=1, emulator executor", "kernels before",
                                   "kernels after", "compile s before", "compile s after", "speedup"]))
    print("before: each candidate compiled in the user's process at its first benchmark, one after another; "
          "after: compiled in the worker pool, all of a node's candidates sent at once when they are offered "
          "(the pool's start and each worker's first FlyDSL compile included)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
