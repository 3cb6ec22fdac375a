"""The plugin's variables reach vLLM's Ray actors (torch_flydsl.integrations.vllm.ray_env): when
vLLM loads the plugin in its driver, ``TORCH_FLYDSL_`` and ``FLYDSL_`` join
``VLLM_RAY_EXTRA_ENV_VAR_PREFIXES_TO_COPY`` after the user's own, and vLLM's list of the
variables it copies to its Ray actors then names them.

Each case runs a driver process against one of two copies of vLLM:

- ``vllm-0.33``: the real vLLM 0.33.0 (``vllm.envs`` and ``vllm.ray.ray_env.get_env_vars_to_copy``,
  vLLM's own function that builds the list). Needs the venv scripts/vllm_hook_test.sh builds;
  skipped where vLLM is not installed;
- ``standin``: a stand-in ``vllm`` package written here (none of vLLM's code): an ``envs`` that
  reads the variable at each access until its cache is enabled, as vLLM 0.33's does, and a
  ``get_env_vars_to_copy`` that follows vLLM's documented rule (its prefixes and the extra ones).

The Ray actor itself is a stand-in too (``standin_ray_actor``): a process started with the
node's environment plus only the variables that list names, ended by SIGKILL after its work.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from torch_flydsl.integrations.vllm import ray_env

ROOT = Path(__file__).resolve().parents[2]
VAR = ray_env.VARIABLE

STANDIN = {
    "vllm/__init__.py": '"""Stand-in vllm package for torch_flydsl\'s Ray env test: not vLLM."""\n',
    "vllm/envs.py": textwrap.dedent('''
        import functools
        import os

        environment_variables = {
            "VLLM_RAY_EXTRA_ENV_VAR_PREFIXES_TO_COPY": lambda: os.getenv("VLLM_RAY_EXTRA_ENV_VAR_PREFIXES_TO_COPY", ""),
        }
        if os.environ.get("STANDIN_WITHOUT_VARIABLE"):
            environment_variables.clear()


        def compile_factors():
            return {name: get() for name, get in environment_variables.items()}


        def _get(name):
            if name in environment_variables:
                return environment_variables[name]()
            raise AttributeError(name)


        _read = _get


        def __getattr__(name):
            return _read(name)


        def enable_envs_cache():
            global _read
            _read = functools.cache(_get)
            for name in environment_variables:
                _read(name)
        '''),
    "vllm/ray/__init__.py": "",
    "vllm/ray/ray_env.py": textwrap.dedent('''
        import os

        import vllm.envs as envs

        PREFIXES = ("VLLM_", "FLASH_ATTENTION_", "LMCACHE_", "NCCL_", "UCX_", "HF_", "HUGGING_FACE_")


        def get_env_vars_to_copy(exclude_vars=None, additional_vars=None, destination=None):
            value = getattr(envs, "VLLM_RAY_EXTRA_ENV_VAR_PREFIXES_TO_COPY", "")  # older: no such variable
            extra = tuple(t.strip() for t in value.split(",") if t.strip())
            names = set(envs.environment_variables)
            names |= {n for n in os.environ if n.startswith(PREFIXES + extra)}
            return (names | set(additional_vars or ())) - set(exclude_vars or ())
        '''),
}

DRIVER = textwrap.dedent("""
    import json, os, signal, subprocess, sys, time
    if sys.argv[1]:
        sys.path.insert(0, sys.argv[1])  # the stand-in vllm
    import vllm.envs as envs
    if os.environ.get("CACHE_FIRST"):
        envs.enable_envs_cache()  # vLLM read its variables for good before the plugin loaded
    import torch_flydsl_boot
    torch_flydsl_boot.vllm_register()
    torch_flydsl_boot.vllm_register()  # vLLM may load plugins twice in one process
    from vllm.ray.ray_env import get_env_vars_to_copy
    names = get_env_vars_to_copy(destination="standin_ray_actor")
    copied = {n: os.environ[n] for n in names if n in os.environ}
    out = {"value": os.environ.get("VLLM_RAY_EXTRA_ENV_VAR_PREFIXES_TO_COPY"), "copied": sorted(copied),
           "real": not sys.argv[1]}
    if os.environ.get("RUN_ACTOR"):
        # The stand-in Ray actor: the node's environment plus what vLLM copies; killed after its work.
        node = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR", "PYTHONPATH")}
        actor = subprocess.Popen([sys.executable, "-c", sys.argv[2]], env={**node, **copied}, stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
        out["actor_said"] = actor.stdout.readline().strip()
        shapes = os.environ["TORCH_FLYDSL_RECORD_SHAPES"]
        end = time.monotonic() + 60
        while time.monotonic() < end and not os.path.exists(shapes):
            time.sleep(0.1)
        time.sleep(0.5)
        actor.send_signal(signal.SIGKILL)
        out["actor_returncode"] = actor.wait(timeout=60)
    print("RESULT", json.dumps(out))
""")

ACTOR = textwrap.dedent("""
    import os, sys
    from torch_flydsl.deploy import record
    from torch_flydsl.deploy.spec import Shape
    record.note_shape(Shape.of("mm", dtype="bfloat16", layout="nt", bias=False, m=8, n=1024, k=512))
    print("DONE", os.environ.get("TORCH_FLYDSL_RECORD_SHAPES") is not None, flush=True)
    sys.stdin.read()  # until killed
""")


def installed_vllm() -> str:
    """The version of the vLLM installed in this venv ("" when none): the driver runs in a fresh
    process, where the installed vLLM is the one imported whatever this process holds."""
    import importlib.metadata

    try:
        return importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return ""


