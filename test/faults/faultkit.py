"""The fault suite's kit: run the user's program in a fresh process, plant faults, read results.

Every scenario runs ``model.py`` (a tiny ``torch.compile(mode="max-autotune")`` of a bf16
``nn.Linear`` with FLYDSL among the GEMM backends) as a file in a fresh interpreter, with an
environment built here from scratch: nothing of the test process's own plugin settings or
caches leaks in. ``Run`` holds what came back; ``Run.ok()`` is the contract every scenario
must keep (exit code 0, no traceback, PyTorch's result).

Planters take a directory to write in and return what the child needs (an env mapping, a
PYTHONPATH entry). Faults that hide or break modules go on PYTHONPATH through a
``sitecustomize.py`` or a shadow package. Only the script's own directory (this one, which
holds no package of those names) comes before PYTHONPATH on the child's sys.path; its cwd is
a fresh empty directory all the same (``python -c`` would put cwd first).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
MODEL = HERE / "model.py"

# bf16 GEMM vs a float64 reference: PyTorch's own path and the FlyDSL kernel both land far
# below this; a wrong kernel (or a wrong fallback) lands far above.
TOLERANCE = 2e-2
# What the shared warm cache was compiled with; scenarios that reuse it must match.
EMULATOR = {"TORCH_FLYDSL_EXECUTOR": "emulator"}
BASELINE_CFG = "m128n128k32_w2x2_s4_g0"
# How the plugin says FlyDSL was not used, with the reason appended:
# - the op ran outside autotuning (cached or compiled code) and PyTorch computed the result:
FALLBACK = f"FlyDSL {BASELINE_CFG} not used for these operands, PyTorch computes them: "
# - autotuning benchmarked the choice, the op could not run it, so it lost (ATen won):
DROPPED = f"FlyDSL config {BASELINE_CFG} dropped: KernelNotRun: FlyDSL {BASELINE_CFG} cannot run these operands here: "
# Environment variables that would steer the child from outside the scenario.
_SCRUB_PREFIXES = ("TORCH_FLYDSL_", "FLYDSL_", "TORCHINDUCTOR_", "TORCH_LOGS", "ROCM_PATH", "PYTHONPATH",
                   "TORCH_DEVICE_BACKEND_AUTOLOAD", "HSA_", "ARCH", "COMPILE_ONLY")


# Inductor's max-autotune report on stderr: it names the FlyDSL choices whatever happens.
_AUTOTUNE_REPORT = re.compile(
    r'(AUTOTUNE |strides: |dtypes: |Autotune Choices Stats:|\{"num_choices"|SingleProcess AUTOTUNE|  \S+ [\d.]+ ms )'
)


@dataclass
class Run:
    """One finished child: exit code, streams, and the JSON of the model's last stdout line."""

    returncode: int
    stdout: str
    stderr: str
    seconds: float
    result: Optional[dict] = field(default=None)

    @property
    def flydsl_called(self) -> bool:
        """The compiled code calls the plugin's op (a FlyDSL choice won autotuning)."""
        return any("torch.ops.torch_flydsl" in c for c in self.result["calls"])

    def lines(self, needle: str) -> list[str]:
        """stderr lines containing ``needle``."""
        return [ln for ln in self.stderr.splitlines() if needle in ln]

    def ok(self) -> "Run":
        """The contract of every scenario: the process ran to the end without a crash or a
        traceback and printed PyTorch's result (checked against float64)."""
        tail = self.stderr[-6000:]
        assert self.returncode == 0, f"exit code {self.returncode}\n{tail}"
        assert "Traceback" not in self.stderr, tail
        assert self.result is not None, f"no JSON result line\n{self.stdout[-2000:]}\n{tail}"
        assert self.result["max_rel_err"] < TOLERANCE, self.result
        return self

    def dropped_lines(self) -> list[str]:
        """Autotuning's "this FlyDSL choice could not run, it loses" warnings
        (choices.isolate_failures around the op raising ops.KernelNotRun)."""
        return self.lines("dropped: ")

    def fallback_lines(self) -> list[str]:
        """The op's "computed by PyTorch instead" warnings (ops._fall_back)."""
        return self.lines("not used for these operands, PyTorch computes them")

    def plugin_said(self) -> list[str]:
        """stderr lines about FlyDSL or the plugin, other than Inductor's own autotuning report
        (which names every choice, ours included)."""
        return [ln for ln in self.stderr.splitlines()
                if re.search(r"flydsl", ln, re.I) and not _AUTOTUNE_REPORT.match(ln)]


