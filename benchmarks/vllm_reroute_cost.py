"""What the vLLM re-route (torch_flydsl.integrations.vllm.linear) adds to a call it does not serve.

CPU only, no vLLM needed. vLLM's impl is replaced by a function that returns a preallocated
tensor, so the numbers are the wrapper's own cost:

- ``direct``: the wrapper called as a Python function, minus the bare impl called the same way;
- ``dispatcher``: ``torch.ops.<ns>.gemm(x, w, None)`` with the wrapper registered over the impl
  exactly as the hook does it (``Library(ns, "IMPL").impl(..., allow_override=True)``), minus
  the same op with only the impl registered.

Also the dispatch table's own cost: ``active()`` plus ``lookup`` of a listed shape. Misses
measured: no dispatch table set; a table that does not name the shape (a real server's
common miss); an fp32 input (rejected before the table is read). Median of ``--repeat`` runs of
``--number`` calls each, in microseconds per call.

    .venv/bin/python benchmarks/vllm_reroute_cost.py [--number 20000] [--repeat 7]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import timeit
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from torch_flydsl import dispatch_table  # noqa: E402
from torch_flydsl.integrations.vllm import linear as hook  # noqa: E402

NS = "torch_flydsl_reroute_bench"


def per_call_us(fn, args, number: int, repeat: int) -> float:
    runs = timeit.repeat(lambda: fn(*args), number=number, repeat=repeat)
    return statistics.median(runs) / number * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--number", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()

    m, n, k = 4, 64, 128
    x16 = torch.randn(m, k, dtype=torch.bfloat16)
    w16 = torch.randn(n, k, dtype=torch.bfloat16)
    x32, w32 = x16.float(), w16.float()
    result = torch.empty(m, n, dtype=torch.bfloat16)

    def impl(x, weight, bias=None):  # stands in for vLLM's rocm_unquantized_gemm_impl
        return result

    wrapper = hook._make_wrapper(impl)

    lib = torch.library.Library(NS, "DEF")
    lib.define("gemm(Tensor x, Tensor weight, Tensor? bias=None) -> Tensor")
    lib.impl("gemm", impl, "CPU")
    op = getattr(torch.ops, NS).gemm.default

    other_shape = {"format": dispatch_table.FORMAT, "version": dispatch_table.VERSION, "arch": "gfx950",
                   "entries": [{"op": "mm", "dtype": "bfloat16", "layout": "nt", "bias": False, "m": 16, "n": n,
                                "k": k, "config": "m16n64k128_w1x4_s3_g0_sk4"}]}
    table = Path(tempfile.mkdtemp()) / "table.json"
    table.write_text(json.dumps(other_shape))

    cases = [("no table", None, (x16, w16, None)), ("shape not in table", str(table), (x16, w16, None)),
             ("fp32 input", str(table), (x32, w32, None))]
    rows = []
    baseline_direct = per_call_us(impl, (x16, w16, None), args.number, args.repeat)
    baseline_op = per_call_us(op, (x16, w16, None), args.number, args.repeat)
    over = torch.library.Library(NS, "IMPL")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        over.impl("gemm", wrapper, "CPU", allow_override=True)
    for name, path, operands in cases:
        if path is None:
            os.environ.pop(dispatch_table.ENV, None)
        else:
            os.environ[dispatch_table.ENV] = path
        dispatch_table.reload()
        direct = per_call_us(wrapper, operands, args.number, args.repeat) - baseline_direct
        routed = per_call_us(op, operands, args.number, args.repeat) - baseline_op
        rows.append((name, direct, routed))

    os.environ[dispatch_table.ENV] = str(table)
    dispatch_table.reload()
    lookup = per_call_us(lambda: dispatch_table.active().lookup("mm", torch.bfloat16, "nt", False, 16, n, k), (),
                         args.number, args.repeat)
    print(f"dispatch table: active() + lookup of a listed shape {lookup:.2f} us per call (budget 2 us)")
    print(f"torch {torch.__version__}, {m}x{n}x{k} bf16; bare impl {baseline_direct:.2f} us, "
          f"through the dispatcher {baseline_op:.2f} us")
    print(f"{'miss':<22}{'wrapper, direct (us)':>22}{'via dispatcher (us)':>22}")
    for name, direct, routed in rows:
        print(f"{name:<22}{direct:>22.2f}{routed:>22.2f}")


if __name__ == "__main__":
    main()
