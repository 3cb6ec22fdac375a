"""A stand-in compiler, for tests only: it aborts its worker process, as an LLVM fatal error
does, when asked to compile the config ``STANDIN_ABORT_CONFIG`` names, and runs the plugin's
real compile job for every other config.

A test points ``torch_flydsl.runtime.isolated.JOB_MODULE`` here (from a ``sitecustomize.py``
in the user's process); the worker then imports this module by that name.
"""

import os
import sys

from torch_flydsl.runtime import isolated as real

MESSAGE = "LLVM ERROR: Do not know how to expand this operator's operand! (abort stand-in)"


def _abort_if_targeted(recipe) -> None:
    if recipe.spec.cfg.key() == os.environ.get("STANDIN_ABORT_CONFIG"):
        print(MESSAGE, file=sys.stderr, flush=True)
        os.abort()


def emulated_module(recipe, args):
    _abort_if_targeted(recipe)
    return real.emulated_module(recipe, args)


def fill_disk_cache(recipe, *args):
    _abort_if_targeted(recipe)
    return real.fill_disk_cache(recipe, *args)
