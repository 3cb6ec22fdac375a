"""Every rank of a tensor/pipeline-parallel server records its shard's shapes into the one
``TORCH_FLYDSL_RECORD_SHAPES`` file, however its workers are started and ended, and none is lost
when several write at once.

Two stand-in executors (none of vLLM's code), each starting one worker process per rank the way
vLLM 0.33.0's executor of that kind does:

- ``standin_multiproc``: ``multiprocessing`` workers (fork by default, like
  ``VLLM_WORKER_MULTIPROC_METHOD``); each ends when its target returns (``os._exit``, no
  ``atexit``);
- ``standin_ray``: workers that are not ``multiprocessing`` children, whose environment is the
  node's plus only the driver's variables that vLLM copies to Ray actors (its prefixes and
  ``VLLM_RAY_EXTRA_ENV_VAR_PREFIXES_TO_COPY``, which the plugin extends: ``ray_env``), and which
  the driver ends with SIGKILL once their work is done (what ``ray.kill`` does: no exit hook).

A rank's GEMMs are its shards: column-parallel layers ``[N/TP, K]``, row-parallel ``[N, K/TP]``.
Each rank also records one M of its own, so a rank whose shapes were lost shows.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HIDDEN, INTERMEDIATE = 256, 512
# The layers of one transformer block: (name, N, K, how it is split across TP ranks).
LAYERS = (("qkv_proj", 3 * HIDDEN, HIDDEN, "column"), ("o_proj", HIDDEN, HIDDEN, "row"),
          ("gate_up_proj", 2 * INTERMEDIATE, HIDDEN, "column"), ("down_proj", HIDDEN, INTERMEDIATE, "row"))
COMMON_M = (1, 16, 64)
# vLLM 0.33.0's built-in prefixes (vllm/ray/ray_env.py: DEFAULT_ENV_VAR_PREFIXES), as facts.
VLLM_PREFIXES = ("VLLM_", "FLASH_ATTENTION_", "LMCACHE_", "NCCL_", "UCX_", "HF_", "HUGGING_FACE_")
EXTRA = "VLLM_RAY_EXTRA_ENV_VAR_PREFIXES_TO_COPY"

WORKER = textwrap.dedent("""
    import os, sys
    from torch_flydsl.deploy import record
    from torch_flydsl.deploy.spec import Shape

    LAYERS = {layers!r}
    COMMON_M = {common_m!r}


    def shard(n, k, split, tp):
        return (n // tp, k) if split == "column" else (n, k // tp)


    def serve(rank, tp):
        # What a rank's linear layers pose: its shard of every layer, at every batch size.
        for m in COMMON_M + (1000 + rank,):
            for _, n, k, split in LAYERS:
                sn, sk = shard(n, k, split, tp)
                record.note_shape(Shape.of("mm", dtype="bfloat16", layout="nt", bias=False, m=m, n=sn, k=sk))
        return sorted(s.m for s in record._process.shapes)  # this process's own recorder


    if __name__ == "__main__":  # a Ray-like worker: serve, say so, then wait to be killed
        rank, tp = int(sys.argv[1]), int(sys.argv[2])
        serve(rank, tp)
        print("DONE", flush=True)
        sys.stdin.read()  # until the driver kills this process
""").format(layers=LAYERS, common_m=COMMON_M)

MULTIPROC_DRIVER = textwrap.dedent("""
    import json, multiprocessing as mp, os, sys
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import worker
    from torch_flydsl.deploy import record
    from torch_flydsl.deploy.spec import Shape


    def run(rank, tp, q):
        q.put((rank, worker.serve(rank, tp)))


    if __name__ == "__main__":
        method, tp = sys.argv[1], int(sys.argv[2])
        # The driver ran a GEMM before it started its workers (a forked worker inherits its recorder).
        record.note_shape(Shape.of("mm", dtype="bfloat16", layout="nt", bias=False, m=7, n=8, k=8))
        ctx = mp.get_context(method)
        q = ctx.Queue()
        procs = [ctx.Process(target=run, args=(rank, tp, q)) for rank in range(tp)]
        for p in procs:
            p.start()
        own = dict(q.get(timeout=300) for _ in procs)
        for p in procs:
            p.join()
        print("RESULT", json.dumps({"exitcodes": [p.exitcode for p in procs], "own": own}))
""")


def expected(tp: int, ranks=None) -> set:
    """The (m, n, k) every rank of a TP group records (``ranks``: which ranks, default all)."""
    out = set()
    for rank in range(tp) if ranks is None else ranks:
        for m in COMMON_M + (1000 + rank,):
            for _, n, k, split in LAYERS:
                out.add((m, n // tp, k) if split == "column" else (m, n, k // tp))
    return out


def recorded(path: Path) -> set:
    if not path.exists():
        return set()
    return {(s["m"], s["n"], s["k"]) for s in json.loads(path.read_text())["shapes"]}


def write_scripts(tmp_path: Path) -> Path:
    (tmp_path / "worker.py").write_text(WORKER)
    (tmp_path / "driver.py").write_text(MULTIPROC_DRIVER)
    return tmp_path


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_standin_multiproc_every_ranks_shard_shapes_reach_the_one_file(tmp_path, method):
    tp = 4
    scripts = write_scripts(tmp_path)
    shapes = tmp_path / "shapes.json"
    env = dict(os.environ, TORCH_FLYDSL_RECORD_SHAPES=str(shapes), PYTHONPATH=str(ROOT),
               TORCH_FLYDSL_EXECUTOR="reference-standin")
    r = subprocess.run([sys.executable, str(scripts / "driver.py"), method, str(tp)], capture_output=True,
                       text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads(r.stdout.split("RESULT ", 1)[1])
    assert result["exitcodes"] == [0] * tp
    for rank, ms in result["own"].items():  # a forked worker records only its own shapes
        assert set(ms) == set(COMMON_M) | {1000 + int(rank)}, (rank, ms)
    assert recorded(shapes) == expected(tp) | {(7, 8, 8)}
    doc = json.loads(shapes.read_text())
    assert len(doc["shapes"]) == len(expected(tp)) + 1  # each shape once, however many ranks saw it


def ray_worker_env(driver_env: dict) -> dict:
    """A Ray actor's environment in the stand-in: the node's own (what the raylet was started
    with: no plugin variables) plus the driver's variables that vLLM copies (its prefixes and the
    extra ones)."""
    from torch_flydsl.integrations.vllm.ray_env import tokens

    prefixes = VLLM_PREFIXES + tuple(tokens(driver_env.get(EXTRA, "")))
    node = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    node["PYTHONPATH"] = str(ROOT)
    copied = {k: v for k, v in driver_env.items() if k.startswith(prefixes)}
    return {**node, **copied}


def start_standin_ray_workers(scripts: Path, driver_env: dict, tp: int) -> list:
    env = ray_worker_env(driver_env)
    return [subprocess.Popen([sys.executable, str(scripts / "worker.py"), str(rank), str(tp)], env=env,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for rank in range(tp)]


def wait_until(what, deadline_s: float) -> bool:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if what():
            return True
        time.sleep(0.1)
    return what()


def test_standin_ray_workers_shapes_reach_the_file_although_each_is_killed(tmp_path):
    from torch_flydsl.integrations.vllm.ray_env import with_prefixes

    tp = 4
    scripts = write_scripts(tmp_path)
    shapes = tmp_path / "shapes.json"
    driver_env = {"TORCH_FLYDSL_RECORD_SHAPES": str(shapes), "TORCH_FLYDSL_EXECUTOR": "reference-standin",
                  "VLLM_WORKER_MULTIPROC_METHOD": "fork"}
    # Without the plugin's prefixes, vLLM's copy gives the workers no TORCH_FLYDSL_* at all.
    assert "TORCH_FLYDSL_RECORD_SHAPES" not in ray_worker_env(driver_env)
    driver_env[EXTRA] = with_prefixes("")[0]  # what the plugin sets in vLLM's driver
    assert ray_worker_env(driver_env)["TORCH_FLYDSL_RECORD_SHAPES"] == str(shapes)
    procs = start_standin_ray_workers(scripts, driver_env, tp)
    try:
        for p in procs:
            line = p.stdout.readline()
            assert line.strip() == "DONE", (line, p.poll(), p.stderr.read() if p.poll() is not None else "")
        # The driver ends its actors after their work: the shapes are in the file by then
        # (saved within at_exit.DELAY_S of being seen), with no exit hook run.
        assert wait_until(lambda: recorded(shapes) >= expected(tp), 60), sorted(expected(tp) - recorded(shapes))
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
            p.wait(timeout=60)
    assert [p.returncode for p in procs] == [-signal.SIGKILL] * tp  # each was alive until killed
    assert recorded(shapes) == expected(tp)


BURST = textwrap.dedent("""
    import os, sys, time
    from torch_flydsl.deploy import record
    from torch_flydsl.deploy.spec import Shape

    me, count, go = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    while not os.path.exists(go):  # every writer starts at once
        time.sleep(0.01)
    for i in range(count):  # new shapes over several of the saver's rounds
        record.note_shape(Shape.of("mm", dtype="bfloat16", layout="nt", bias=False, m=i + 1, n=64 * (me + 1), k=128))
        if i % 10 == 9:
            time.sleep(0.3)
    print("DONE", flush=True)
    sys.stdin.read()
