"""The stand-in ``vllm`` package's MXFP4 linear-kernel seam (torch_flydsl.integrations.vllm.mxfp4):
the module paths, names and call contracts vLLM 0.33 has there, with CPU bodies written here (none
of vLLM's code). ``vllmkit.STANDIN`` merges this dict."""

import textwrap

STANDIN = {
    "vllm/_aiter_ops.py": textwrap.dedent('''
        def is_aiter_found_and_supported():
            return False


        class rocm_aiter_ops:
            @staticmethod
            def is_asm_fp4_gemm_supported():
                return False
        '''),
    "vllm/model_executor/layers/quantization/utils/quant_utils.py": textwrap.dedent('''
        from dataclasses import dataclass


        @dataclass(frozen=True)
        class QuantKey:
            name: str


        kMxfp4Dynamic = QuantKey("mxfp4-dynamic")
        kMxfp4Static = QuantKey("mxfp4-static")
        kMxfp6E3M2Dynamic = QuantKey("mxfp6-e3m2-dynamic")
        '''),
    "vllm/model_executor/layers/quantization/utils/mxfp4_utils.py": textwrap.dedent('''
        def downcast_to_mxfp(src_tensor, axis, out_quant_tensor=None, out_scale=None):
            raise NotImplementedError("a Triton kernel: needs a GPU")
        '''),
    "vllm/model_executor/kernels/linear/mxfp4/__init__.py": "",
    "vllm/model_executor/kernels/linear/mxfp4/base.py": textwrap.dedent('''
        from dataclasses import dataclass

        from vllm.model_executor.layers.quantization.utils.quant_utils import kMxfp4Dynamic, kMxfp4Static


        @dataclass
        class MxFp4LinearLayerConfig:
            activation_quant_key: object = None


        class MxFp4LinearKernel:
            def __init__(self, config):
                assert self.can_implement(config)[0] and self.is_supported()[0]
                self.config = config

            @classmethod
            def _supports_quant_scheme(cls, weight_key, activation_key):
                return weight_key == kMxfp4Static and activation_key in (None, kMxfp4Dynamic)
        '''),
    "vllm/model_executor/kernels/linear/mxfp4/aiter.py": textwrap.dedent('''
        import torch

        from vllm.platforms import current_platform
        from vllm.model_executor.layers.quantization.utils.quant_utils import kMxfp4Dynamic
        from .base import MxFp4LinearKernel


        class AiterMxfp4LinearKernel(MxFp4LinearKernel):
            def __init__(self, config):
                super().__init__(config)
                self.use_asm_gemm = False
                self.out_dtype = torch.get_default_dtype()

            @classmethod
            def is_supported(cls, compute_capability=None):
                from vllm._aiter_ops import is_aiter_found_and_supported

                if not current_platform.supports_mx():
                    return False, "current platform does not support native MXFP4 computation"
                if is_aiter_found_and_supported():
                    return True, None
                return False, "AITER not found or not supported on the current platform"

            @classmethod
            def can_implement(cls, config):
                if config.activation_quant_key != kMxfp4Dynamic:
                    return False, "only supports MXFP4 dynamic activation"
                return True, None

            def process_weights_after_loading(self, layer):
                # the Triton GEMM's layout: scales transposed to [K/32, N]
                layer.weight_scale = torch.nn.Parameter(layer.weight_scale.data.T.contiguous(), requires_grad=False)

            def apply_weights(self, layer, x, bias=None):
                y = torch.ops.vllm.gemm_with_dynamic_quant(x, layer.weight, layer.weight_scale, self.use_asm_gemm,
                                                           self.out_dtype)
                if bias is not None:
                    y = y + bias
                return y
        '''),
    "vllm/model_executor/kernels/linear/mxfp4/emulation.py": textwrap.dedent('''
        from vllm.model_executor.layers.quantization.utils.quant_utils import kMxfp4Dynamic
        from .base import MxFp4LinearKernel


        def has_quark():
            return False


        class EmulationMxfp4LinearKernel(MxFp4LinearKernel):
            @classmethod
            def is_supported(cls, compute_capability=None):
                return True, None

            @classmethod
            def can_implement(cls, config):
                if not has_quark():
                    return False, "amd-quark package not available"
                return True, None

            def process_weights_after_loading(self, layer):
                pass

            def apply_weights(self, layer, x, bias=None):
                raise NotImplementedError("quark's quantize-dequantize: not in this stand-in")
        '''),
}
