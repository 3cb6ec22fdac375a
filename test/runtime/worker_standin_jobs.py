"""Stand-in jobs for the worker pool's plumbing tests (no FlyDSL in them)."""

import os
import sys
import time


def add(a, b):
    return a + b


def fail():
    raise ValueError("a job's own error")


def abort():
    print("about to abort (stand-in)", file=sys.stderr, flush=True)
    os.abort()


def sleep(seconds):
    time.sleep(seconds)
    return seconds


def pid():
    return os.getpid()


def env(name):
    return os.environ.get(name)
