"""Device benchmarks of the plugin's kernel families, as a package (``python -m torch_flydsl
bench``; the scripts in the repository's ``benchmarks/`` call into it too).

Nothing here is imported by ``import torch_flydsl``; the CLI imports it lazily.

- ``timing``: the device gate, event and CUDA-graph timing, error and throughput arithmetic
- ``baselines``: what FlyDSL is timed against besides ATen: Inductor's Triton, torch's in-tree
  FlyDSL backend, PyTorch's own eager kernel where the in-tree override sits on the same op
- ``tables``: the printed table and the CSV
- ``report``: speedups, geometric means, win/tie/loss counts, the markdown report
- ``plots``: matplotlib (Agg) and the speedup-per-shape plot
- ``shapes``: shape records: the fields each suite takes, JSON/CSV shape files
- ``vllm_columns``: the vLLM column: what vLLM itself runs for a call a table hit would replace
- ``picks``: which shapes ``bench --table`` writes as dispatch-table entries, and why not the others
- ``suite``: the interface the CLI drives each family's suite through
- ``mm``, ``scaled_mm``, ``grouped_mm``, ``rms_norm``, ``topk``: one family's suite each
  (shapes, candidates, per-shape timing, rows) and its script entry point
- ``cli``: the ``bench`` subcommand
"""
