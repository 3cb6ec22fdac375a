"""FlyDSL runtime side of the plugin: probing, arch detection, compile-only, caching, launch guard.

Nothing here imports flydsl at module import time.
"""
