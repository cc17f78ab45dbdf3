"""The matrix-family scenarios of the oracle's tests (matrix.md E1-E5/E7
Local vectors, ADR 0071's acceptance criteria, every ordered check, both
numeric profiles) run on the JAX executor."""

import ptojax as pj
from _scenarios import rebind

globals().update(rebind("test_reference_matmul.py", pj.run, "_matmul_on_jax"))
