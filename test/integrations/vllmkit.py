"""A stand-in ``vllm`` package for the vLLM integration tests (none of vLLM's code: the module
paths, names, op schemas and dispatch keys of vLLM 0.33's seams, with bodies written here), and
helpers shared by the tests that use it or the real vLLM.

``real_vllm()``: the real vLLM is importable (and not the stand-in) in this process. The
stand-in runs wherever vLLM is not installed (the main venv, CI); scripts/vllm_hook_test.sh runs
the same tests against vLLM 0.33.0.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
import textwrap
from pathlib import Path

STANDIN = {
    "vllm/__init__.py": '"""Stand-in vllm package for torch_flydsl tests: not vLLM."""\n',
    "vllm/platforms/__init__.py": textwrap.dedent('''
        import enum


        class PlatformEnum(enum.Enum):
            CUDA = enum.auto()
            ROCM = enum.auto()
            CPU = enum.auto()


        class _CpuPlatform:
            dispatch_key = "CPU"
            _enum = PlatformEnum.CPU

            def is_rocm(self):
                return False

            def supports_mx(self):
                return False


        current_platform = _CpuPlatform()
        '''),
    "vllm/envs.py": textwrap.dedent('''
        import os

        environment_variables = {
            "VLLM_CACHE_ROOT": lambda: os.path.expanduser(os.getenv("VLLM_CACHE_ROOT", "~/.cache/vllm")),
            "VLLM_BATCH_INVARIANT": lambda: os.getenv("VLLM_BATCH_INVARIANT", "0") == "1",
        }

        def compile_factors():
            return {name: get() for name, get in environment_variables.items() if name != "VLLM_CACHE_ROOT"}


        def __getattr__(name):
            if name in environment_variables:
                return environment_variables[name]()
            raise AttributeError(name)
        '''),
    "vllm/model_executor/__init__.py": "",
    "vllm/model_executor/layers/__init__.py": "",
    "vllm/model_executor/layers/utils.py": textwrap.dedent('''
        import torch
        from vllm.platforms import current_platform

        _lib = torch.library.Library("vllm", "FRAGMENT")


        def rocm_unquantized_gemm_impl(x, weight, bias=None):
            return torch.nn.functional.linear(x, weight, bias)


        def rocm_unquantized_gemm_fake(x, weight, bias=None):
            return x.new_empty((*x.shape[:-1], weight.shape[0]))


        _lib.define("rocm_unquantized_gemm(Tensor x, Tensor weight, Tensor? bias=None) -> Tensor")
        _lib.impl("rocm_unquantized_gemm", rocm_unquantized_gemm_impl, current_platform.dispatch_key)
        _lib._register_fake("rocm_unquantized_gemm", rocm_unquantized_gemm_fake)
        '''),
}



# The MXFP8 linear-kernel seam (torch_flydsl.integrations.vllm.mx): the module paths, names and
# call contracts vLLM 0.33 has there, with CPU bodies written here.
STANDIN_MX = {
    "vllm/model_executor/kernels/__init__.py": "",
    "vllm/model_executor/kernels/linear/__init__.py": textwrap.dedent('''
        from vllm.platforms import PlatformEnum, current_platform
        from vllm.model_executor.kernels.linear.mxfp8.Mxfp8LinearKernel import Mxfp8LinearLayerConfig
        from vllm.model_executor.kernels.linear.mxfp8.rocm_native import RocmDotScaledMxfp8LinearKernel

        from vllm.model_executor.kernels.linear.mxfp4.aiter import AiterMxfp4LinearKernel
        from vllm.model_executor.kernels.linear.mxfp4.base import MxFp4LinearLayerConfig
        from vllm.model_executor.kernels.linear.mxfp4.emulation import EmulationMxfp4LinearKernel
        from vllm.model_executor.layers.quantization.utils.quant_utils import kMxfp4Static

        _POSSIBLE_MXFP8_KERNELS = {PlatformEnum.ROCM: [RocmDotScaledMxfp8LinearKernel]}
        _POSSIBLE_MXFP4_KERNELS = {PlatformEnum.ROCM: [AiterMxfp4LinearKernel, EmulationMxfp4LinearKernel]}


        def register_linear_kernel(kernel_class, platform, kernel_type="mp"):
            lists = {"mxfp8": _POSSIBLE_MXFP8_KERNELS, "mxfp4": _POSSIBLE_MXFP4_KERNELS}
            if kernel_type not in lists:
                raise ValueError(f"Unrecognized kernel type: {kernel_type}")
            lists[kernel_type].setdefault(platform, []).append(kernel_class)


        def init_mxfp4_linear_kernel(activation_quant_key=None):
            config = MxFp4LinearLayerConfig(activation_quant_key=activation_quant_key)
            for cls in _POSSIBLE_MXFP4_KERNELS.get(current_platform._enum, []):
                if (cls.is_supported()[0] and cls._supports_quant_scheme(kMxfp4Static, activation_quant_key)
                        and cls.can_implement(config)[0]):
                    return cls(config)
            raise ValueError("Failed to find a kernel that can implement the MXFP4 linear layer.")


        def init_mxfp8_linear_kernel(*, weight_shape, bmm_batch_size=None):
            config = Mxfp8LinearLayerConfig(weight_shape=weight_shape, bmm_batch_size=bmm_batch_size)
            for cls in _POSSIBLE_MXFP8_KERNELS.get(current_platform._enum, []):
                if cls.is_supported()[0] and cls.can_implement(config)[0]:
                    return cls(config)
            raise ValueError("Failed to find a kernel that can implement the MXFP8 linear layer.")
        '''),
    "vllm/model_executor/kernels/linear/mxfp8/__init__.py": "",
    "vllm/model_executor/kernels/linear/mxfp8/Mxfp8LinearKernel.py": textwrap.dedent('''
        from dataclasses import dataclass


        @dataclass
        class Mxfp8LinearLayerConfig:
            weight_shape: tuple
            bmm_batch_size: object = None


        class Mxfp8LinearKernel:
            def __init__(self, c):
                assert self.can_implement(c)[0] and self.is_supported()[0]
                self.config = c
        '''),
    "vllm/model_executor/kernels/linear/mxfp8/rocm_native.py": textwrap.dedent('''
        import torch

        from vllm.platforms import current_platform
        from .Mxfp8LinearKernel import Mxfp8LinearKernel


        def _mxfp8_dot_scaled_linear(x, w, w_scale):
            raise NotImplementedError("a Triton dot_scaled kernel: needs a gfx950 GPU")


        class RocmDotScaledMxfp8LinearKernel(Mxfp8LinearKernel):
            @classmethod
            def is_supported(cls, compute_capability=None):
                if not current_platform.is_rocm():
                    return False, "not ROCm"
                if not current_platform.supports_mx():
                    return False, "native MX requires CDNA4 (gfx95x)"
                return True, None

            @classmethod
            def can_implement(cls, c):
                return True, None

            def process_weights_after_loading(self, layer):
                pass

            def apply_weights(self, layer, x, bias=None):
                x2d = x.reshape(-1, x.shape[-1])
                out = _mxfp8_dot_scaled_linear(x2d, layer.weight, layer.weight_scale)
                out = out.reshape(*x.shape[:-1], layer.weight.shape[0])
                if bias is not None:
                    out = out + bias
                return out
        '''),
    "vllm/model_executor/layers/quantization/__init__.py": "",
    "vllm/model_executor/layers/quantization/utils/__init__.py": "",
    "vllm/model_executor/layers/quantization/utils/mxfp8_utils.py": textwrap.dedent('''
        import torch


        def mxfp8_e4m3_quantize(x, is_sf_swizzled_layout=False, alignment=0):
            """Per 32 values of a row: E8M0 scale 2^(floor(log2(amax)) - 8), values / scale in e4m3."""
            m, k = x.shape
            blocks = x.float().reshape(m, k // 32, 32)
            amax = blocks.abs().amax(-1).clamp_min(torch.finfo(torch.float32).tiny)
            exp = (torch.floor(torch.log2(amax)) - 8).clamp(-127, 127)
            q = (blocks / torch.exp2(exp)[..., None]).clamp(-448, 448).to(torch.float8_e4m3fn)
            return q.reshape(m, k), (exp + 127).to(torch.uint8)
        '''),
}
STANDIN.update(STANDIN_MX)

# The unquantized fused-MoE seam (torch_flydsl.integrations.vllm.moe): vLLM 0.33's CustomOp
# out-of-tree registry, its UnquantizedFusedMoEMethod and TritonExperts, with CPU bodies written
# here (the GPU-only pieces raise, as vLLM's would on this CPU).
STANDIN_MOE = {
    "vllm/model_executor/custom_op.py": textwrap.dedent('''
        op_registry = {}
        op_registry_oot = {}


        class CustomOp:
            def __new__(cls, *args, **kwargs):
                return super().__new__(op_registry_oot.get(cls.__name__, cls))

            @classmethod
            def register(cls, name):
                def decorator(op_cls):
                    op_cls.name = name
                    op_registry[name] = op_cls
                    return op_cls

                return decorator

            @classmethod
            def register_oot(cls, _decorated_op_cls=None, name=None):
                def decorator(op_cls):
                    reg_name = name if name is not None else cls.__name__
                    assert reg_name not in op_registry_oot, f"Duplicate op name: {reg_name}"
                    op_cls.name = reg_name
                    op_registry_oot[reg_name] = op_cls
                    return op_cls

                return decorator if _decorated_op_cls is None else decorator(_decorated_op_cls)
        '''),
    "vllm/model_executor/layers/fused_moe/__init__.py": "",
    "vllm/model_executor/layers/fused_moe/activation.py": textwrap.dedent('''
        import enum


        class MoEActivation(enum.Enum):
            SILU = "silu"
            GELU = "gelu"
        '''),
    "vllm/model_executor/layers/fused_moe/config.py": textwrap.dedent('''
        class FusedMoEQuantConfig:
            quant_dtype = None
            w1_bias = None
            w2_bias = None
            use_int4_w4a16 = False
            use_int8_w8a16 = False


        FUSED_MOE_UNQUANTIZED_CONFIG = FusedMoEQuantConfig()
        '''),
    "vllm/model_executor/layers/fused_moe/experts/__init__.py": "",
    "vllm/model_executor/layers/fused_moe/experts/triton_moe.py": textwrap.dedent('''
        class TritonExperts:
            def __init__(self, moe_config, quant_config):
                self.moe_config = moe_config
                self.quant_config = quant_config
                self._lora_context = None

            def adjust_N_for_activation(self, N, activation):
                return N // 2

            def activation(self, activation, output, input):
                raise NotImplementedError("vLLM's _C activation kernels: a GPU op")

            def moe_sum(self, input, output, topk_ids=None, expert_map=None):
                raise NotImplementedError("vLLM's _moe_C moe_sum: a GPU op")

            def _finalize_expert_output(self, expert_output, output, topk_ids=None, expert_map=None):
                self.moe_sum(expert_output, output, topk_ids, expert_map)

            def _uses_post_gemm2_hook(self, num_tokens):
                return False

            def apply(self, output, hidden_states, w1, w2, topk_weights, topk_ids, activation, global_num_experts,
                      expert_map, a1q_scale, a2_scale, workspace13, workspace2, expert_tokens_meta,
                      apply_router_weight_on_input):
                raise NotImplementedError("a Triton fused-MoE kernel: needs a GPU")
        '''),
    "vllm/model_executor/layers/fused_moe/unquantized_fused_moe_method.py": textwrap.dedent('''
        from vllm.model_executor.custom_op import CustomOp
        from vllm.model_executor.layers.fused_moe.experts.triton_moe import TritonExperts


        def select_unquantized_moe_backend(moe_config):
            return "TRITON", TritonExperts


        @CustomOp.register("unquantized_fused_moe")
        class UnquantizedFusedMoEMethod(CustomOp):
            def __init__(self, moe):
                self.moe = moe
                self.unquantized_backend, self.experts_cls = select_unquantized_moe_backend(moe_config=moe)
        '''),
}
STANDIN.update(STANDIN_MOE)
# Further seams' stand-in modules live beside this file, one ``vllmkit_<seam>.py`` per seam, each
# with a ``STANDIN`` dict of the same form (path -> source).
for _part in sorted(Path(__file__).parent.glob("vllmkit_*.py")):
    STANDIN.update(importlib.import_module(_part.stem).STANDIN)

def real_vllm() -> bool:
    return importlib.util.find_spec("vllm") is not None and not getattr(sys.modules.get("vllm"), "_standin", False)


def write_standin(root: Path) -> Path:
    for rel, text in STANDIN.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root




@contextlib.contextmanager
def gfx950_platform():
    """vLLM's current platform answering as a ROCm gfx950 (kernel selection only)."""
    from vllm.platforms import PlatformEnum, current_platform

    names = ("_enum", "is_rocm", "supports_mx")
    saved = {k: current_platform.__dict__[k] for k in names if k in current_platform.__dict__}
    current_platform._enum = PlatformEnum.ROCM
    current_platform.is_rocm = lambda: True
    current_platform.supports_mx = lambda: True
    try:
        yield
    finally:
        for k in names:
            current_platform.__dict__.pop(k, None)
        current_platform.__dict__.update(saved)


