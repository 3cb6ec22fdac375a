"""Compile one GEMM in a fresh process and report what Inductor did, as JSON on the last line.

Used by the Inductor-glue tests (the FX-graph and autotune caches only show their behaviour
across processes). Options come from argv as JSON:
  op: "mm" | "addmm" | "linear" | "scaled_mm" (MX torch._scaled_mm) | "scaled_mm_v2" (F.scaled_mm,
  BlockWise1x32, NO_SWIZZLE);  formats: the MX formats of A and B ("e4m3", "e5m2", "e2m1");
  bias: a bias vector for the scaled ops;  sizes: group sizes of "grouped_mm" (torch._grouped_mm, 2-D A x 3-D B with offs; M is their
  sum plus "spare_rows"; b_major "col" (default, [G, N, K] storage) or "row");
  grouped_form: "2d3d" (default), "3d3d" (batched, len(sizes) batches of M rows) or "2d2d"
  (groups along K: the expert weight gradient);
  "moe": a small MoE block shaped like Hugging Face's (router, top-k, experts through two
  torch._grouped_mm calls), compared with its eager output;
  recipe: "mx" (default) or "tensorwise" (fp8 with
  float32 scalar scales, which CPU PyTorch can run: a non-MX scaled_mm);  simulate_rocm_meta: set torch.version.hip in this
  process so that PyTorch's meta functions check ROCm's MX scale layout (a CPU wheel checks
  CUDA's swizzled one; nothing else here keys on it for CPU tensors);  backends: max_autotune_gemm_backends;  force_win: make every
  FlyDSL choice benchmark as fastest (timings are meaningless on a CPU);  force_lose: as slowest;  bump_version: pretend
  the plugin version changed;  shape: [M, N, K];  layout: "nn" | "nt" | ...;
  fixed_aten_timings: deterministic timings for PyTorch's own extern choices;
  only_configs: offer just these FlyDSL config keys (of those that fit);  fail_config: the
  emulated kernel of this config key raises ``PlantedKernelFault`` whenever it runs.
The JSON also carries ``flydsl_log``, the torch_flydsl logger's warnings and errors, and
``launches``, how many FlyDSL kernels the device launcher ran (0 without a gfx950).
"""

import importlib
import json
import logging
import sys

import torch


def family_package(op):
    if op.startswith("scaled_mm"):
        return "scaled_gemm"
    return "grouped_gemm" if op in ("grouped_mm", "moe") else "dense_gemm"


def plant_failure(cfg_key, package):
    """The emulated kernel of ``cfg_key`` raises as the emulator does when it finds a kernel
    wrong (an ``EmulatorError``: the op never hides those behind PyTorch's result)."""
    from torch_flydsl.emulator.errors import EmulatorError

    family = importlib.import_module(f"torch_flydsl.templates.{package}.family").FAMILY

    class PlantedKernelFault(EmulatorError):
        pass

    run = family.run_emulated

    def run_or_fail(cfg, *args, **kwargs):
        if cfg.key() == cfg_key:
            raise PlantedKernelFault(f"planted failure of {cfg_key}")
        return run(cfg, *args, **kwargs)

    family.run_emulated = run_or_fail  # the family's executor: every emulated run of it passes here


def offer_only(cfg_keys, package):
    family = importlib.import_module(f"torch_flydsl.templates.{package}.family").FAMILY

    configs_for = family.configs_for

    def fewer(problem, breadth):
        fitting, declined = configs_for(problem, breadth)
        return [c for c in fitting if c.key() in cfg_keys], declined

    family.configs_for = fewer


def count_launches(package):
    launcher = importlib.import_module(f"torch_flydsl.templates.{package}.launcher")

    launched, launch = [], launcher.launch

    def counted(*args, **kwargs):
        result = launch(*args, **kwargs)
        launched.append(args[0].key())
        return result

    launcher.launch = counted
    return launched


