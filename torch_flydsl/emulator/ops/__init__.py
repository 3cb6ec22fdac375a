"""Op semantics, grouped by family. Importing this package registers every op."""

from . import arith, crosslane, memory, mfma, sync, vector  # noqa: F401
