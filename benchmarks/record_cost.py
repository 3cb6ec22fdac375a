"""What ``TORCH_FLYDSL_RECORD_SHAPES`` costs a process that records, and how soon a shape is in the file.

CPU only. Measured in this process, with recording on and the file in a temporary directory:

- ``seen``: one call of a shape this process has seen before: ``note_shape(shape)`` (what the
  MXFP8 and MoE re-routes call with a ready Shape) and ``note_from_env("mm", [x, w])`` (the
  dense re-route and Inductor: the shape is read from the operands first);
- ``new``: one call of a shape not seen before, on the calling thread (the save runs on the saver
  thread; its time is not in this number, but it holds the GIL while it writes);
- ``save``: one merge of this process's shapes into a file that already holds ``S`` shapes
  (read, merge, write, fsync, under the file lock), on the saver thread;
- ``delay``: from the note of a new shape to the file holding it, for the first shape of a quiet
  process (saved at once) and for one noted while the saver thread waits (saved within
  ``at_exit.DELAY_S``).

Median of ``--repeat`` runs, in microseconds per call (``save`` and ``delay`` in milliseconds).
``--tree DIR`` imports torch_flydsl from another checkout (e.g. ``git archive HEAD~1 | tar -x -C
DIR``) to compare; what that tree lacks is reported as n/a.

    .venv/bin/python benchmarks/record_cost.py [--number 20000] [--repeat 7] [--tree DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import timeit
from pathlib import Path


def per_call_us(fn, number: int, repeat: int) -> float:
    runs = timeit.repeat(fn, number=number, repeat=repeat)
    return statistics.median(runs) / number * 1e6


def wait_for(path: Path, m: int, timeout: float = 30.0) -> float:
    """Seconds until ``path`` lists a shape with this ``m`` (re-read only when it was replaced)."""
    start, seen = time.perf_counter(), None
    while time.perf_counter() - start < timeout:
        try:
            stamp = path.stat().st_ino, path.stat().st_mtime_ns
            if stamp != seen:
                seen = stamp
                if any(s["m"] == m for s in json.loads(path.read_text())["shapes"]):
                    return time.perf_counter() - start
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.0005)
    return float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--number", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--tree", type=Path, default=Path(__file__).resolve().parents[1],
                    help="the checkout to import torch_flydsl from (default: this one)")
    args = ap.parse_args()
    sys.path.insert(0, str(args.tree.resolve()))
    tmp = Path(tempfile.mkdtemp(prefix="record_cost_"))
    path = tmp / "shapes.json"
    os.environ["TORCH_FLYDSL_RECORD_SHAPES"] = str(path)

    import torch

    from torch_flydsl.deploy import at_exit, record
    from torch_flydsl.deploy.spec import Shape

    assert Path(record.__file__).resolve().is_relative_to(args.tree.resolve()), record.__file__
    n, k = 4096, 4096

    def shape(m: int) -> Shape:
        return Shape.of("mm", dtype="bfloat16", layout="nt", bias=False, m=m, n=n, k=k)

    out: dict = {"tree": str(args.tree), "delay_s": getattr(at_exit, "DELAY_S", None)}
    seen = shape(8)
    record.note_shape(seen)
    x, w = torch.empty(8, k, dtype=torch.bfloat16), torch.empty(k, n, dtype=torch.bfloat16)
    out["seen_note_shape_us"] = per_call_us(lambda: record.note_shape(seen), args.number, args.repeat)
    out["seen_note_from_env_us"] = per_call_us(lambda: record.note_from_env("mm", [x, w]), args.number // 4,
                                               args.repeat)

    # Delay, while the file is small: the first new shape of a quiet process, then one noted while
    # the saver thread waits out DELAY_S.
    if hasattr(at_exit, "soon"):
        time.sleep(at_exit.DELAY_S + 1)  # the saver thread of the shape above has ended
        record.note_shape(shape(1_000_001))
        out["delay_ms_first_new_shape"] = wait_for(path, 1_000_001) * 1e3
        time.sleep(at_exit.DELAY_S / 2)
        record.note_shape(shape(1_000_002))
        out["delay_ms_new_shape_while_saver_waits"] = wait_for(path, 1_000_002) * 1e3
    else:
        out["delay_ms_first_new_shape"] = "n/a (saved at exit only)"

    # New shapes: distinct M values, built beforehand (building a Shape is the caller's cost either way).
    batches = [[shape(10_000 + r * 1000 + i) for i in range(1000)] for r in range(args.repeat)]
    per_new = []
    for batch in batches:
        start = time.perf_counter()
        for s in batch:
            record.note_shape(s)
        per_new.append((time.perf_counter() - start) / len(batch) * 1e6)
    out["new_note_shape_us"] = statistics.median(per_new)

    # One save into a file of S shapes (a recorder's save, as the saver thread runs it): with one
    # shape the file lacks (a write), and with none (the file is read, nothing is written).
    for size in (100, 1000, 5000):
        file = tmp / f"save_{size}.json"
        rec = record.Recorder()
        for i in range(size):
            rec.note(shape(100_000 + i))
        rec.save(file)  # the file now holds `size` shapes
        writes, reads = [], []
        for r in range(args.repeat):
            rec.note(shape(1 + r))
            start = time.perf_counter()
            rec.save(file)
            writes.append((time.perf_counter() - start) * 1e3)
            start = time.perf_counter()
            rec.save(file)
            reads.append((time.perf_counter() - start) * 1e3)
        out[f"save_ms_file_of_{size}"] = statistics.median(writes)
        out[f"save_ms_file_of_{size}_nothing_new"] = statistics.median(reads)
    record._process = None  # nothing for this process's own exit save
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
