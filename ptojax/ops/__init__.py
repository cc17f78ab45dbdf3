"""Operation families of the JAX executor, and `pj.ops.matmul`, the golden-result
helper's first name (an alias of `pj.golden.matmul`, kept for the callers of it).

`matmul`, `MatmulFault` and `MatmulResult` live in ptojax/golden.py: the helper runs real
bundles through the word-stream executor (machine.py), which sits above
these families, so this namespace resolves them on first use instead of
importing the layer above whenever an operation family is imported.
"""

__all__ = ["matmul", "MatmulFault", "MatmulResult"]


def __getattr__(name):
    if name in __all__:
        from .. import golden
        return getattr(golden, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
