"""The plugin package itself broken, with a warm FX-graph cache whose code calls
``torch.ops.torch_flydsl.dense_addmm_out`` (conftest ``warm_cache``).

test/test_autoload.py shows ``import torch`` surviving each plant. Here the broken process
also compiles the model that the warm cache holds. Observed behaviour, asserted below: the op
is missing (nothing registered it), yet PyTorch never gets to report a missing op, because
that cache entry is not reused. Its FX-graph key includes the plugin's Inductor choices
factory (``inductor_choices_class`` and its ``uuid()``, installed by the glue); a process
whose plugin failed has Inductor's default there, so the lookup misses and Inductor compiles
the model again without FlyDSL: ``extern_kernels.addmm``, PyTorch's result, exit code 0.
The one thing on stderr from the plugin is the boot module's warning, exactly once.
"""

from __future__ import annotations

import pytest

import faultkit as fk

DISABLED = "torch_flydsl disabled itself at import: "
HINT = " (TORCH_FLYDSL_DISABLE=1 silences this; `python -m torch_flydsl doctor` says more)"


@pytest.mark.emulator
@pytest.mark.parametrize(
    "plant, error",
    [
        ("broken __init__", "RuntimeError: planted: torch_flydsl is broken"),
        ("ops registration raises", "RuntimeError: planted: registering the ops failed"),
    ],
)
def test_broken_plugin_with_a_warm_cache_recompiles_without_flydsl(tmp_path, warm_copy, plant, error):
    r = fk.run_model(warm_copy, tmp_path, fk.EMULATOR, fk.shadow_plugin(tmp_path / "pp", plant)).ok()
    assert r.lines(DISABLED) == [DISABLED + error + HINT]
    assert (r.result["plugin"], r.result["ops"]) == (False, False)
    assert (r.result["fx_hits"], r.result["fx_misses"]) == (0, 1)
    assert r.result["calls"] == [
        "extern_kernels.addmm(arg1_1, arg2_1, reinterpret_tensor(arg0_1, (256, 128), (1, 256), 0), "
        "alpha=1, beta=1, out=buf0)"
    ]
    assert r.result["emulated"] == 0
