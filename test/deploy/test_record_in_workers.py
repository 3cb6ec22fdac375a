"""Shape recording survives the worker processes a model server starts: a ``multiprocessing``
child ends with ``os._exit`` (no ``atexit``), yet what it recorded reaches the shapes file, for
each start method; a forked child does not lose or double the parent's shapes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import json, multiprocessing as mp, os, sys
    import torch
    from torch_flydsl.deploy.record import note_from_env

    def gemm(m):
        return [torch.empty(m, 64, dtype=torch.bfloat16), torch.empty(64, 32, dtype=torch.bfloat16)]

    def child():
        note_from_env("mm", gemm(7))  # a worker's GEMM; the worker then ends with os._exit

    def recorded(path):
        if not os.path.exists(path):
            return []
        return sorted(s["m"] for s in json.load(open(path))["shapes"])

    if __name__ == "__main__":
        method, path = sys.argv[1], os.environ["TORCH_FLYDSL_RECORD_SHAPES"]
        note_from_env("mm", gemm(3))  # the parent records before it starts the worker
        p = mp.get_context(method).Process(target=child)
        p.start()
        p.join()
        print("AFTER_CHILD", json.dumps({"exitcode": p.exitcode, "m": recorded(path)}))
""")


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_a_multiprocessing_workers_shapes_reach_the_file_for_every_start_method(tmp_path, method):
    script = tmp_path / "serve.py"
    script.write_text(SCRIPT)
    shapes = tmp_path / "shapes.json"
    env = dict(os.environ, TORCH_FLYDSL_RECORD_SHAPES=str(shapes), PYTHONPATH=str(ROOT),
               TORCH_FLYDSL_EXECUTOR="reference-standin")
    r = subprocess.run([sys.executable, str(script), method], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    after_child = json.loads(r.stdout.split("AFTER_CHILD ", 1)[1])
    # The worker's shape is in the file when it has ended, before the parent did anything more
    # (the parent's own shape may be there too: it is saved soon after it is seen).
    assert after_child["exitcode"] == 0 and 7 in after_child["m"]
    doc = json.loads(shapes.read_text())
    assert sorted(s["m"] for s in doc["shapes"]) == [3, 7]  # and the parent's at its exit
    assert all(s["op"] == "mm" and s["n"] == 32 and s["k"] == 64 for s in doc["shapes"])


def test_a_save_registered_in_a_parent_is_registered_again_in_a_forked_child():
    from torch_flydsl.deploy import at_exit

    saved = []
    at_exit.on_exit("test-key", saved.append, "parent")
    assert at_exit.registered_here("test-key")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the parent's registration is not this process's
        os.close(r)
        os.write(w, b"1" if not at_exit.registered_here("test-key") else b"0")
        os._exit(0)
    os.close(w)
    assert os.read(r, 1) == b"1"
    os.waitpid(pid, 0)
    at_exit.on_exit("test-key", saved.append, "again")  # same process: registered once
    assert saved == []  # nothing runs before the process ends


WINNERS = textwrap.dedent("""
    import multiprocessing as mp, sys
    import torch
    from torch_flydsl.deploy import winners
    from torch_flydsl.templates.base import TensorMeta

    class Won:
        description = "FlyDSL m16n64k128_w1x4_s3_g0_sk4"

    class Lost:  # ATen's choice, which FlyDSL beat by more than the tie band
        description = ""
        name = "mm"

    def child():
        # What the Inductor glue does when it offers FlyDSL choices, then Inductor's feedback
        # on a benchmark that FlyDSL won; the worker then ends with os._exit.
        winners.ensure_installed(lambda node: node)
        metas = [TensorMeta.contiguous((16, 4096), torch.bfloat16), TensorMeta((4096, 4096), (1, 4096), torch.bfloat16)]
        winners.note({Won(): 0.0046, Lost(): 0.0060}, "mm", metas)

    if __name__ == "__main__":
        p = mp.get_context(sys.argv[1]).Process(target=child)
        p.start()
        p.join()
        sys.exit(p.exitcode)
""")


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_workers_inductor_winners_reach_the_table(tmp_path, method):
    from torch_flydsl import dispatch_table as dt

    script = tmp_path / "tune.py"
    script.write_text(WINNERS)
    table = tmp_path / "table.json"
    env = dict(os.environ, TORCH_FLYDSL_RECORD_WINNERS=str(table), PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, str(script), method], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    (e,) = dt.load(table).entries
    assert (e.op, e.layout, e.m, e.n, e.k, e.config, e.source) == ("mm", "nt", 16, 4096, 4096,
                                                                   "m16n64k128_w1x4_s3_g0_sk4", "inductor")