def main(opts):
    import torch._inductor.config as ic
    from torch._dynamo.utils import counters
    from torch._inductor.utils import run_and_get_code

    import torch_flydsl

    torch_flydsl.enable()
    benchmarked = []
    autotune_seen = []
    from torch._inductor.select_algorithm import add_feedback_saver

    def saver(timings, name, *rest):  # the signature grew across torch versions
        autotune_seen.append({
            "op": name,
            "choices": sorted({type(c).__name__ for c in timings}),
            "descriptions": sorted(str(getattr(c, "description", "") or getattr(c, "name", "")) for c in timings),
        })

    add_feedback_saver(saver)
    flydsl_log = []

    class Recorder(logging.Handler):
        def emit(self, record):
            flydsl_log.append(record.getMessage())

    logging.getLogger("torch_flydsl").addHandler(Recorder(logging.WARNING))
    flydsl_notes = []  # info and above (declines, offers): needs TORCH_FLYDSL_LOG=info

    class NoteRecorder(logging.Handler):
        def emit(self, record):
            flydsl_notes.append(record.getMessage())

    logging.getLogger("torch_flydsl").addHandler(NoteRecorder(logging.INFO))
    op = opts.get("op", "mm")
    package = family_package(op)
    launched = count_launches(package)
    if opts.get("only_configs"):
        offer_only(opts["only_configs"], package)
    if opts.get("fail_config"):
        plant_failure(opts["fail_config"], package)
    if opts.get("simulate_rocm_meta"):
        torch.version.hip = "7.0.0"
    if torch_flydsl.is_enabled():
        importlib.import_module("torch._inductor.lowering")  # installs the glue
        from torch_flydsl.inductor import choices

        if opts.get("bump_version"):
            import torch_flydsl.fingerprint as fp
            import torch_flydsl.inductor.extern as extern

            fp.fingerprint.cache_clear()
            orig = fp.fingerprint.__wrapped__
            fp.fingerprint = lambda: orig() + ("bumped",)
            choices.fingerprint = fp.fingerprint
            extern.fingerprint_str = lambda: "/".join(fp.fingerprint())
            ic.inductor_choices_class = None
            from torch_flydsl.inductor import install

            install._installed = False
            install.install()

        bind = choices.bind_configs

        def bind_and_record(*args, **kwargs):
            callers = bind(*args, **kwargs)
            for c in callers:
                real = c.benchmark

                def bench(*a, _real=real, _c=c, **k):
                    benchmarked.append(_c.description)
                    # Forced: report FlyDSL fastest without running it (CPU timings are noise,
                    # and an emulated kernel is seconds per call).
                    if opts.get("force_lose"):
                        return 1e6
                    # 1 us: far faster than any CPU (or H200) mm of the probe's shapes, and far
                    # above their roofline, which a recorded winner's time must not beat.
                    return 1e-3 if opts.get("force_win") else _real(*a, **k)

                c.benchmark = bench
            return callers

        choices.bind_configs = bind_and_record

    if opts.get("fixed_aten_timings"):
        # Two ATen choices (addmm, bias_addmm on 2.11) would otherwise race on CPU noise.
        from torch._inductor.select_algorithm import ExternKernelCaller

        ExternKernelCaller.benchmark = lambda self, *a, **k: 1.0 + len(self.choice.name) * 1e-3

    m, n, k = opts.get("shape", [64, 128, 256])
    if op.startswith("scaled_mm"):
        fn, args, reference = scaled_case(op, m, n, k, opts)
    elif op == "grouped_mm":
        fn, args, reference = grouped_case(m, n, k, opts)
    elif op == "moe":
        fn, args, reference = moe_case(opts)
    else:
        fn, args, reference = dense_case(op, m, n, k, opts)
    if opts.get("epilogue") == "relu":  # a pointwise consumer Triton templates can fuse
        inner, inner_reference = fn, reference
        fn = lambda *xs: torch.relu(inner(*xs)) * 2.0  # noqa: E731
        reference = lambda *xs: torch.relu(inner_reference(*xs)) * 2.0  # noqa: E731

    with ic.patch(max_autotune=True, max_autotune_gemm_backends=opts.get("backends", "ATEN,FLYDSL"),
                  fx_graph_cache=True, autotune_local_cache=True):
        compiled = torch.compile(fn, mode=opts.get("mode"))
        out, code = run_and_get_code(compiled, *args)
        for _ in range(opts.get("extra_runs", 0)):  # replays (CUDA graphs under max-autotune)
            out = compiled(*args)
    ref = reference(*args)
    if ref.isnan().any():  # undefined rows (grouped_mm): compare the defined ones
        keep = ~ref.isnan().all(dim=-1)
        out, ref = out[keep], ref[keep]
    lines = [ln.strip() for ln in code[0].splitlines() if "torch_flydsl" in ln or "extern_kernels." in ln]
    print(json.dumps({
        "calls": [ln for ln in lines if not ln.startswith("from ")],
        "code": code[0],
        "max_rel_err": float(((out.double() - ref).abs().max() / ref.abs().max()).item()),
        "fx_hits": counters["inductor"]["fxgraph_cache_hit"],
        "fx_misses": counters["inductor"]["fxgraph_cache_miss"],
        "benchmarked": benchmarked,
        "choices_seen": autotune_seen,
        "cudagraph_skips": counters["inductor"]["cudagraph_skips"],
        "flydsl_log": flydsl_log,
        "flydsl_notes": flydsl_notes,
        "launches": len(launched),
    }))


