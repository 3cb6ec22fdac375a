"""Run a compiled ``nn.Linear`` over several batch sizes in a fresh process (dynamic M) and report,
as JSON on the last line, what ran and what was compiled.

Options (argv, JSON): ``batches`` (call order), ``mode``: "dynamic" (``torch.compile(dynamic=True)``)
or "mark_dynamic" (``torch._dynamo.mark_dynamic(x, 0)`` on every input, default ``dynamic``);
``features``: [in, out]; ``bias``; ``cfg``: the one FlyDSL config key offered (default: what the
family offers); ``transposed_input``: the input is ``[in, batch]`` storage seen through ``.t()`` (A column-major,
its leading stride is the batch size). FlyDSL choices are timed as fastest: CPU timings mean
nothing, and an emulated kernel takes a fraction of a second per call.

Reported: per call, the batch, the rows each FlyDSL kernel run computed (``kernel_rows``), the
error against float64 and against eager, and whether Inductor compiled a graph for it; the
number of graphs Dynamo handed Inductor (``frames``); the distinct FlyDSL artifacts compiled
(``kernel_compiles``: the compile jobs sent to the compile workers) and emulator programs built;
the torch_flydsl logger's warnings (``flydsl_log``) and info lines (``flydsl_notes``).
"""

import json
import logging
import sys

import torch


def main(opts):
    import torch._inductor.config as ic
    from torch._dynamo.testing import CompileCounterWithBackend
    from torch._inductor.graph import GraphLowering

    import torch_flydsl

    torch_flydsl.enable()
    import torch._inductor.lowering  # noqa: F401  (installs the glue)

    from torch_flydsl.emulator import executor
    from torch_flydsl.inductor import choices
    from torch_flydsl.runtime import workers
    from torch_flydsl.templates.dense_gemm import config as dense_config
    from torch_flydsl.templates.dense_gemm.family import FAMILY

    if opts.get("cfg"):  # the only config, whatever the search breadth (else the family's own)
        cfg = dense_config.DenseGemmConfig.from_key(opts["cfg"])
        dense_config.search_space = lambda breadth="curated": [cfg]
        dense_config.baseline_for = lambda problem: cfg

    bind = choices.bind_configs

    def bind_as_fastest(*args, **kwargs):
        callers = bind(*args, **kwargs)
        for c in callers:
            c.benchmark = lambda *a, **k: 1e-6
        return callers

    choices.bind_configs = bind_as_fastest

    # Every FlyDSL compile runs in a compile worker (runtime.isolated): a job sent to the pool
    # is one compile; the same kernel asked for again is found, not sent.
    compiles = []
    submit = workers.Pool.submit

    def counted_submit(self, ref, *args, **kwargs):
        compiles.append(ref)
        return submit(self, ref, *args, **kwargs)

    workers.Pool.submit = counted_submit

    kernel_rows = []
    run_emulated = FAMILY.run_emulated

    def recorded(cfg_, problem, call):
        kernel_rows.append(int(call.a.shape[0]))
        return run_emulated(cfg_, problem, call)

    FAMILY.run_emulated = recorded  # the family's emulator executor: every emulated run passes here

    codes = []  # every module Inductor generates (run_and_get_code would reset Dynamo per call)
    GraphLowering.save_output_code = staticmethod(codes.append)

    records = []  # (level, message) of the torch_flydsl logger (info needs TORCH_FLYDSL_LOG=info)

    class Recorder(logging.Handler):
        def emit(self, record):
            records.append((record.levelno, record.getMessage()))

    logging.getLogger("torch_flydsl").addHandler(Recorder(logging.INFO))

    in_f, out_f = opts.get("features", [128, 64])
    g = torch.Generator().manual_seed(0)
    lin = torch.nn.Linear(in_f, out_f, bias=opts.get("bias", True)).to(torch.bfloat16)
    counter = CompileCounterWithBackend("inductor")
    mode = opts.get("mode", "dynamic")
    compiled = torch.compile(lin, backend=counter, dynamic=True if mode == "dynamic" else None)
    calls = []
    with torch.no_grad(), ic.patch(max_autotune=True, max_autotune_gemm_backends="ATEN,FLYDSL"):
        for batch in opts["batches"]:
            if opts.get("transposed_input"):
                x = torch.randn(in_f, batch, generator=g).to(torch.bfloat16).t()
            else:
                x = torch.randn(batch, in_f, generator=g).to(torch.bfloat16)
            if mode == "mark_dynamic":
                torch._dynamo.mark_dynamic(x, 0)
            before, codes_before = len(kernel_rows), len(codes)
            out = compiled(x)
            code = codes[codes_before:]
            exact = x.double() @ lin.weight.double().t() + (lin.bias.double() if lin.bias is not None else 0)
            eager = lin(x)
            calls.append({
                "batch": batch,
                "kernel_rows": kernel_rows[before:],
                "rel_err": float((out.double() - exact).abs().max() / exact.abs().max()),
                "rel_err_vs_eager": float((out.double() - eager.double()).abs().max() / eager.double().abs().max()),
                "compiled_graph": bool(code),
                "flydsl_calls": [ln.strip() for c in code for ln in c.splitlines() if "torch_flydsl." in ln
                                 and not ln.strip().startswith("from ")],
            })
    print(json.dumps({
        "calls": calls,
        "frames": counter.frame_count,
        "kernel_compiles": len(compiles),
        "emulator_programs": len(executor._CACHE),
        "flydsl_log": [msg for level, msg in records if level >= logging.WARNING],
        "flydsl_notes": [msg for level, msg in records if level < logging.WARNING],
    }))


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
