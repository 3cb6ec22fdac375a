"""Every FlyDSL compile the plugin starts runs in a worker process: a compile that aborts,
crashes or hangs declines that one kernel, with the reason, and the user's process lives.

The pool's plumbing is tested with stand-in jobs (``worker_standin_jobs``, no FlyDSL); the
abort with a stand-in compiler (``abort_standin_compiler``) that aborts its worker the way an
LLVM fatal error does, inside a real ``torch.compile(mode="max-autotune")`` run.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from concurrent.futures import Future
from pathlib import Path

import pytest
import torch

from torch_flydsl.runtime import isolated, workers

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "faults"))
import faultkit as fk  # noqa: E402

JOBS = "worker_standin_jobs"


@pytest.fixture
def pool(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    p = workers.Pool(2)
    yield p
    p.shutdown()


# -- the pool ------------------------------------------------------------------------------


def test_a_job_runs_in_another_process_and_its_worker_is_kept_for_the_next(pool):
    first, second = pool.run(f"{JOBS}:pid"), pool.run(f"{JOBS}:pid")
    assert first.ok and first.value != os.getpid()
    assert second.value == first.value and pool.started == 1
    assert pool.run(f"{JOBS}:add", (2, 3)).value == 5


def test_a_jobs_own_error_is_its_outcome_and_the_worker_lives_on(pool):
    out = pool.run(f"{JOBS}:fail")
    assert not out.ok and not out.crashed and out.error == "ValueError: a job's own error"
    assert pool.run(f"{JOBS}:add", (1, 1)).value == 2 and pool.started == 1


def test_an_aborting_job_names_the_signal_and_its_last_output_and_the_pool_replaces_the_worker(pool):
    out = pool.run(f"{JOBS}:abort")
    assert not out.ok and out.crashed
    assert "killed by signal SIGABRT" in out.error and "about to abort (stand-in)" in out.error
    assert pool.run(f"{JOBS}:add", (1, 2)).value == 3 and pool.started == 2


def test_a_job_past_its_time_limit_is_killed_and_says_so(pool):
    t0 = time.perf_counter()
    out = pool.run(f"{JOBS}:sleep", (30,), timeout=1)
    assert time.perf_counter() - t0 < 10
    assert out.crashed and "ran past its time limit of 1 s and was killed" in out.error


def test_a_job_sees_the_environment_it_was_sent_with_and_nothing_of_it_stays(pool):
    assert pool.run(f"{JOBS}:env", ("STANDIN_VAR",), env={"STANDIN_VAR": "a"}).value == "a"
    assert pool.run(f"{JOBS}:env", ("STANDIN_VAR",)).value is None


def test_submitted_jobs_run_side_by_side(pool):
    t0 = time.perf_counter()
    futures = [pool.submit(f"{JOBS}:sleep", (1.0,)) for _ in range(2)]
    assert [f.result().value for f in futures] == [1.0, 1.0]
    assert time.perf_counter() - t0 < 1.9  # two workers: not one after the other


PARENT = textwrap.dedent("""
    import sys, time
    from torch_flydsl.runtime import workers
    pool = workers.Pool(1)
    print(pool.run("worker_standin_jobs:pid").value, flush=True)
    pool.submit("worker_standin_jobs:sleep", (120,))
    time.sleep(120)
""")


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")  # reaped or a zombie: not running


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_workers_die_with_their_parent_however_it_dies_and_hold_none_of_its_streams(tmp_path, sig):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env=env, cwd=tmp_path)
    worker_pid = int(parent.stdout.readline())
    time.sleep(0.5)  # the sleeping job is running in the worker
    assert not _gone(worker_pid)
    parent.send_signal(sig)
    t0 = time.perf_counter()
    out, err = parent.communicate(timeout=10)  # EOF on its pipes: no worker holds them
    assert time.perf_counter() - t0 < 5
    deadline = time.monotonic() + 5
    while not _gone(worker_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _gone(worker_pid), f"worker {worker_pid} outlived its parent"


# -- FlyDSL compiles -----------------------------------------------------------------------


def standin_site(root: Path) -> str:
    """A PYTHONPATH that puts the abort stand-in compiler in place of the plugin's compile jobs."""
    site = root / "site"
    site.mkdir(parents=True, exist_ok=True)
    (site / "sitecustomize.py").write_text("import abort_standin_compiler\nabort_standin_compiler.install()\n")
    return os.pathsep.join([str(site), str(HERE)])


