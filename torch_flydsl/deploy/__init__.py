"""Deployment: kernels built before traffic, and runs that never compile.

- ``spec``: what to build (a dispatch table, or a list of GEMM shapes with a search breadth);
- ``manifest``: what a cache directory holds (``manifest.json`` beside FlyDSL's binaries);
- ``precompile``: ``python -m torch_flydsl precompile --spec FILE`` (compile-only, any machine);
- ``run_only``: ``TORCH_FLYDSL_RUN_ONLY=1``, offering only what the manifest lists;
- ``record``: the GEMM shapes a model runs, written as a spec.

Nothing here is imported by ``import torch`` or ``import torch_flydsl``.
"""