@pytest.fixture(params=["vllm-0.33", "standin"])
def seam(request, tmp_path):
    """The argument the driver takes: "" (the real vLLM) or the stand-in package's root."""
    if request.param == "vllm-0.33":
        version = installed_vllm()
        if not version:
            pytest.skip("vLLM is not installed in this venv; scripts/vllm_hook_test.sh runs these against vLLM 0.33.0")
        assert version.startswith("0.33"), f"these tests read vLLM 0.33's env copy; this is vLLM {version}"
        return ""
    root = tmp_path / "standin"
    for rel, text in STANDIN.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return str(root)


def drive(seam: str, tmp_path: Path, **extra) -> tuple[dict, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_FLYDSL_", "FLYDSL_", "VLLM_"))}
    env.update(PYTHONPATH=str(ROOT), VLLM_TARGET_DEVICE="cpu", TORCH_FLYDSL_LOG="info",
               TORCH_FLYDSL_RECORD_SHAPES=str(tmp_path / "shapes.json"), FLYDSL_GPU_ARCH="gfx950",
               VLLM_PLUGINS="torch_flydsl")
    env.update(extra)
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    r = subprocess.run([sys.executable, str(script), seam, ACTOR], capture_output=True, text=True, env=env,
                       timeout=600)
    assert r.returncode == 0 and "RESULT " in r.stdout, r.stderr[-4000:]
    return json.loads(r.stdout.split("RESULT ", 1)[1]), r.stderr


@pytest.mark.parametrize("value, expected, added", [
    ("", "TORCH_FLYDSL_,FLYDSL_", ["TORCH_FLYDSL_", "FLYDSL_"]),
    ("MYLIB_", "MYLIB_,TORCH_FLYDSL_,FLYDSL_", ["TORCH_FLYDSL_", "FLYDSL_"]),
    (" MYLIB_, OTHER_ ,", " MYLIB_, OTHER_,TORCH_FLYDSL_,FLYDSL_", ["TORCH_FLYDSL_", "FLYDSL_"]),
    ("FLYDSL_", "FLYDSL_,TORCH_FLYDSL_", ["TORCH_FLYDSL_"]),  # FLYDSL_ does not cover TORCH_FLYDSL_
    ("TORCH_,FLYDSL_", "TORCH_,FLYDSL_", []),  # a broader prefix covers ours: nothing added
    ("TORCH_FLYDSL_,FLYDSL_", "TORCH_FLYDSL_,FLYDSL_", []),
])
def test_the_prefixes_are_appended_after_the_users_value_once(value, expected, added):
    assert ray_env.with_prefixes(value) == (expected, added)
    assert ray_env.with_prefixes(expected) == (expected, [])  # idempotent


def test_vllms_env_copy_names_the_plugins_variables_once_vllm_loads_the_plugin(seam, tmp_path):
    out, stderr = drive(seam, tmp_path, VLLM_RAY_EXTRA_ENV_VAR_PREFIXES_TO_COPY="MYLIB_", MYLIB_X="1")
    assert out["value"] == "MYLIB_,TORCH_FLYDSL_,FLYDSL_"  # the user's value kept, in front
    for name in ("TORCH_FLYDSL_RECORD_SHAPES", "TORCH_FLYDSL_LOG", "FLYDSL_GPU_ARCH", "MYLIB_X"):
        assert name in out["copied"], out["copied"]
    said = [ln for ln in stderr.splitlines() if "added TORCH_FLYDSL_,FLYDSL_ to " + VAR in ln]
    assert len(said) == 1, stderr[-4000:]  # once, though vLLM loaded the plugin twice
    assert "will not reach" not in stderr


def test_without_the_plugin_vllms_env_copy_names_none_of_its_variables(seam, tmp_path):
    out, _ = drive(seam, tmp_path, TORCH_FLYDSL_DISABLE="1")
    assert out["value"] is None
    assert not [n for n in out["copied"] if n.startswith(("TORCH_FLYDSL_", "FLYDSL_"))], out["copied"]


def test_a_vllm_that_read_the_variable_for_good_already_gets_a_warning_naming_the_value_to_set(seam, tmp_path):
    out, stderr = drive(seam, tmp_path, CACHE_FIRST="1", VLLM_RAY_EXTRA_ENV_VAR_PREFIXES_TO_COPY="MYLIB_")
    assert not [n for n in out["copied"] if n.startswith("TORCH_FLYDSL_")]  # vLLM copies with its cached value
    said = [ln for ln in stderr.splitlines() if "will not reach its Ray actors" in ln]
    assert len(said) == 1 and f"{VAR}=MYLIB_,TORCH_FLYDSL_,FLYDSL_" in said[0], stderr[-4000:]


def test_a_vllm_without_the_variable_is_left_alone(tmp_path):
    root = tmp_path / "standin"
    for rel, text in STANDIN.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    out, stderr = drive(str(root), tmp_path, STANDIN_WITHOUT_VARIABLE="1")
    assert out["value"] is None
    assert f"this vLLM has no {VAR}" in stderr


def test_standin_ray_actor_started_with_vllms_env_copy_records_into_the_file_though_killed(seam, tmp_path):
    out, stderr = drive(seam, tmp_path, RUN_ACTOR="1", TORCH_FLYDSL_EXECUTOR="reference-standin")
    assert out["actor_said"] == "DONE True", stderr[-4000:]  # the actor saw TORCH_FLYDSL_RECORD_SHAPES
    assert out["actor_returncode"] == -signal.SIGKILL  # alive until killed: no exit hook ran
    doc = json.loads((tmp_path / "shapes.json").read_text())
    assert [(s["m"], s["n"], s["k"]) for s in doc["shapes"]] == [(8, 1024, 512)]
