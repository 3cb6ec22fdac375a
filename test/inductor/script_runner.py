"""Run a short Python script in a fresh process with a private Inductor cache (the glue's
behaviour shows only across ``import torch``); returns the completed process."""

import os
import subprocess
import sys


def run_script(code: str, cache_dir, **env) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache_dir), **env}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full_env, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    return r