def traced(fn, *args):
    """``fn(*args)`` and the code objects of every Python function it ran (the dispatcher calls
    a kernel registered from Python as a Python function: the profiler sees which one)."""
    codes = []

    def prof(frame, event, arg):
        if event == "call":
            codes.append(frame.f_code)

    sys.setprofile(prof)
    try:
        out = fn(*args)
    finally:
        sys.setprofile(None)
    return out, codes


def write_table(path: Path, op: str, dtype: str, n: int, k: int, config: str, entries) -> str:
    """Write a dispatch table with one entry per ``(m, bias)`` of ``entries``; its path."""
    import json

    from torch_flydsl import dispatch_table

    doc = {"format": dispatch_table.FORMAT, "version": dispatch_table.VERSION, "arch": "gfx950",
           "entries": [{"op": op, "dtype": dtype, "layout": "nt", "bias": bias, "m": m, "n": n, "k": k,
                        "config": config} for m, bias in entries]}
    path.write_text(json.dumps(doc))
    return str(path)


def module_seam(name: str, tmp_path_factory):
    """The ``vllm`` this module's tests run against: ``vllm-0.33`` (the real one, installed by
    scripts/vllm_hook_test.sh; skipped elsewhere) or ``standin`` (this file's package; skipped
    where the real vLLM owns the namespace). A namespace with the seam's name."""
    import os
    import types

    import pytest

    if name == "vllm-0.33":
        if not real_vllm():
            pytest.skip("vLLM is not installed in this venv; scripts/vllm_hook_test.sh runs these against vLLM 0.33.0")
        from vllm import __version__

        assert __version__.startswith("0.33"), f"these tests read vLLM 0.33's seam; this is vLLM {__version__}"
        os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    else:
        if real_vllm():
            pytest.skip("the real vLLM owns the vllm namespace in this process; the stand-in runs where it is absent")
        if "vllm" not in sys.modules:
            sys.path.insert(0, str(write_standin(tmp_path_factory.mktemp("standin"))))
            import vllm

            vllm._standin = True
    return types.SimpleNamespace(name=name)