def clean_env(**env: Optional[str]) -> dict:
    """The child's environment: this one minus anything that steers torch, Inductor, FlyDSL or
    the plugin, plus ``env`` (a None value unsets). Inductor compiles in-process (frugal)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(_SCRUB_PREFIXES)}
    base.update({"TORCHINDUCTOR_COMPILE_THREADS": "1", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"})
    for k, v in env.items():
        if v is None:
            base.pop(k, None)
        else:
            base[k] = v
    return base


def start_model(cache: Path, workdir: Path, env: Optional[dict] = None, pythonpath: Optional[str] = None,
                **opts) -> tuple[subprocess.Popen, float]:
    """Start ``model.py`` in a fresh process (cwd = an empty directory under ``workdir``)."""
    cwd = workdir / "cwd"
    cwd.mkdir(parents=True, exist_ok=True)
    full = clean_env(TORCHINDUCTOR_CACHE_DIR=str(cache), **(env or {}))
    if pythonpath:
        full["PYTHONPATH"] = pythonpath
    proc = subprocess.Popen([sys.executable, str(MODEL), json.dumps(opts)], cwd=cwd, env=full,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, time.perf_counter()


def finish(proc: subprocess.Popen, t0: float, timeout: float = 300) -> Run:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        err += f"\n[faultkit] killed after {timeout}s"
    result = None
    last = out.strip().splitlines()[-1] if out.strip() else ""
    if last.startswith("{"):
        result = json.loads(last)
    return Run(proc.returncode, out, err, time.perf_counter() - t0, result)


def run_model(cache: Path, workdir: Path, env: Optional[dict] = None, pythonpath: Optional[str] = None,
              **opts) -> Run:
    """Run the model in a fresh process and wait for it. ``opts`` go to model.py."""
    return finish(*start_model(cache, workdir, env, pythonpath, **opts))


def once(tmp_path_factory, name: str, build):
    """``build(directory)`` run once per test session, even across pytest-xdist workers (a file
    lock in the directory they share); every caller gets its JSON-able return value."""
    from filelock import FileLock

    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # this session's dir above the workers' own (popen-gw0, ...)
    root, done = shared / name, shared / f"{name}.json"
    with FileLock(str(shared / f"{name}.lock")):
        if not done.exists():
            root.mkdir(exist_ok=True)
            done.write_text(json.dumps(build(root)))
    return json.loads(done.read_text())


def run_to_json(run: Run) -> dict:
    return run.__dict__.copy()


def run_from_json(d: dict) -> Run:
    return Run(**d)


def copy_cache(warm: Path, dest: Path) -> Path:
    """A private copy of a warm Inductor cache (symlinks kept as links), so that a fault
    planted in it never reaches another scenario."""
    shutil.copytree(warm, dest, symlinks=True)
    return dest


# -- planters ----------------------------------------------------------------------------------

def _sitecustomize(root: Path, code: str) -> str:
    root.mkdir(parents=True, exist_ok=True)
    (root / "sitecustomize.py").write_text(textwrap.dedent(code))
    return str(root)


def hide_flydsl(root: Path) -> str:
    """flydsl as after ``pip uninstall flydsl``: ``importlib.util.find_spec("flydsl")`` is None,
    ``import flydsl`` raises ModuleNotFoundError and its distribution metadata is gone. A
    ``sitecustomize`` swaps the path finder for one that skips flydsl. Returns a PYTHONPATH."""
    return _sitecustomize(root, """
        import sys
        from importlib.machinery import PathFinder

        def _ours(name):
            return name == "flydsl" or name.startswith("flydsl.")

        class NoFlydsl:
            @staticmethod
            def find_spec(name, path=None, target=None):
                return None if _ours(name) else PathFinder.find_spec(name, path, target)

            @staticmethod
            def find_distributions(*args, **kwargs):
                for d in PathFinder.find_distributions(*args, **kwargs):
                    if (d.metadata["Name"] or "").lower() != "flydsl":
                        yield d

            @staticmethod
            def invalidate_caches():
                PathFinder.invalidate_caches()

        sys.meta_path[:] = [NoFlydsl if f is PathFinder else f for f in sys.meta_path]
        """)


def flydsl_finder_raises(root: Path) -> str:
    """A meta-path finder ahead of all others that raises ModuleNotFoundError for flydsl, so
    that ``importlib.util.find_spec("flydsl")`` itself raises (not just returns None)."""
    return _sitecustomize(root, """
        import sys

        class Raises:
            @staticmethod
            def find_spec(name, path=None, target=None):
                if name == "flydsl" or name.startswith("flydsl."):
                    raise ModuleNotFoundError(f"No module named {name!r} (planted)", name=name)
                return None

        sys.meta_path.insert(0, Raises)
        """)


FLYDSL_BROKEN_MESSAGE = "libFlyPythonCAPI.so: cannot open shared object file (planted)"


def break_flydsl(root: Path) -> str:
    """An importable ``flydsl`` whose import raises, as with a missing shared library; its
    installed distribution metadata stays, so the plugin's probe still says "usable"."""
    pkg = root / "flydsl"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text(f"raise ImportError({FLYDSL_BROKEN_MESSAGE!r})\n")
    return str(root)


