"""The torch.backends entry point: runs at `import torch`, cheap, never raises, has a kill switch.

These run in subprocesses because the behaviour under test happens inside `import torch`.
"""

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest


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


def run_probe(code=PROBE, cwd=None, **env):
    full_env = {**os.environ, **env}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full_env, timeout=300,
                       cwd=cwd)
    assert r.returncode == 0, r.stderr
    return r


def probe(**env):
    return json.loads(run_probe(**env).stdout.strip().splitlines()[-1])


def test_entry_points_live_outside_the_package():
    # A broken torch_flydsl package must not be able to break `import torch`, so the entry
    # points are in the stdlib-only top-level module torch_flydsl_boot.
    from importlib.metadata import entry_points

    torch_eps = [ep.value for ep in entry_points(group="torch.backends")]
    vllm_eps = [ep.value for ep in entry_points(group="vllm.general_plugins")]
    assert "torch_flydsl_boot:autoload" in torch_eps
    assert "torch_flydsl_boot:vllm_register" in vllm_eps


def test_import_torch_activates_the_plugin_without_heavy_imports():
    state = probe()
    assert state == {
        "ops": True,
        "flydsl_imported": False,
        "inductor_imported": False,
        "dynamo_imported": False,
        "enabled": True,
    }


@pytest.mark.parametrize("raw", ["1", "true", "YES", "on"])
def test_kill_switch_leaves_torch_untouched(raw):
    state = probe(TORCH_FLYDSL_DISABLE=raw)
    assert state["ops"] is False
    assert state["enabled"] is False


def test_kill_switch_false_keeps_the_plugin_on():
    assert probe(TORCH_FLYDSL_DISABLE="false")["enabled"] is True


def test_torch_device_backend_autoload_off_disables_it_too():
    assert probe(TORCH_DEVICE_BACKEND_AUTOLOAD="0")["enabled"] is False


PACKAGE = Path(__file__).resolve().parents[1] / "torch_flydsl"


def _shadow(tmp_path, plant):
    """A copy of the package on PYTHONPATH (ahead of the installed one) with a planted fault;
    ``torch_flydsl_boot`` itself is the real, installed one."""
    root = tmp_path / "shadow"
    if plant == "package files removed":
        # The package's modules are gone but its dist-info (the entry point) remains. A finder
        # ahead of every other one stands in for the deletion, because an editable install's
        # own finder would still find files that a shadow copy lacks.
        root.mkdir(parents=True)
        (root / "sitecustomize.py").write_text(textwrap.dedent(
            """
            import sys
            class Gone:
                def find_spec(self, name, path=None, target=None):
                    if name == "torch_flydsl" or name.startswith("torch_flydsl."):
                        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            sys.meta_path.insert(0, Gone())
            """
        ))
    else:
        shutil.copytree(PACKAGE, root / "torch_flydsl", ignore=shutil.ignore_patterns("__pycache__"))
        path, text = {
            "broken __init__": ("__init__.py", "raise RuntimeError('planted failure')\n"),
            "broken _version": ("_version.py", "__version__ = undefined_name\n"),
            "syntax error in _autoload": ("_autoload.py", "def enable(:\n"),
            "ops registration raises": ("ops.py", "def register():\n    raise RuntimeError('planted failure')\n"),
        }[plant]
        if plant == "ops registration raises":
            text = (PACKAGE / "ops.py").read_text() + "\n\n" + text
        (root / "torch_flydsl" / path).write_text(text)
    return str(root)


FAULTS = ["broken __init__", "broken _version", "syntax error in _autoload", "ops registration raises", "package files removed"]
WORKS = "import torch; print(float(torch.ones(3).sum()))"


@pytest.mark.parametrize("plant", FAULTS)
def test_import_torch_survives_a_broken_plugin_package(tmp_path, plant):
    # cwd: `python -c` puts the working directory ahead of PYTHONPATH; the checkout's own
    # package must not hide the shadow.
    r = run_probe(WORKS, cwd=tmp_path, PYTHONPATH=_shadow(tmp_path, plant))
    assert r.stdout.strip() == "3.0"
    assert "torch_flydsl disabled itself at import" in r.stderr


@pytest.mark.parametrize("plant", ["broken __init__", "package files removed"])
def test_kill_switch_is_read_before_anything_of_the_package_is_imported(tmp_path, plant):
    code = WORKS + "; import sys; print('torch_flydsl' in sys.modules)"
    r = run_probe(code, cwd=tmp_path, PYTHONPATH=_shadow(tmp_path, plant), TORCH_FLYDSL_DISABLE="1")
    assert r.stdout.split() == ["3.0", "False"] and r.stderr == ""


def _family_modules():
    from torch_flydsl.registry import FAMILY_MODULES

    # Each family's descriptor, and its reference (which imports torch at module level, so the
    # entry point runs while it is half-imported and reads every family's descriptor).
    return [m for f in FAMILY_MODULES for m in (f, f.rsplit(".", 1)[0] + ".reference")]


@pytest.mark.parametrize(
    "first",
    ["torch_flydsl", "torch_flydsl.ops", "torch_flydsl.config", "torch_flydsl.templates.base", "torch_flydsl.explain",
     "torch_flydsl.eager", *_family_modules()],
)
def test_importing_our_modules_before_torch_still_enables_the_plugin(first):
    # Regression: `import torch_flydsl.ops` before torch ran the entry point while ops was
    # half-initialised (a circular-import RuntimeWarning) and left the plugin disabled; so did
    # a family package whose reference imported another family's half-imported reference.
    code = f"import {first}; import torch, torch_flydsl; print(torch_flydsl.is_enabled(), hasattr(torch.ops.torch_flydsl, 'dense_mm_out'))"
    r = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-c", code], capture_output=True, text=True,
                       env={**os.environ}, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "True"] and r.stderr == ""


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
    code = "import torch; from torch_flydsl_boot import vllm_register as r; r(); r(); print('ok')"
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
