"""FlyDSL helpers for kernel pieces written outside a kernel's body.

A kernel is assembled from module-level pieces; FlyDSL traces Python, so each is an ordinary
function (or small class) called while the kernel is traced, taking the compile-time constants
and the traced values it needs as arguments. FlyDSL rewrites Python ``if``/``for``/``while``
on traced values into ``scf`` ops only in a kernel's own source, so the pieces that branch or
loop on runtime values go through the same rewriter (``dsl_control_flow``).
"""

from flydsl.compiler.ast_rewriter import ASTRewriter


def dsl_control_flow(fn):
    """Let ``fn`` branch and loop on traced values, as code inside a ``@flyc.kernel`` can."""
    return ASTRewriter.transform(fn)