def no_linker(root: Path) -> dict:
    """No ld.lld anywhere the plugin or FlyDSL looks: PATH is one empty directory (the child
    is started by absolute path), ROCM_PATH an empty directory. The plugin's private
    ``<inductor cache>/torch_flydsl/rocm_lld`` link is consulted only around an lld that
    ``find_lld`` found, so a warm cache keeps no linker alive either."""
    bin_dir, rocm = root / "empty_bin", root / "empty_rocm"
    bin_dir.mkdir(parents=True, exist_ok=True)
    rocm.mkdir(parents=True, exist_ok=True)
    assert not Path("/opt/rocm/llvm/bin/ld.lld").exists(), "this machine has /opt/rocm's lld: scenario impossible"
    return {"PATH": str(bin_dir), "ROCM_PATH": str(rocm)}


def blocked_dir(root: Path) -> Path:
    """A directory path nobody can create, root included: its parent is a regular file."""
    root.mkdir(parents=True, exist_ok=True)
    blocker = root / "not_a_dir"
    blocker.write_bytes(b"a regular file\n")
    return blocker / "cache"


def plugin_cache(inductor_cache: Path) -> Path:
    """The plugin's own cache under Inductor's (FlyDSL's default cache dir, the lld link)."""
    return inductor_cache / "torch_flydsl"


def block_plugin_cache(inductor_cache: Path) -> Path:
    """Make the plugin's cache dir impossible to create or use: a regular file stands where
    ``<inductor cache>/torch_flydsl`` should be (a warm one is removed first)."""
    path = plugin_cache(inductor_cache)
    inductor_cache.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(path, ignore_errors=True)
    path.write_bytes(b"not a directory\n")
    return path


def fill_with_garbage(directory: Path, extra: tuple[str, ...] = ()) -> list[Path]:
    """Overwrite every file (and symlink) under ``directory`` with random bytes, and add
    ``extra`` relative paths holding random bytes too. Returns the files written."""
    import random

    rng = random.Random(0)
    written = []
    targets = [p for p in directory.rglob("*") if p.is_file() or p.is_symlink()] if directory.exists() else []
    targets += [directory / e for e in extra]
    for p in targets:
        p.parent.mkdir(parents=True, exist_ok=True)
        if p.is_symlink() or p.exists():
            p.unlink()
        p.write_bytes(bytes(rng.randrange(256) for _ in range(4096)))
        written.append(p)
    return written


def shadow_plugin(root: Path, plant: str) -> str:
    """A copy of the torch_flydsl package on PYTHONPATH with a planted fault (the installed
    ``torch_flydsl_boot`` entry point stays the real one). Returns the PYTHONPATH entry."""
    shutil.copytree(REPO / "torch_flydsl", root / "torch_flydsl", ignore=shutil.ignore_patterns("__pycache__"))
    pkg = root / "torch_flydsl"
    if plant == "broken __init__":
        (pkg / "__init__.py").write_text("raise RuntimeError('planted: torch_flydsl is broken')\n")
    elif plant == "ops registration raises":
        with open(pkg / "ops.py", "a") as f:
            f.write("\n\ndef register():\n    raise RuntimeError('planted: registering the ops failed')\n")
    else:
        raise ValueError(plant)
    return str(root)
