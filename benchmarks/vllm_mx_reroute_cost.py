"""What the vLLM MXFP8 re-route (torch_flydsl.integrations.vllm.mx) adds to a call it does not
serve.

CPU only, no vLLM needed. vLLM's ``RocmDotScaledMxfp8LinearKernel`` is replaced by a class of
the same contract written here whose GEMM returns a preallocated tensor, so the numbers are the
re-route's own cost per ``apply_weights`` call, minus the same call on that base class:

- ``layer not in the table``: the layer's ``[N, K]`` has no entry; the subclass checks one
  attribute set at load and calls the base (what every other layer of a served model pays);
- ``routed layer, M not in the table``: the ``[N, K]`` has entries but not for this M; the call
  goes through the opaque op ``torch_flydsl::vllm_mxfp8_linear`` (dispatcher, lookup miss) and
  then the base's ``apply_weights`` (what a routed layer pays at an M it does not serve);
- ``routed layer, no table``: ``TORCH_FLYDSL_RECORD_SHAPES`` recording with no table yet, the
  recorder's per-call cost included.

Median of ``--repeat`` runs of ``--number`` calls each, in microseconds per call. Under CUDA-graph
replay (vLLM's decode) none of this host time is paid per step.

    .venv/bin/python benchmarks/vllm_mx_reroute_cost.py [--number 20000] [--repeat 7]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from vllm_reroute_cost import per_call_us  # noqa: E402 - the dense re-route's benchmark, same method

from torch_flydsl import dispatch_table  # noqa: E402
from torch_flydsl.integrations.vllm import mx as vllm_mx  # noqa: E402

M, N, K = 4, 64, 256


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--number", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args(argv)

    result = torch.empty(M, N, dtype=torch.bfloat16)

    class StandInBase:  # vLLM's RocmDotScaledMxfp8LinearKernel's contract, its GEMM a no-op
        def process_weights_after_loading(self, layer):
            pass

        def apply_weights(self, layer, x, bias=None):
            out = result.reshape(*x.shape[:-1], layer.weight.shape[0])
            return out if bias is None else out + bias

    vllm_mx._define_op()
    vllm_mx.state.base, vllm_mx.state.miss_self = StandInBase, StandInBase()
    cls = vllm_mx._kernel_class(StandInBase)
    # vllm.envs is absent here: batch_invariant() reads False after a failed import; keep that
    # off the measured path (vLLM's own envs is a loaded module in a real server).
    sys.modules.setdefault("vllm.envs", types.SimpleNamespace(VLLM_BATCH_INVARIANT=False))

    def layer():
        mod = torch.nn.Module()
        mod.weight = torch.nn.Parameter(torch.zeros(N, K).to(torch.float8_e4m3fn), requires_grad=False)
        mod.weight_scale = torch.nn.Parameter(torch.full((N, K // 32), 127, dtype=torch.uint8), requires_grad=False)
        return mod

    x = torch.randn(M, K, dtype=torch.bfloat16)
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        table = Path(tmp) / "t.json"
        table.write_text(json.dumps({"format": dispatch_table.FORMAT, "version": 1, "arch": "gfx950", "entries": [
            {"op": "scaled_mm", "dtype": "mxfp8", "layout": "nt", "bias": False, "m": 4096, "n": N, "k": K,
             "config": "mx_m128n128k128_w2x2_s2_g0"}]}))
        base, base_layer = StandInBase(), layer()
        baseline = per_call_us(base.apply_weights, (base_layer, x), args.number, args.repeat)

        kernel = cls.__new__(cls)
        for name, env in [("layer not in the table", {}),
                          ("routed layer, M not in the table", {dispatch_table.ENV: str(table)}),
                          ("routed layer, no table (recording)", {"TORCH_FLYDSL_RECORD_SHAPES": str(Path(tmp) / "s.json")})]:
            for key in (dispatch_table.ENV, "TORCH_FLYDSL_RECORD_SHAPES"):
                os.environ.pop(key, None)
            os.environ.update(env)
            dispatch_table.reload()
            lay = layer()
            if name == "layer not in the table":
                os.environ[dispatch_table.ENV] = str(table)
                dispatch_table.reload()
                lay.weight = torch.nn.Parameter(torch.zeros(N, K + 128).to(torch.float8_e4m3fn), requires_grad=False)
                lay.weight_scale = torch.nn.Parameter(torch.full((N, (K + 128) // 32), 127, dtype=torch.uint8),
                                                      requires_grad=False)
                xx = torch.randn(M, K + 128, dtype=torch.bfloat16)
            else:
                xx = x
            kernel.process_weights_after_loading(lay)
            routed = getattr(lay, vllm_mx.ROUTE_ATTR)
            assert routed == (name != "layer not in the table"), (name, routed)
            t = per_call_us(kernel.apply_weights, (lay, xx), args.number, args.repeat)
            rows[name] = t - baseline
        from torch_flydsl.deploy import record

        if record._process is not None:
            record._process.shapes.clear()  # nothing to save at exit
    print(f"base apply_weights (stand-in GEMM): {baseline:.2f} us/call")
    print(f"{'case':40s} {'added us/call':>14s}")
    for name, t in rows.items():
        print(f"{name:40s} {t:14.2f}")


if __name__ == "__main__":
    main()
