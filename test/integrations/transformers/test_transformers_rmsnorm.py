"""transformers' RMSNorm layers on FlyDSL through ``torch_flydsl.integrations.transformers``
(the ``kernels`` package's kernel-layer mapping, an in-process repository: no download).

A tiny Llama built from a config (random weights) is kernelized; in the emulator its
RMSNorm calls run the FlyDSL kernel and the logits match the model's own forward
(``torch_flydsl.disabled()``, bit-equal to the un-kernelized model), with and without autograd
(the backward is PyTorch's formula); a GptOss norm (Olmo2's formula) is served too; a
NemotronH norm (another formula) and ineligible calls keep their forward with a reason. Runs
where transformers and kernels are installed (``scripts/vllm_hook_test.sh``'s venv installs
both); skips elsewhere. Each case runs in a fresh process: the overrides are
registered at import for the keys the process's executor allows."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("transformers", reason="needs transformers 5.x (scripts/vllm_hook_test.sh's venv has it)")
pytest.importorskip("kernels", reason="needs the kernels package (pip install kernels; scripts/vllm_hook_test.sh installs it)")

PRELUDE = textwrap.dedent("""
    import json, logging, torch
    import torch_flydsl
    from torch_flydsl.integrations import transformers as flydsl_tf
    from transformers import LlamaConfig, LlamaForCausalLM
    notes = []
    class Rec(logging.Handler):
        def emit(self, r): notes.append(r.getMessage())
    logging.getLogger("torch_flydsl").addHandler(Rec(logging.DEBUG))
    out = {}
    def llama(dtype):
        torch.manual_seed(0)
        cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=2, vocab_size=128, max_position_embeddings=64)
        m = LlamaForCausalLM(cfg).eval()
        with torch.no_grad():
            for p in m.parameters():
                if p.dim() == 1:
                    p.normal_()  # RMSNorm weights: not all ones
        return m.to(dtype)
    def served():
        return sum(n.startswith("aten._fused_rms_norm: FlyDSL ") for n in notes)
    def rel(a, b):
        return ((a.double() - b.double()).abs().max() / b.double().abs().max()).item()
