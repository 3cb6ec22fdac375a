"""The plugin's MXFP4 activation quantizer (``torch_flydsl.templates.scaled_gemm.quantize``, torch
ops) against vLLM's own portable Triton quantizer (``mxfp4_utils.downcast_to_mxfp``, what the
vLLM MXFP4 re-route runs on a GPU) on the same inputs: how many E8M0 scale bytes and packed E2M1
value bytes differ, and how far the dequantized results are apart. A column also counts the
blocks whose scale OCP's plain ``floor(log2(amax)) - 2`` would change (the rule without the
rounded maximum): what the rounding buys.

    python benchmarks/mxfp4_quantizer_compare.py [--rows 4096] [--k 4096] [--out mxfp4_quant_compare]
        [--vllm-file PATH/TO/vllm/model_executor/layers/quantization/utils/mxfp4_utils.py]

Needs a GPU with Triton (any vendor: the kernel is float32 bit arithmetic). With vLLM installed
its module is imported; ``--vllm-file`` instead loads that one file of vLLM's, with small
stand-ins for the vLLM modules it imports (for a machine without vLLM). Prints a table and
writes a CSV and, with matplotlib, a plot of the mismatch rates. Without a GPU it prints the plan.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import types
from pathlib import Path

import torch


def _standin_vllm() -> None:
    """The vLLM modules mxfp4_utils.py imports at module level, as small stand-ins."""
    import logging

    import triton
    import triton.language as tl

    def register(op_name, op_func, mutates_args=None, fake_impl=None, dispatch_key=None, **_):
        lib = torch.library.Library("vllm", "FRAGMENT")
        lib.define(op_name + torch.library.infer_schema(op_func, mutates_args=mutates_args or ()))
        lib.impl(op_name, op_func, "CompositeExplicitAutograd")
        _libs.append(lib)

    _libs: list = []
    mods = {
        "vllm": {},
        "vllm.logger": {"init_logger": logging.getLogger},
        "vllm.platforms": {"current_platform": types.SimpleNamespace(is_xpu=lambda: False, is_rocm=torch.version.hip is not None)},
        "vllm.triton_utils": {"tl": tl, "triton": triton},
        "vllm.utils": {},
        "vllm.utils.import_utils": {"get_triton_kernels_version": lambda: None, "has_triton_kernels": lambda: False},
        "vllm.utils.torch_utils": {"direct_register_custom_op": register, "is_torch_equal_or_newer": lambda v: True},
    }
    for name, attrs in mods.items():
        m = types.ModuleType(name)
        m.__dict__.update(attrs)
        m.__path__ = []  # a package, for the submodule imports
        sys.modules[name] = m


def vllm_quantizer(path: str | None):
    """vLLM's ``downcast_to_mxfp``: from the installed vLLM, or from the one file at ``path``."""
    if path is None:
        from vllm.model_executor.layers.quantization.utils.mxfp4_utils import downcast_to_mxfp

        return downcast_to_mxfp
    _standin_vllm()
    spec = importlib.util.spec_from_file_location("vllm_mxfp4_utils", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.downcast_to_mxfp


def inputs(rows: int, k: int, device: str) -> dict:
    """Named ``[rows, k]`` inputs: Gaussian at six magnitudes, heavy tails, outlier channels, and
    blocks built on the rule's edges (maxima just below / at 1.75 x 2^e, exact E2M1 ties)."""
    g = torch.Generator(device="cpu").manual_seed(0)
    gauss = torch.randn(rows, k, generator=g)
    out = {}
    for dtype in (torch.bfloat16, torch.float16):
        tag = "bf16" if dtype == torch.bfloat16 else "fp16"
        scale = torch.logspace(-4 if dtype == torch.float16 else -20, 4, rows).unsqueeze(1)
        out[f"gaussian x 10^[-4|-20,4] {tag}"] = (gauss * scale).to(dtype)
        out[f"heavy tails (randn^3) {tag}"] = (gauss**3).to(dtype)
        outliers = gauss.clone()
        outliers[:, ::97] *= 300.0
        out[f"outlier channels x300 {tag}"] = outliers.to(dtype)
    edge = torch.randn(rows, k, generator=g) * 0.2
    e = torch.randint(-10, 10, (rows, k // 32, 1), generator=g).float()
    peak = torch.where(torch.rand(rows, k // 32, 1, generator=g) < 0.5, 1.75, 1.7421875) * torch.exp2(e)
    edge = edge.reshape(rows, k // 32, 32) * torch.exp2(e)
    edge[:, :, :1] = peak
    ties = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0]).repeat(32)[:31]
    edge[:, ::3, 1:] = ties * torch.exp2(e[:, ::3] - 1)  # exact ties once divided by the block's scale
    out["edges (1.75 x 2^e maxima, ties) bf16"] = edge.reshape(rows, k).to(torch.bfloat16)
    return {name: x.to(device) for name, x in out.items()}


def compare(x: torch.Tensor, theirs) -> dict:
    from torch_flydsl.templates.scaled_gemm.quantize import BLOCK, mxfp4_quantize
    from torch_flydsl.templates.scaled_gemm.reference import e2m1_values

    v_ours, s_ours = mxfp4_quantize(x)
    v_them, s_them, _ = theirs(x, axis=-1)
    v_them, s_them = v_them.view(torch.uint8), s_them.view(torch.uint8)

    def dq(v, s):
        vals = torch.stack((e2m1_values(v & 0xF), e2m1_values(v >> 4)), dim=2).reshape(v.shape[0], -1)
        return vals * torch.exp2(s.double().repeat_interleave(BLOCK, dim=1) - 127)

    diff = (dq(v_ours, s_ours) - dq(v_them, s_them)).abs().max().item()
    amax = x.float().abs().reshape(x.shape[0], -1, BLOCK).amax(2)
    plain = torch.floor(torch.log2(amax.clamp_min(2.0**-126))) - 2
    plain_code = (plain.clamp(-127, 127) + 127).to(torch.uint8)
    return {"blocks": s_ours.numel(),
            "scale bytes differing": int((s_ours != s_them).sum()),
            "value bytes differing": int((v_ours != v_them).sum()),
            "value bytes": v_ours.numel(),
            "max |dequant diff|": diff,
            "blocks plain-OCP scale differs": int((plain_code != s_them).sum())}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=4096)
    p.add_argument("--k", type=int, default=4096)
    p.add_argument("--vllm-file", default=None, help="vLLM's mxfp4_utils.py, for a machine without vLLM")
    p.add_argument("--out", default="mxfp4_quant_compare")
    args = p.parse_args(argv)
    names = list(inputs(8, 64, "cpu"))
    if not torch.cuda.is_available():
        print("mxfp4_quantizer_compare: no GPU here; the plan: for each input below, "
              f"[{args.rows}, {args.k}], the plugin's quantizer vs vLLM's downcast_to_mxfp, bytes compared:")
        print("\n".join(f"  {n}" for n in names))
        return 0
    theirs = vllm_quantizer(args.vllm_file)
    rows = []
    for name, x in inputs(args.rows, args.k, "cuda").items():
        rows.append({"input": name, **compare(x, theirs)})
    from torch_flydsl.bench.tables import table, write_csv

    cols = list(rows[0])
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, [{args.rows}, {args.k}] per input")
    print(table([[r[c] for c in cols] for r in rows], cols, floatfmt=".3g"))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "mxfp4_quant_compare.csv", rows, cols)
    from torch_flydsl.bench.plots import matplotlib_pyplot

    plt = matplotlib_pyplot()
    if plt is not None:
        fig, ax = plt.subplots(figsize=(9, 4))
        ys = [r["value bytes differing"] / r["value bytes"] + 1e-9 for r in rows]
        ax.barh([r["input"] for r in rows], ys, label="value bytes differing (fraction)")
        ax.barh([r["input"] for r in rows], [r["blocks plain-OCP scale differs"] / r["blocks"] + 1e-9 for r in rows],
                alpha=0.4, label="blocks whose plain-OCP scale differs (fraction)")
        ax.set_xscale("log")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / "mxfp4_quant_compare.png", dpi=120)
    print(f"wrote {out}/mxfp4_quant_compare.csv" + (", .png" if plt is not None else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
