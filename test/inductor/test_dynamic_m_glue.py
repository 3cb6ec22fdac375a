"""Dynamic M: a GEMM whose batch varies at run time (``torch.compile(dynamic=True)`` or
``torch._dynamo.mark_dynamic``) gets FlyDSL choices that take M at run time.

The kernel receives M, N, K as arguments, so one compiled kernel per config serves every M; the
dense family proves its layout and alignment rules for every M (not only Inductor's size hint)
and declines what it cannot prove, saying why. Compiles run in fresh processes
(``dynamic_linear_probe.py``); the first tests check the family's rules on symbolic sizes
directly.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import sympy
import torch

from test_injection import cache  # noqa: F401 (fixture)
from torch_flydsl.templates.base import INT32_MAX, Decline, TensorMeta
from torch_flydsl.templates.dense_gemm.family import FAMILY as family
from torch_flydsl.templates.dense_gemm.eligibility import check_problem_for_every_m
from torch_flydsl.templates.dense_gemm.problem import DynamicM

PROBE = Path(__file__).with_name("dynamic_linear_probe.py")
# A small config: 19 workgroups of 128 threads at M=300, K in one tile (fast to emulate).
CFG = "m16n32k128_w1x2_s3_g0"
BF16 = torch.bfloat16
s0 = sympy.Symbol("s0", integer=True, positive=True)


class SympyFacts:
    """Answers about symbolic sizes from sympy alone: ``s0 >= 2`` (Dynamo's backed sizes), no
    upper bound, size hint 64 (where every alignment rule holds: what fails is the proof)."""

    def __init__(self, hint=64):
        self.size_hint = hint

    def hint(self, x):
        return int(sympy.sympify(x).subs(s0, self.size_hint))

    def multiple_of(self, x, d):
        return sympy.Mod(sympy.sympify(x), d) == 0

    def geq(self, x, y):
        # s0 >= 2 is s0 + 1 for a positive s0.
        return bool(sympy.sympify(x - y).subs(s0, s0 + 1).is_nonnegative)

    def bounds(self, x):
        return 2, None


def meta(shape, stride, offset=0):
    return TensorMeta(tuple(shape), tuple(stride), BF16, offset)


def linear_operands(a_stride=None, a_offset=0, k=128, n=64):
    """x @ W.T with x [s0, k] (row-major unless ``a_stride``) and W [n, k] row-major, out [s0, n]."""
    return meta((s0, k), a_stride or (k, 1), a_offset), meta((k, n), (1, k)), meta((s0, n), (n, 1))


# -- the family's rules on symbolic sizes ------------------------------------------------------


def test_a_symbolic_m_gives_the_problem_at_the_size_hint_and_the_range_of_m():
    p = check_problem_for_every_m(*linear_operands(), facts=SympyFacts())
    assert isinstance(p, DynamicM)
    assert (p.at_hint.m, p.at_hint.n, p.at_hint.k, p.at_hint.layout) == (64, 64, 128, "nt")
    assert (p.m, p.m_min, p.m_max) == ("s0", 2, INT32_MAX)


def test_a_leading_stride_of_m_is_declined_because_its_alignment_is_not_proven_for_every_m():
    # A column-major with stride (1, M): 16-byte aligned rows only when M is a multiple of 8.
    a, b, out = linear_operands(a_stride=(1, s0))
    d = check_problem_for_every_m(a, b, out, facts=SympyFacts())
    assert d == Decline("alignment", "A's leading stride s0 is not provably a multiple of 16 bytes for every "
                                     "size (one compiled kernel serves them all)")


def test_a_leading_stride_that_is_a_multiple_of_8_elements_for_every_m_is_accepted():
    a = meta((8 * s0, 128), (1, 8 * s0))
    out = meta((8 * s0, 64), (64, 1))
    p = check_problem_for_every_m(a, linear_operands()[1], out, facts=SympyFacts())
    assert isinstance(p, DynamicM) and p.at_hint.layout == "tt" and p.at_hint.m == 512


def test_an_offset_built_from_m_must_stay_16_byte_aligned_for_every_m():
    ok = check_problem_for_every_m(*linear_operands(a_offset=128 * s0), facts=SympyFacts())
    assert isinstance(ok, DynamicM)
    d = check_problem_for_every_m(*linear_operands(a_offset=s0), facts=SympyFacts())
    assert d.category == "alignment" and "A starts s0 elements into its storage" in d.reason


@pytest.mark.parametrize("which", ["K", "N"])
def test_a_symbolic_n_or_k_is_declined_with_the_reason(which):
    k, n = (s0, 64) if which == "K" else (128, s0)
    a, b, out = meta((32, k), (k, 1)), meta((k, n), (n, 1)), meta((32, n), (n, 1))
    d = check_problem_for_every_m(a, b, out, facts=SympyFacts())
    assert d.category == "shape" and d.reason.startswith(f"symbolic {which}=s0: FlyDSL serves a size that varies "
                                                         "at run time only for M")


def test_a_rule_broken_at_the_size_hint_is_reported_with_the_hint():
    a, b, out = linear_operands()
    d = check_problem_for_every_m(a.replace(dtype=torch.float32), b, out.replace(dtype=torch.float32),
                                  facts=SympyFacts())
    assert d.category == "dtype" and d.reason.endswith("(at the size hint M=64)")


def test_a_config_whose_fit_changes_with_m_is_declined_for_a_dynamic_m(monkeypatch):
    from torch_flydsl.templates.dense_gemm import config

    small_m_only = config.DenseGemmConfig.from_key(CFG)
    monkeypatch.setattr(config, "search_space", lambda breadth="curated": [small_m_only, config.BASELINE])
    real_fits = config.config_fits

    def fits(cfg, problem):  # stands for a fit that depends on M, as split-K's does
        if cfg == small_m_only and problem.m > 4096:
            return Decline("fit", f"{cfg.key()}: M={problem.m} is too large for this config")
        return real_fits(cfg, problem)

    monkeypatch.setattr(config, "config_fits", fits)
    problem = check_problem_for_every_m(*linear_operands(), facts=SympyFacts())
    offered, declined = family.configs_for(problem, "curated")
    assert offered == [config.BASELINE]
    assert declined == [(small_m_only, Decline("fit", f"{CFG}: fits M=s0 at its size hint 64 but not at "
                                                       f"M={INT32_MAX} (M={INT32_MAX} is too large for this "
                                                       "config), and one compiled choice serves every M"))]
    # A static problem is unaffected.
    static_offered, _ = family.configs_for(problem.at_hint, "curated")
    assert static_offered == [small_m_only, config.BASELINE]


def test_autotuning_off_offers_the_hints_pick_among_configs_that_fit_every_m():
    from torch_flydsl.templates.dense_gemm import config

    a, b, out = linear_operands(k=4096, n=4096)
    problem = check_problem_for_every_m(a, b, out, facts=SympyFacts(hint=8))
    hint_pick = config.baseline_for(problem.at_hint)
    assert hint_pick.split_k > 1, "the scenario: a decode-sized hint picks split-K, which large M do not take"
    (offered,), declined = family.configs_for(problem, "baseline")
    assert offered.split_k == 1 and offered.block_m <= 32, offered  # still a decode-sized tile, for every M
    ((cfg, why),) = declined
    assert cfg == hint_pick and why.category == "fit", declined
    assert why.reason.startswith(f"{hint_pick.key()}: fits M=s0 at its size hint 8 but not at M={INT32_MAX} (")
    assert why.reason.endswith("), and one compiled choice serves every M")


# -- compiled nn.Linear, end to end ------------------------------------------------------------


def run_linear(cache_dir, executor, **opts):
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache_dir), "TORCH_FLYDSL_INTREE_POLICY": "plugin",
           "TORCH_FLYDSL_EXECUTOR": executor, "TORCH_FLYDSL_LOG": "info"}
    r = subprocess.run([sys.executable, str(PROBE), json.dumps({"cfg": CFG, **opts})], capture_output=True,
                       text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


# The bias expanded to [M, N] for a symbolic M: the generated call passes the batch it runs with.
SYMBOLIC_ROWS = re.compile(r"reinterpret_tensor\(\w+, \(s\d+, \d+\), \(0, 1\), 0\)")


def assert_one_kernel_serves_every_batch(r, batches):
    for call in r["calls"]:
        # The FlyDSL kernel (emulated) computed exactly this call's rows; the result is PyTorch's.
        assert call["kernel_rows"] == [call["batch"]], call
        assert call["rel_err"] < 1e-2 and call["rel_err_vs_eager"] < 1e-2, call
    assert [c["batch"] for c in r["calls"]] == batches
    assert r["kernel_compiles"] == 1 and r["emulator_programs"] == 1, r
    assert r["flydsl_log"] == []


@pytest.mark.emulator
def test_dynamic_linear_runs_one_compiled_kernel_for_every_batch(cache):
    batches = [1, 7, 64, 300]
    r = run_linear(cache, "emulator", batches=batches)
    assert_one_kernel_serves_every_batch(r, batches)
    # Dynamo specializes a batch of 1 (its own 0/1 rule), then compiles one graph with a symbolic
    # batch, which serves 7, 64 and 300 without recompiling: two graphs for four batches.
    assert [c["compiled_graph"] for c in r["calls"]] == [True, True, False, False] and r["frames"] == 2
    (dynamic_call,) = r["calls"][1]["flydsl_calls"]
    assert "torch_flydsl.dense_addmm_out" in dynamic_call and SYMBOLIC_ROWS.search(dynamic_call), dynamic_call
    assert any(re.fullmatch(rf"addmm node \S+: offering 1 FlyDSL config\(s\) for every s\d+ \(size hint 7\): {CFG}", n)
               for n in r["flydsl_notes"]), r["flydsl_notes"]


@pytest.mark.emulator
def test_mark_dynamic_linear_runs_one_compiled_kernel_for_every_batch(cache):
    batches = [7, 64, 1, 300]
    r = run_linear(cache, "emulator", batches=batches, mode="mark_dynamic")
    assert_one_kernel_serves_every_batch(r, batches)
    assert [c["compiled_graph"] for c in r["calls"]] == [True, False, True, False] and r["frames"] == 2
    assert SYMBOLIC_ROWS.search(r["calls"][0]["flydsl_calls"][0]), r["calls"][0]


def test_dynamic_linear_calls_the_plugin_op_with_the_family_pick_for_every_batch(cache):
    # Plumbing on every torch version, also where the emulator cannot run (flydsl 0.3.x): the
    # reference stand-in computes what the kernel would. The family picks the config (autotuning
    # off): at the decode-sized hint that is a narrow tile without split-K, whose fit would end
    # where the output tiles fill the GPU.
    batches = [5, 40, 300]
    r = run_linear(cache, "reference-standin", batches=batches, mode="mark_dynamic", features=[4096, 1024], cfg=None)
    assert [c["compiled_graph"] for c in r["calls"]] == [True, False, False] and r["frames"] == 1
    (call,) = r["calls"][0]["flydsl_calls"]
    assert "torch_flydsl.dense_addmm_out" in call and SYMBOLIC_ROWS.search(call), call
    (offer,) = [n for n in r["flydsl_notes"] if "offering" in n]
    assert re.fullmatch(r"addmm node \S+: offering 1 FlyDSL config\(s\) for every s\d+ \(size hint 5\): m16n\d+k\d+_w\dx\d_s\d_g\d",
                        offer), offer
    assert all(c["rel_err"] < 1e-2 for c in r["calls"]) and r["flydsl_log"] == []


def test_a_column_major_input_whose_leading_stride_is_the_batch_is_declined_with_the_reason(cache):
    r = run_linear(cache, "reference-standin", batches=[8, 64], mode="mark_dynamic", transposed_input=True)
    assert all(not c["flydsl_calls"] for c in r["calls"]) and all(c["rel_err"] < 1e-2 for c in r["calls"])
    assert any(re.fullmatch(r"addmm node \S+: no FlyDSL choice: \[alignment\] A's leading stride s\d+ is not provably "
                            r"a multiple of 16 bytes for every size \(one compiled kernel serves them all\)", n)
               for n in r["flydsl_notes"]), r["flydsl_notes"]


@pytest.mark.emulator  # FlyDSL 0.4+'s host argument packing, which the emulator harness shares
def test_the_device_launchers_one_compiled_kernel_is_called_with_each_calls_sizes():
    # On a GPU, launcher.launch compiles once per kernel spec and then calls that CompiledFunction
    # with every call's operands; FlyDSL packs them with the call spec built at its first call.
    # That spec must re-read sizes and pointers per call: packing M=300 with the spec of an M=7
    # call gives the bytes a fresh M=300 spec would.
    import ctypes

    from flydsl.compiler.jit_function import _build_call_spec, _unwrap_jit_function

    from torch_flydsl.templates.dense_gemm.config import DenseGemmConfig
    from torch_flydsl.templates.dense_gemm.launcher import compile_args

    cfg, w = DenseGemmConfig.from_key(CFG), torch.randn(64, 128, dtype=BF16)

    def bound_args(m):
        jit_fn, args = compile_args(cfg, torch.randn(m, 128, dtype=BF16), w.t(), torch.empty(m, 64, dtype=BF16))
        jf, _ = _unwrap_jit_function(jit_fn)
        jf._ensure_sig()
        bound = jf._sig.bind(*args)
        bound.apply_defaults()
        jf._resolve_arguments(bound.arguments)
        return jit_fn, jf, tuple(bound.arguments.values())

    def pack(spec, values):
        packed = []
        for i, ctype, fill in spec:
            slot = ctype()
            if fill is not None:
                fill(values[i], slot)
            packed.append(bytes(slot) if ctype is not ctypes.c_void_p else slot.value)
        return packed

    fn7, jf, at7 = bound_args(7)
    fn300, _, at300 = bound_args(300)
    assert fn7 is fn300  # one jit function (one compiled kernel) per spec, whatever M
    first_call_spec = _build_call_spec(jf._sig, at7)
    assert pack(first_call_spec, at300) == pack(_build_call_spec(jf._sig, at300), at300)
    assert pack(first_call_spec, at300) != pack(first_call_spec, at7)