""")


def run(body: str, env: dict, timeout=900):
    code = PRELUDE + textwrap.dedent(body) + "\nprint(json.dumps(out))\n"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                       env={**os.environ, "TORCH_FLYDSL_LOG": "debug", **env})
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.emulator
def test_llama_rmsnorm_calls_run_flydsl_in_the_emulator_and_match_the_models_forward():
    r = run("""
        from transformers.models.gpt_oss.modeling_gpt_oss import GptOssRMSNorm
        from transformers.models.nemotron_h.modeling_nemotron_h import NemotronHRMSNorm
        ids = torch.randint(0, 128, (2, 7), generator=torch.Generator().manual_seed(1))
        for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
            m = llama(dtype)
            # Olmo2's formula (weight times fp32, then cast): served; NemotronH's: its own code
            m.model.layers[0].post_attention_layernorm = GptOssRMSNorm(64).to(dtype)
            m.model.layers[1].post_attention_layernorm = NemotronHRMSNorm(64).to(dtype)
            with torch.no_grad():
                for layer in m.model.layers:
                    layer.post_attention_layernorm.weight.normal_()
            with torch.no_grad():
                before = m(ids).logits
            flydsl_tf.kernelize(m)
            out[name + "_report"] = flydsl_tf.report(m)
            n0 = served()
            with torch.no_grad():
                ours = m(ids).logits
            out[name + "_served"] = served() - n0
            with torch.no_grad(), torch_flydsl.disabled():
                theirs = m(ids).logits
            out[name + "_disabled_is_the_models_forward"] = torch.equal(theirs, before)
            out[name + "_rel"] = rel(ours, theirs)
            if dtype == torch.bfloat16:  # Olmo2's formula rounds once, as the kernel does
                g, xx = m.model.layers[0].post_attention_layernorm, (torch.randn(5, 64) * 3).to(dtype)
                with torch.no_grad():
                    out["olmo2_bit_equal"] = [torch.equal(g(xx), type(g).forward(g, xx)), notes[-1]]
            if dtype == torch.float32:
                # autograd recording: F.rms_norm (FlyDSL forward, PyTorch's backward)
                n0 = served()
                loss = m(ids).logits.square().mean(); loss.backward()
                out["grad_served"] = served() - n0
                g_ours = {k: p.grad.clone() for k, p in m.named_parameters() if "norm" in k}
                m.zero_grad()
                with torch_flydsl.disabled():
                    m(ids).logits.square().mean().backward()
                out["grad_rel"] = max(rel(g_ours[k], p.grad) for k, p in m.named_parameters() if "norm" in k)
                norm = m.model.norm
                x = torch.randn(3, 64, dtype=torch.float64)
                with torch.no_grad():
                    out["fp64_same"] = torch.equal(norm(x), type(norm).forward(norm, x))
                out["fp64_note"] = notes[-1]
                norm.to("meta")  # the last use of this model
                with torch.no_grad():
                    y = norm(torch.empty(3, 64, device="meta"))
                out["meta"] = [y.device.type, notes[-1]]
        out["kept"] = [n for n in notes if "NemotronHRMSNorm" in n and "keeps its forward" in n]
    """, {"TORCH_FLYDSL_EXECUTOR": "emulator"})
    assert r["fp32_report"]["model.layers.1.post_attention_layernorm"].startswith(
        "NemotronHRMSNorm.forward is neither LlamaRMSNorm's nor Olmo2RMSNorm's formula")
    assert [k for k, v in r["fp32_report"].items() if v is None] == [
        "model.layers.0.input_layernorm", "model.layers.0.post_attention_layernorm",
        "model.layers.1.input_layernorm", "model.norm"]
    assert len(r["kept"]) == 2  # one info line per kernelize (fp32, bf16)
    for name, tol in (("fp32", 1e-5), ("bf16", 2e-2)):
        assert r[name + "_served"] == 4, r  # three Llama norms and GptOss's per forward; NemotronH's keeps its own
        assert r[name + "_disabled_is_the_models_forward"]
        assert r[name + "_rel"] <= tol, r
    assert r["olmo2_bit_equal"][0] and r["olmo2_bit_equal"][1].startswith("aten._fused_rms_norm: FlyDSL ")
    assert r["grad_served"] == 4
    assert r["grad_rel"] <= 1e-4, r
    assert r["fp64_same"]
    assert r["fp64_note"] == ("transformers LlamaRMSNorm: the model's forward: weight dtype torch.float32 differs "
                              "from the input's torch.float64: the model's forward promotes, F.rms_norm would not")
    assert r["meta"] == ["meta", "transformers LlamaRMSNorm: the model's forward: meta tensors"]


def test_without_a_gfx950_or_cpu_executor_every_call_keeps_the_models_forward():
    # The default executor on a CPU-only torch: nothing is mapped for the CPU, so kernels
    # leaves the models' forward in place, and the layer would decline anyway.
    r = run("""
        m = llama(torch.float32)
        ids = torch.randint(0, 128, (1, 5))
        with torch.no_grad():
            before = m(ids).logits
        out["mapping"] = {k: list(v) for k, v in flydsl_tf.mapping().items()}
        flydsl_tf.kernelize(m)
        with torch.no_grad():
            after = m(ids).logits
        out["same"] = torch.equal(before, after)
        out["served"] = served()
        out["info"] = [n for n in notes if n.startswith("transformers LlamaRMSNorm")]
        # The layer itself (as kernels would install it on a ROCm device) declines here too.
        norm = m.model.norm
        with torch.no_grad():
            y = flydsl_tf.FlyDSLRMSNorm.forward(norm, torch.randn(2, 64))
        out["layer_note"] = notes[-1]
    """, {"TORCH_FLYDSL_EXECUTOR": "device"})
    assert r["mapping"] == {"RMSNorm": []}
    assert r["same"] and r["served"] == 0
    assert r["info"] == ["transformers LlamaRMSNorm: keeps its forward: kernels kept the model's forward (mode "
                         "Mode.INFERENCE, devices mapped: none here)"], r["info"]
    assert r["layer_note"].startswith("transformers LlamaRMSNorm: the model's forward: the eager overrides are not "
                                      "registered in this process")


def test_torch_compile_traces_the_models_own_forward():
    # Under the reference stand-in an eager call would be served (first check); a compiled
    # graph (fullgraph: no break) holds the model's formula and reaches no eager override.
    r = run("""
        m = llama(torch.float32)
        flydsl_tf.kernelize(m)
        norm, x = m.model.norm, torch.randn(3, 64)
        with torch.no_grad():
            norm(x)
            out["eager"] = notes[-1]
            n0 = len(notes)
            y = torch.compile(norm, backend="aot_eager", fullgraph=True)(x)
            out["same"] = torch.equal(y, type(norm).forward(norm, x))
        out["calls"] = [n for n in notes[n0:] if n.startswith("aten.")]
        import kernels  # a TORCH_COMPILE mode: kernels keeps the model's forward (the layer says it does not compile)
        m2 = llama(torch.float32)
        flydsl_tf.kernelize(m2, mode=kernels.Mode.INFERENCE | kernels.Mode.TORCH_COMPILE)
        out["compile_mode"] = [type(m2.model.norm).forward is m2.model.norm.forward.__func__, notes[-1]]
    """, {"TORCH_FLYDSL_EXECUTOR": "reference-standin"})
    assert r["eager"].startswith("aten._fused_rms_norm: FlyDSL ")
    assert r["same"] and r["calls"] == []
    assert r["compile_mode"][0] and r["compile_mode"][1].startswith(
        "transformers LlamaRMSNorm: keeps its forward: kernels kept the model's forward (mode ")