@pytest.mark.compile
def test_an_abort_inside_a_flydsl_compile_drops_that_config_and_max_autotune_returns_the_right_result(tmp_path):
    r = fk.run_model(tmp_path / "inductor", tmp_path,
                     {**fk.EMULATOR, "STANDIN_ABORT_CONFIG": fk.BASELINE_CFG}, pythonpath=standin_site(tmp_path))
    r.ok()  # exit 0, no traceback, PyTorch's result
    assert not r.flydsl_called  # the one FlyDSL choice lost: ATen serves
    dropped = r.dropped_lines()
    assert len(dropped) == 1 and fk.DROPPED in dropped[0], r.stderr[-3000:]
    assert "killed by signal SIGABRT" in dropped[0] and "abort stand-in" in dropped[0]


@pytest.mark.compile
def test_a_winner_whose_compile_aborts_at_run_time_is_computed_by_pytorch_naming_the_signal(tmp_path):
    r = fk.run_model(tmp_path / "inductor", tmp_path,
                     {**fk.EMULATOR, "STANDIN_ABORT_CONFIG": fk.BASELINE_CFG}, pythonpath=standin_site(tmp_path),
                     force_win=True)
    r.ok()
    assert r.flydsl_called and r.result["emulated"] == 0
    said = r.fallback_lines()
    assert len(said) == 1 and fk.FALLBACK in said[0] and "killed by signal SIGABRT" in said[0], r.stderr[-3000:]


@pytest.mark.emulator
def test_a_kernel_compiles_in_a_worker_once_and_later_runs_start_no_job(monkeypatch):
    from torch_flydsl.templates.dense_gemm.config import DenseGemmConfig
    from torch_flydsl.templates.dense_gemm.emulated import run_emulated

    runs = []
    real_run = workers.Pool.run
    monkeypatch.setattr(workers.Pool, "run", lambda self, ref, *a, **k: runs.append(ref) or real_run(self, ref, *a, **k))
    isolated.forget()
    a, b = torch.randn(40, 64, dtype=torch.bfloat16), torch.randn(64, 48, dtype=torch.bfloat16)
    cfg = DenseGemmConfig(32, 32, 32, 1, 1, 2, 0)
    for _ in range(2):
        out = torch.empty(40, 48, dtype=torch.bfloat16)
        run_emulated(cfg, a, b, out)
        torch.testing.assert_close(out.double(), a.double() @ b.double(), rtol=2e-2, atol=2e-2)
    assert runs == ["torch_flydsl.runtime.isolated:emulated_module"]


@pytest.fixture
def device_path(monkeypatch, tmp_path):
    """The device launch path's compile on this CPU: a ROCm root holding a linker, FlyDSL's disk
    cache in ``tmp_path/flydsl``, nothing compiled yet in this process."""
    from torch_flydsl.runtime import kernel_cache
    from torch_flydsl.runtime.probe import find_lld

    rocm = tmp_path / "rocm" / "llvm" / "bin"
    rocm.mkdir(parents=True)
    (rocm / "ld.lld").symlink_to(find_lld())
    monkeypatch.setenv("ROCM_PATH", str(tmp_path / "rocm"))
    monkeypatch.setenv("FLYDSL_RUNTIME_CACHE_DIR", str(tmp_path / "flydsl"))
    monkeypatch.delenv("TORCH_FLYDSL_CACHE_DIR", raising=False)
    monkeypatch.setattr(kernel_cache, "_COMPILED", {})
    monkeypatch.setattr(kernel_cache, "_FAILED", {})
    return tmp_path / "flydsl"


@pytest.mark.compile
def test_the_device_path_compiles_in_a_worker_and_this_process_only_loads_the_binary(monkeypatch, device_path):
    # A CPU machine runs the device path's compile too (FlyDSL 0.4+ compiles CPU tensors
    # without launching): LLVM's code generation must never run in this process.
    import flydsl.compiler.jit_function as jf

    from torch_flydsl.runtime import kernel_cache
    from torch_flydsl.templates.dense_gemm.config import DenseGemmConfig
    from torch_flydsl.templates.dense_gemm.launcher import compile_args

    isolated.forget()

    def no_codegen_here(*args, **kwargs):
        raise AssertionError("LLVM code generation ran in the user's process")

    monkeypatch.setattr(jf.MlirCompiler, "compile", classmethod(no_codegen_here))
    a, b = torch.randn(64, 128, dtype=torch.bfloat16), torch.randn(128, 64, dtype=torch.bfloat16)
    jit_fn, args = compile_args(DenseGemmConfig(32, 32, 32, 1, 1, 2, 0), a, b, torch.empty(64, 64, dtype=torch.bfloat16))
    compiled = kernel_cache.compiled_for(jit_fn, args, a.device)
    assert type(compiled).__name__ == "CompiledFunction"
    assert list(device_path.rglob("*.pkl"))  # the worker's binary, which this process loaded


