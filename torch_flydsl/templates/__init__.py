"""Kernel families, one package each. Their packages resolve exported names on first use
(``lazy_exports``), so reading a family descriptor inside ``import torch`` stays cheap."""

import importlib


def lazy_exports(package: str, exports: dict):
    """A module ``__getattr__`` (PEP 562) that imports ``exports[name]``'s submodule on first use."""

    def __getattr__(name):
        if name in exports:
            return getattr(importlib.import_module(f".{exports[name]}", package), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
