"""The shapes of the side-by-side report (``benchmarks/isa_compare.py``) that the device benches'
own suites lack, in one place: the device bench scripts add them so that an MI350 run times
every shape the static report models. Plain data: no torch, no FlyDSL."""

# Issue 20's MX shapes (M x N x K): M in 32..8192 at 4096 x 4096, a wide decode and a cube.
MX_SHAPES = (*((m, 4096, 4096) for m in (32, 128, 512, 2048, 4096, 8192)), (32, 14336, 4096), (8192, 8192, 8192))

# Issue 20's MoE forward (T tokens, G experts, N, K): 8 balanced experts, top-1, N=4096, K=2048.
GROUPED_SHAPES = ((1024, 8, 4096, 2048), (8192, 8, 4096, 2048))
# The same as a grouped device bench model: gate_up of H=2048, I=2048 is N = 2I = 4096, K = H = 2048.
GROUPED_MODEL = ("moe8x2048", dict(experts=8, top_k=1, hidden=2048, inter=2048, like="issue 20's MoE forward"))
GROUPED_TOKENS = (1024, 8192)
