"""A stand-in compiler, for tests only: it aborts its worker process, as an LLVM fatal error
does, when asked to compile the config ``STANDIN_ABORT_CONFIG`` names, and runs the plugin's
real compile job for every other config.

``install()`` puts it in place of the plugin's two compile jobs (``runtime.isolated``'s
``emulated_module`` and ``fill_disk_cache``, which the Inductor, eager, vLLM and precompile paths
all run in workers); a test calls it from a ``sitecustomize.py``, so it is in place in the
user's process and in every compile worker it starts.
"""

import os
import sys

from torch_flydsl.runtime import isolated

MESSAGE = "LLVM ERROR: Do not know how to expand this operator's operand! (abort stand-in)"
_real = {}


def _abort_if_targeted(recipe) -> None:
    if recipe.spec.cfg.key() == os.environ.get("STANDIN_ABORT_CONFIG"):
        print(MESSAGE, file=sys.stderr, flush=True)
        os.abort()


def emulated_module(recipe, args):
    _abort_if_targeted(recipe)
    return _real["emulated_module"](recipe, args)


def fill_disk_cache(recipe, *args):
    _abort_if_targeted(recipe)
    return _real["fill_disk_cache"](recipe, *args)


def install() -> None:
    for name, standin in (("emulated_module", emulated_module), ("fill_disk_cache", fill_disk_cache)):
        _real.setdefault(name, getattr(isolated, name))
        setattr(isolated, name, standin)
