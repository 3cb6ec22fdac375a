"""Deployment: kernels built before traffic, and runs that never compile.

- ``spec``: what to build (a dispatch table, or a list of GEMM shapes with a search breadth);
- ``manifest``: what a cache directory holds (``manifest.json`` beside FlyDSL's binaries);
- ``precompile``: ``python -m torch_flydsl precompile --spec FILE`` (compile-only, any machine);
- ``run_only``: ``TORCH_FLYDSL_RUN_ONLY=1``, offering only what the manifest lists;
- ``record``: the GEMM shapes a model runs, written as a spec;
- ``cache_dir``: the cache directory precompile fills (made, checked, its permissions);
- ``files``: atomic writes and locked read-modify-writes, for every file these tools rewrite.

Whether a cache file may be handed to FlyDSL at all (its binaries are pickles) is
``runtime.trust``'s question.

Nothing here is imported by ``import torch`` or ``import torch_flydsl``.
"""
