"""The torch.backends entry point: runs at `import torch`, cheap, never raises, has a kill switch.

These run in subprocesses because the behaviour under test happens inside `import torch`.
"""

import json
import os
import subprocess
import sys
import textwrap


PROBE = textwrap.dedent(
    """
    import json, sys
    import torch
    state = {
        "ops": hasattr(torch.ops.torch_flydsl, "dense_mm_out"),
        "flydsl_imported": any(m == "flydsl" or m.startswith("flydsl.") for m in sys.modules),
        "inductor_imported": "torch._inductor" in sys.modules,
        "dynamo_imported": "torch._dynamo" in sys.modules,
    }
    import torch_flydsl
    state["enabled"] = torch_flydsl.is_enabled()
    print(json.dumps(state))
    """
)


def run_probe(code=PROBE, **env):
    full_env = {**os.environ, **env}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full_env, timeout=300)
    assert r.returncode == 0, r.stderr
    return r


def probe(**env):
    return json.loads(run_probe(**env).stdout.strip().splitlines()[-1])


def test_entry_point_is_declared_for_torch_and_vllm():
    from importlib.metadata import entry_points

    torch_eps = [ep.value for ep in entry_points(group="torch.backends")]
    vllm_eps = [ep.value for ep in entry_points(group="vllm.general_plugins")]
    assert "torch_flydsl._autoload:autoload" in torch_eps
    assert "torch_flydsl._autoload:vllm_register" in vllm_eps


def test_import_torch_activates_the_plugin_without_heavy_imports():
    state = probe()
    assert state == {
        "ops": True,
        "flydsl_imported": False,
        "inductor_imported": False,
        "dynamo_imported": False,
        "enabled": True,
    }


def test_kill_switch_leaves_torch_untouched():
    state = probe(TORCH_FLYDSL_DISABLE="1")
    assert state["ops"] is False
    assert state["enabled"] is False


def test_torch_device_backend_autoload_off_disables_it_too():
    assert probe(TORCH_DEVICE_BACKEND_AUTOLOAD="0")["enabled"] is False


def test_a_failure_inside_the_plugin_never_breaks_import_torch():
    # sitecustomize-free way to make the plugin fail: an op namespace that can't be defined
    # because a different library already holds one of our op names.
    code = textwrap.dedent(
        """
        import warnings, torch_flydsl.ops as ops
        def boom():
            raise RuntimeError("planted failure")
        ops.register = boom
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            import torch
            import torch_flydsl._autoload as al
            al._done = False
            al.autoload()
        print([str(x.message) for x in w])
        """
    )
    r = run_probe(code, TORCH_FLYDSL_DISABLE="0")
    assert "planted failure" in r.stdout


def test_enable_is_idempotent_and_glue_installs_once_on_first_inductor_import():
    code = textwrap.dedent(
        """
        import torch, torch_flydsl
        assert torch_flydsl.enable() and torch_flydsl.enable()
        import torch._inductor.lowering
        import torch._inductor.config as ic
        from torch_flydsl.inductor.choices import is_ours
        f1 = ic.inductor_choices_class
        from torch_flydsl._autoload import _install_inductor
        _install_inductor()
        assert ic.inductor_choices_class is f1 and is_ours(f1)
        print("ok")
        """
    )
    assert run_probe(code).stdout.strip().endswith("ok")


def test_vllm_entry_point_can_run_twice():
    code = "import torch; from torch_flydsl._autoload import vllm_register as r; r(); r(); print('ok')"
    assert run_probe(code).stdout.strip() == "ok"


def test_glue_installs_even_when_inductor_imports_lowering_mid_initialisation():
    # torch._inductor.choices (and others) import lowering while they are half-initialised;
    # the hook fires inside that chain, so installing must not import them itself.
    code = textwrap.dedent(
        """
        import torch, importlib
        importlib.import_module("torch._inductor.choices")
        import torch._inductor.config as ic
        from torch_flydsl.inductor.choices import is_ours
        print(is_ours(ic.inductor_choices_class))
        """
    )
    assert run_probe(code).stdout.strip() == "True"
