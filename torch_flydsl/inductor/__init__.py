"""Glue into TorchInductor. Imported only once ``torch._inductor.lowering`` has loaded.

Knows nothing about a kernel's insides: it asks a template family which configs fit a node
and binds them as extern choices that call the plugin's custom ops.
"""
