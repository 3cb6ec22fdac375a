"""The native launcher: a C++ library (``csrc/``) that serves the plugin's GEMM custom ops on a
ROCm device without Python, from code objects a deployment cache lists.

``build`` compiles it against the torch in use (``torch.utils.cpp_extension``, cached per
source, torch and kernel version); ``loader`` loads a built one; ``export`` writes the code
objects and the index the library reads; ``python_kernargs`` says what the Python launcher's
kernel arguments are, byte for byte, for the equality check. See docs/native.md.
"""