def test_one_autotuning_rounds_candidates_are_all_sent_to_the_workers_at_once(monkeypatch):
    from torch_flydsl.inductor.choices import prefetch_compiles
    from torch_flydsl.inductor.offer import Offer
    from torch_flydsl.registry import family_for
    from torch_flydsl.templates.dense_gemm.family import FAMILY

    monkeypatch.setenv("TORCH_FLYDSL_EXECUTOR", "emulator")
    submitted = []

    class RecordingPool:
        def submit(self, ref, args, env, timeout):
            submitted.append(args[0].spec.cfg.key())
            return Future()  # never finishes: nothing compiles in this test

    monkeypatch.setattr(workers, "shared", lambda: RecordingPool())
    isolated.forget()
    family = family_for("mm")
    problem = FAMILY.explain_problem("mm", 256, 512, 512, torch.bfloat16)
    fitting, _ = family.configs_for(problem, "curated")
    assert len(fitting) > 2
    prefetch_compiles(Offer("mm", family, list(fitting), problem=problem), {})
    assert submitted == [c.key() for c in fitting]
    prefetch_compiles(Offer("mm", family, list(fitting), problem=problem), {})  # the first benchmark's turn
    assert len(submitted) == len(fitting)  # each config's job is found, not started again
    isolated.forget()


def test_a_bad_TORCH_FLYDSL_COMPILE_TIMEOUT_warns_once_and_uses_600_seconds(monkeypatch, caplog):
    import torch_flydsl_boot

    from torch_flydsl import config

    monkeypatch.setattr(torch_flydsl_boot, "_warned", set())
    monkeypatch.setenv("TORCH_FLYDSL_COMPILE_TIMEOUT", "soon")
    with caplog.at_level(logging.WARNING, logger="torch_flydsl"):
        assert config.compile_timeout() == 600 and config.compile_timeout() == 600
    said = [r.getMessage() for r in caplog.records if "TORCH_FLYDSL_COMPILE_TIMEOUT" in r.getMessage()]
    assert len(said) == 1 and "using the default '600'" in said[0]
    monkeypatch.setenv("TORCH_FLYDSL_COMPILE_TIMEOUT", "2.5")
    assert config.compile_timeout() == 2.5


@pytest.mark.compile
def test_a_binary_this_process_cannot_find_after_the_worker_built_it_compiles_here_with_one_warning(
        monkeypatch, device_path, caplog):
    import torch_flydsl_boot

    from torch_flydsl.runtime import kernel_cache
    from torch_flydsl.templates.dense_gemm.config import DenseGemmConfig
    from torch_flydsl.templates.dense_gemm.launcher import compile_args

    monkeypatch.setattr(torch_flydsl_boot, "_warned", set())
    # The worker "built" it somewhere this process does not look (a toolchain seen differently).
    monkeypatch.setattr(isolated, "build_for_device", lambda *args: True)
    a, b = torch.randn(64, 128, dtype=torch.bfloat16), torch.randn(128, 64, dtype=torch.bfloat16)
    # A config no other test of this process compiles (FlyDSL would hold it in memory).
    cfg = DenseGemmConfig.from_key("m64n64k64_w2x2_s4_g0")
    jit_fn, args = compile_args(cfg, a, b, torch.empty(64, 64, dtype=torch.bfloat16))
    with caplog.at_level(logging.WARNING, logger="torch_flydsl"):
        compiled = kernel_cache.compiled_for(jit_fn, args, a.device)
    assert type(compiled).__name__ == "CompiledFunction"
    said = [r.getMessage() for r in caplog.records if "compiled in a worker process, but this process" in r.getMessage()]
    assert len(said) == 1 and "compiling it here instead" in said[0]
