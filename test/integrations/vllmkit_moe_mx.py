"""The stand-in ``vllm`` modules of the MXFP8 fused-MoE seam (torch_flydsl.integrations.vllm.moe_mx),
merged into vllmkit.STANDIN: vLLM 0.33's MXFP8 MoE oracle (``select_mxfp8_moe_backend`` over the
module-global ``_select_kernel_cls``), its native gfx950 experts and their base, the MoE
activations and the fused SwiGLU-OAI + MXFP8 quantizer's module, with the paths, names and call
contracts vLLM 0.33 has there and bodies written here (none of vLLM's code). The GPU-only pieces
raise, as vLLM's would on this CPU; the fused quantizer has a CPU body (what vLLM's docstring
says it computes: SwiGLU-OAI in fp32, then this package's MXFP8 quantizer).
"""

from __future__ import annotations

import textwrap

STANDIN = {
    "vllm/model_executor/layers/fused_moe/activation.py": textwrap.dedent('''
        import enum
        from dataclasses import dataclass


        class MoEActivation(enum.Enum):
            SILU = "silu"
            GELU = "gelu"
            SWIGLUOAI = "swigluoai"
            SWIGLUOAI_UNINTERLEAVE = "swigluoai_uninterleave"


        @dataclass
        class ApplyMoEActivationConfig:
            clamp_limit: object = None
            alpha: float = 1.0
            beta: float = 0.0

            @classmethod
            def from_configs(cls, moe_config, quant_config):
                pick = lambda q, m, d: q if q is not None else (m if m is not None else d)
                return cls(pick(getattr(quant_config, "gemm1_clamp_limit", None),
                                getattr(moe_config, "swiglu_limit", None), None),
                           pick(getattr(quant_config, "gemm1_alpha", None), getattr(moe_config, "swiglu_alpha", None),
                                1.0),
                           pick(getattr(quant_config, "gemm1_beta", None), getattr(moe_config, "swiglu_beta", None),
                                0.0))
        '''),
    "vllm/model_executor/layers/fused_moe/oracle/__init__.py": "",
    "vllm/model_executor/layers/fused_moe/oracle/fp8.py": textwrap.dedent('''
        import enum


        class Fp8MoeBackend(enum.Enum):
            AITER_MXFP8 = "AITER_MXFP8"
            TRITON_MXFP8 = "TRITON_MXFP8"
            EMULATION = "EMULATION"
        '''),
    "vllm/model_executor/layers/fused_moe/oracle/mxfp8.py": textwrap.dedent('''
        from vllm.model_executor.layers.fused_moe.oracle.fp8 import Fp8MoeBackend

        _SUPPORTED_BACKENDS = (Fp8MoeBackend.AITER_MXFP8, Fp8MoeBackend.TRITON_MXFP8, Fp8MoeBackend.EMULATION)
        _BACKEND_NAME_MAP = {"aiter": Fp8MoeBackend.AITER_MXFP8, "triton": Fp8MoeBackend.TRITON_MXFP8}


        def _mxfp8_backend_to_kernel_cls(backend):
            if backend == Fp8MoeBackend.AITER_MXFP8:
                raise ValueError("AITER's FlyDSL MoE is not installed")
            if backend == Fp8MoeBackend.TRITON_MXFP8:
                from vllm.model_executor.layers.fused_moe.experts.mxfp8_native_moe import Mxfp8NativeTritonExperts

                return [Mxfp8NativeTritonExperts]
            from vllm.model_executor.layers.fused_moe.experts.mxfp8_emulation_moe import Mxfp8EmulationTritonExperts

            return [Mxfp8EmulationTritonExperts]


        def _select_kernel_cls(backend, config):
            last = None
            for cls in _mxfp8_backend_to_kernel_cls(backend):
                supported, last = cls.is_supported_config(cls, config)
                if supported:
                    return cls
            raise ValueError(f"No supported MXFP8 expert class for {backend.value}: {last}")


        def select_mxfp8_moe_backend(config):
            if config.moe_backend != "auto":
                backend = _BACKEND_NAME_MAP[config.moe_backend]
                return backend, _select_kernel_cls(backend, config)
            for backend in _SUPPORTED_BACKENDS:
                try:
                    return backend, _select_kernel_cls(backend, config)
                except ValueError:
                    continue
            raise ValueError("No MXFP8 MoE backends available.")
        '''),
    "vllm/model_executor/layers/fused_moe/experts/mxfp8_emulation_moe.py": textwrap.dedent('''
        from vllm.model_executor.layers.fused_moe.activation import ApplyMoEActivationConfig
        from vllm.model_executor.layers.fused_moe.experts.triton_moe import TritonExperts


        class Mxfp8TritonExpertsBase(TritonExperts):
            def __init__(self, moe_config, quant_config):
                super().__init__(moe_config, quant_config)
                self.activation_config = ApplyMoEActivationConfig.from_configs(moe_config, quant_config)
                self.w1_scale_val = quant_config.w1_scale
                self.w2_scale_val = quant_config.w2_scale

            @staticmethod
            def _supports_current_device():
                return True

            @classmethod
            def is_supported_config(cls, self_cls, config):
                if not self_cls._supports_current_device():
                    return False, "kernel does not support the current device"
                return True, None


        class Mxfp8EmulationTritonExperts(Mxfp8TritonExpertsBase):
            def apply(self, *args, **kwargs):
                raise NotImplementedError("dequantize to bf16, then a Triton fused-MoE kernel: needs a GPU")
        '''),
    "vllm/model_executor/layers/fused_moe/experts/mxfp8_native_moe.py": textwrap.dedent('''
        from vllm.model_executor.layers.fused_moe.experts.mxfp8_emulation_moe import Mxfp8TritonExpertsBase
        from vllm.platforms import current_platform


        class Mxfp8NativeTritonExperts(Mxfp8TritonExpertsBase):
            @staticmethod
            def _supports_current_device():
                return current_platform.is_rocm() and current_platform.supports_mx()

            def apply(self, output, hidden_states, w1, w2, topk_weights, topk_ids, activation, global_num_experts,
                      expert_map, a1q_scale, a2_scale, workspace13, workspace2, expert_tokens_meta,
                      apply_router_weight_on_input):
                raise NotImplementedError("Triton dot_scaled grouped GEMMs: needs a gfx950 GPU")
        '''),
    "vllm/models/__init__.py": "",
    "vllm/models/minimax_m3/__init__.py": "",
    "vllm/models/minimax_m3/amd/__init__.py": "",
    "vllm/models/minimax_m3/amd/ops/__init__.py": textwrap.dedent('''
        import torch

        from vllm.model_executor.layers.quantization.utils.mxfp8_utils import mxfp8_e4m3_quantize


        def swiglu_oai_quantize_mxfp8(gate_up, alpha, beta, limit, block_m=64):
            """SwiGLU-OAI on split-layout [M, 2I] in fp32, then MXFP8 quantization."""
            i = gate_up.shape[-1] // 2
            gate, up = gate_up[:, :i].float(), gate_up[:, i:].float()
            if limit is not None:
                gate, up = gate.clamp(max=limit), up.clamp(-limit, limit)
            return mxfp8_e4m3_quantize(gate * torch.sigmoid(alpha * gate) * (up + beta))
        '''),
}