def dense_case(op, m, n, k, opts):
    layout = opts.get("layout", "nn")
    dtype = getattr(torch, opts.get("dtype", "bfloat16"))
    g = torch.Generator().manual_seed(0)
    a = torch.randn(m, k, dtype=dtype, generator=g) if layout[0] == "n" else torch.randn(k, m, dtype=dtype, generator=g).t()
    b = torch.randn(k, n, dtype=dtype, generator=g) if layout[1] == "n" else torch.randn(n, k, dtype=dtype, generator=g).t()
    bias = torch.randn(n, dtype=dtype, generator=g)
    device = opts.get("device", "cpu")
    a, b, bias = (t.to(device) for t in (a, b, bias))
    if op == "mm":
        fn, args = (lambda x, y: x @ y), (a, b)
    elif op == "addmm":
        fn, args = (lambda c, x, y: torch.addmm(c, x, y, alpha=0.5, beta=2.0)), (bias, a, b)
    else:
        fn, args = (lambda x, w, c: torch.nn.functional.linear(x, w, c)), (a, b.t(), bias)
    return fn, args, lambda *xs: fn(*[t.double() for t in xs])


def scaled_case(op, m, n, k, opts):
    """Random finite MX operands (A [M, K] row-major, B [K, N] column-major) and E8M0 scales
    [round_up(rows, 128), K/32] (what PyTorch's meta functions ask of v1 MX scales for
    K % 128 == 0; the rows past M/N are never read), and the float64 reference."""
    import torch.nn.functional as F

    from torch_flydsl.templates.scaled_gemm import reference
    from torch_flydsl.templates.scaled_gemm.problem import DTYPE_OF_FORMAT, FORMATS, SCALE_DTYPE

    fa, fb = opts.get("formats", ["e4m3", "e4m3"])
    g = torch.Generator().manual_seed(0)

    def codes(rows, fmt):
        c = torch.randint(0, 256, (rows, FORMATS[fmt].row_bytes(k)), generator=g, dtype=torch.uint8)
        if fmt == "e4m3":
            c[(c & 0x7F) == 0x7F] ^= 1  # NaN -> finite
        elif fmt == "e5m2":
            c[(c & 0x7C) == 0x7C] &= 0xFB  # Inf/NaN -> finite
        return c.view(DTYPE_OF_FORMAT[fmt])

    def scales(rows):
        padded = -(-rows // 128) * 128 if op == "scaled_mm" else rows
        return torch.randint(120, 135, (padded, k // 32), generator=g, dtype=torch.uint8).view(SCALE_DTYPE)

    a, b = codes(m, fa), codes(n, fb).t()
    sa, sb = scales(m), scales(n)
    out_dtype = getattr(torch, opts.get("dtype", "bfloat16"))
    if opts.get("recipe") == "tensorwise":
        sa, sb = torch.tensor(0.5), torch.tensor(2.0)

        def tensorwise(a, b, sa, sb):
            return torch._scaled_mm(a, b, sa, sb, out_dtype=out_dtype)

        return tensorwise, (a, b, sa, sb), lambda a, b, sa, sb: (a.double() * sa.double()) @ (b.double() * sb.double())
    bias = torch.randn(n, generator=g).to(out_dtype) if opts.get("bias") else None
    if op == "scaled_mm":
        def fn(a, b, sa, sb, bias=None):
            return torch._scaled_mm(a, b, sa, sb, bias=bias, out_dtype=out_dtype)
    else:
        def fn(a, b, sa, sb, bias=None):
            mx, plain = F.ScalingType.BlockWise1x32, F.SwizzleType.NO_SWIZZLE
            return F.scaled_mm(a, b, sa, mx, sb, mx, swizzle_a=plain, swizzle_b=plain, bias=bias,
                               output_dtype=out_dtype)
    args = (a, b, sa, sb) + ((bias,) if bias is not None else ())
    return fn, args, lambda *xs: reference(*xs)


def grouped_case(m, n, k, opts):
    """A ragged MoE forward: rows past the last offset belong to no group, so the comparison
    (``max_rel_err``) covers group rows only (PyTorch leaves the others undefined too)."""
    from torch_flydsl.templates.grouped_gemm import reference
    from torch_flydsl.templates.grouped_gemm.reference import group_bounds

    sizes = opts.get("sizes", [5, 0, 40, 19])
    dtype = getattr(torch, opts.get("dtype", "bfloat16"))
    g = torch.Generator().manual_seed(0)
    tokens = sum(sizes) + opts.get("spare_rows", 0)
    if opts.get("grouped_form") == "3d3d":  # batched: G batches of M rows, no offs
        a = torch.randn(len(sizes), m, k, generator=g).to(dtype)
        b = torch.randn(len(sizes), n, k, generator=g).to(dtype).transpose(1, 2)
        return (lambda a, b: torch._grouped_mm(a, b)), (a, b), (lambda a, b: reference(a, b, None))
    if opts.get("grouped_form") == "2d2d":
        a = torch.randn(tokens, m, generator=g).to(dtype).t()  # [M, T], T contiguous
        b = torch.randn(tokens, n, generator=g).to(dtype)
        offs = torch.tensor(sizes, dtype=torch.int32).cumsum(0).to(torch.int32)

        def per_group_over_k(a, b, offs):
            bounds = group_bounds(offs, tokens)
            return torch.stack([a.double()[:, s:e] @ b.double()[s:e] for s, e in bounds])

        return (lambda a, b, offs: torch._grouped_mm(a, b, offs=offs)), (a, b, offs), per_group_over_k
    a = torch.randn(tokens, k, generator=g).to(dtype)
    b = torch.randn(len(sizes), n, k, generator=g).to(dtype).transpose(1, 2)
    if opts.get("b_major") == "row":
        b = b.contiguous()
    offs = torch.tensor(sizes, dtype=torch.int32).cumsum(0).to(torch.int32)

    def fn(a, b, offs):
        return torch._grouped_mm(a, b, offs=offs)

    def group_rows_only(a, b, offs):
        ref = reference(a, b, offs)
        mask = torch.zeros(tokens, dtype=torch.bool)
        for start, end in group_bounds(offs, tokens):
            mask[start:end] = True
        ref[~mask] = float("nan")
        return ref

    return fn, (a, b, offs), group_rows_only


def moe_case(opts):
    from torch import nn

    class TinyMoE(nn.Module):
        """Routed experts the way Hugging Face transformers 5.x runs them with grouped_mm."""

        def __init__(self, hidden=64, inter=64, experts=8, top_k=2):
            super().__init__()
            g = torch.Generator().manual_seed(0)
            self.top_k, self.experts = top_k, experts
            self.router = nn.Linear(hidden, experts, bias=False)
            self.gate_up = nn.Parameter(torch.randn(experts, 2 * inter, hidden, generator=g) / hidden**0.5)
            self.down = nn.Parameter(torch.randn(experts, hidden, inter, generator=g) / inter**0.5)

        def forward(self, x):
            weights, chosen = torch.topk(torch.softmax(self.router(x).float(), -1), self.top_k)
            flat = chosen.reshape(-1)
            order = flat.argsort(stable=True)
            token = order // self.top_k
            counts = torch.zeros(self.experts, dtype=torch.int64).scatter_add_(0, flat, torch.ones_like(flat))
            offs = counts.cumsum(0).to(torch.int32)
            h = torch._grouped_mm(x[token], self.gate_up.transpose(1, 2), offs=offs)
            gate, up = h.chunk(2, dim=-1)
            y = torch._grouped_mm(torch.nn.functional.silu(gate) * up, self.down.transpose(1, 2), offs=offs)
            y = y * weights.reshape(-1)[order].unsqueeze(-1).to(y.dtype)
            return torch.zeros_like(x).index_add_(0, token, y)

    model = TinyMoE().to(torch.bfloat16)
    x = torch.randn(opts.get("tokens", 24), 64, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    with torch.no_grad():
        eager = model(x).double()
    return (lambda x: model(x)), (x,), (lambda x: eager)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]) if len(sys.argv) > 1 else {})