""")


def test_several_processes_saving_into_one_file_at_once_lose_no_shape(tmp_path):
    writers, count = 6, 40
    (tmp_path / "burst.py").write_text(BURST)
    shapes, go = tmp_path / "shapes.json", tmp_path / "go"
    env = dict(os.environ, TORCH_FLYDSL_RECORD_SHAPES=str(shapes), PYTHONPATH=str(ROOT))
    procs = [subprocess.Popen([sys.executable, str(tmp_path / "burst.py"), str(me), str(count), str(go)], env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for me in range(writers)]
    want = {(i + 1, 64 * (me + 1), 128) for me in range(writers) for i in range(count)}
    try:
        time.sleep(1)
        go.write_text("")
        for p in procs:
            assert p.stdout.readline().strip() == "DONE", p.stderr.read() if p.poll() is not None else ""
        assert wait_until(lambda: recorded(shapes) >= want, 60), len(want - recorded(shapes))
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
            p.wait(timeout=60)
    assert recorded(shapes) == want
    assert len(json.loads(shapes.read_text())["shapes"]) == len(want)


def test_a_new_shape_is_saved_soon_and_a_shape_seen_before_writes_nothing(tmp_path, monkeypatch):
    from torch_flydsl.deploy import at_exit, files, record
    from torch_flydsl.deploy.spec import Shape

    path = tmp_path / "shapes.json"
    monkeypatch.setenv("TORCH_FLYDSL_RECORD_SHAPES", str(path))
    monkeypatch.setattr(record, "_process", None)
    monkeypatch.setattr(at_exit, "DELAY_S", 0.2)
    writes = []
    real_update = files.update
    monkeypatch.setattr(files, "update", lambda *a, **k: writes.append(a[0]) or real_update(*a, **k))
    one = Shape.of("mm", dtype="bfloat16", layout="nt", bias=False, m=3, n=64, k=128)
    record.note_shape(one)
    assert wait_until(lambda: recorded(path) == {(3, 64, 128)}, 30)
    assert wait_until(lambda: at_exit._thread is None, 30)  # the saver thread ends once quiet
    for _ in range(100):
        record.note_shape(one)
    time.sleep(3 * at_exit.DELAY_S)
    assert writes == [path] and at_exit._thread is None  # seen before: no save asked for, none run
    record.note_shape(Shape.of("mm", dtype="bfloat16", layout="nt", bias=False, m=5, n=64, k=128))
    assert wait_until(lambda: recorded(path) == {(3, 64, 128), (5, 64, 128)}, 30)
    record._process.shapes.clear()  # nothing for the at-exit save of this test process


def test_a_fork_waits_for_a_save_in_flight_and_the_child_saves_its_own(tmp_path, monkeypatch):
    """The parent's saver thread holds the file lock while it writes; a fork in the meantime must
    not leave the child holding that lock (flock belongs to the open file the child inherits)."""
    from torch_flydsl.deploy import at_exit, files

    path = tmp_path / "f.txt"
    in_save, release = threading.Event(), threading.Event()

    def slow_save():
        if in_save.is_set():
            return  # once only (this test process's exit runs it again)

        def change():
            in_save.set()
            release.wait(30)
            return "parent\n"
        files.update(path, change)

    at_exit.on_exit("test-fork-save", slow_save)
    at_exit.soon("test-fork-save")
    assert in_save.wait(30)
    r, w = os.pipe()
    threading.Timer(0.5, release.set).start()  # the fork below waits for this save
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child: the parent's save is over, its lock free for the child's own
        os.close(r)
        try:
            files.update(path, lambda: "child\n")
            os.write(w, b"1")
        finally:
            os._exit(0)
    os.close(w)
    waited = time.monotonic() - started
    assert os.read(r, 1) == b"1"
    os.waitpid(pid, 0)
    assert waited >= 0.3  # the fork waited for the save in flight
    assert path.read_text() == "child\n"


WINNER = textwrap.dedent("""
    import sys
    import torch
    from torch_flydsl.deploy import winners
    from torch_flydsl.templates.base import TensorMeta

    class Won:
        description = "FlyDSL m16n64k128_w1x4_s3_g0_sk4"

    class Lost:  # ATen's choice, which FlyDSL beat by more than the tie band
        description = ""
        name = "mm"

    # What the Inductor glue does when it offers FlyDSL choices, then Inductor's feedback on a
    # benchmark that FlyDSL won, in a rank's shard ([N/TP, K] = [1024, 4096] at TP=4).
    winners.ensure_installed(lambda node: node)
    metas = [TensorMeta.contiguous((16, 4096), torch.bfloat16), TensorMeta((4096, 1024), (1, 4096), torch.bfloat16)]
    winners.note({Won(): 0.0046, Lost(): 0.0060}, "mm", metas)
    print("DONE", flush=True)
    sys.stdin.read()  # until killed
""")


def test_standin_ray_worker_inductor_winner_reaches_the_table_though_killed(tmp_path):
    from torch_flydsl import dispatch_table as dt

    table = tmp_path / "table.json"
    env = dict(os.environ, TORCH_FLYDSL_RECORD_WINNERS=str(table), PYTHONPATH=str(ROOT))
    p = subprocess.Popen([sys.executable, "-c", WINNER], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "DONE", p.stderr.read() if p.poll() is not None else ""
        assert wait_until(table.exists, 60)
    finally:
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
        p.wait(timeout=60)
    assert p.returncode == -signal.SIGKILL
    (e,) = dt.load(table).entries
    assert (e.op, e.m, e.n, e.k, e.config, e.source) == ("mm", 16, 1024, 4096, "m16n64k128_w1x4_s3_g0_sk4", "inductor")
