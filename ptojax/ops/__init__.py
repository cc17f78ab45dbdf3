"""Operation families of the JAX executor, and `pj.ops.matmul`, the golden-result helper."""

from .golden import MatmulFault, matmul

__all__ = ["matmul", "MatmulFault"]
