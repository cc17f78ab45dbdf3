"""Operation families of the JAX executor, and the golden-result helpers'
first names: `pj.ops.matmul` and `pj.ops.gemm` are aliases of `pj.golden.matmul`
and `pj.golden.gemm`, kept for their callers.

The helpers live in ptojax/golden/: they run real bundles through the
word-stream and batch executors, which sit above these families, so this
namespace resolves them on first use instead of importing the layers above
whenever an operation family is imported.
"""

from typing import Any

__all__ = ["matmul", "gemm", "MatmulFault", "MatmulResult"]


def __getattr__(name: str) -> Any:      # one of pj.golden's functions or its two classes
    if name in __all__:
        from .. import golden
        return getattr(golden, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
