"""The GEMM toolkit: the pieces the dense, grouped, scaled and scaled-grouped families build
their gfx950 kernels and launches from. A family's own kernel, config and gate stay in its
package; what several of them share lives here, under public names.

Importing the package imports nothing. Without FlyDSL (config and launch side): ``limits``
(gfx950 numbers), ``geometry`` (16-bit units, DMA vectors, the MFMA block, the C tile's LDS
row), ``majors`` (row/column-major operands), ``persistent`` (tile bound and grid of a
persistent launch). Kernel pieces (FlyDSL, traced into a family's kernel): ``tile_spec`` (the
tile the pieces read), ``block_order``, ``buffers``, ``lds``, ``tile_loads`` (async global ->
LDS), ``mma`` (LDS -> registers, MFMA), ``main_loop`` (the software pipeline), ``prefetch_loop``
(the big-tile pipeline: register-double-buffered fragments), ``epilogue``,
``group_walk`` (persistent workgroups over (group, tile) pairs).
"""
