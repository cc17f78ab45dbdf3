"""The matrix-family scenarios of the oracle's tests (matrix.md E1-E5/E7
Local vectors, ADR 0071's acceptance criteria, every ordered check, both
numeric profiles) run on the JAX executor."""

import ptojax as pj
from _scenarios import rebind

# these run no bundle (the encoders' and the decoder's golden words, the
# binary32 rounding helper): they run once, in the oracle's file
REFERENCE_ONLY = ("test_matrix_encoders_match_golden_words",
                  "test_adr0071_9_matrix_encodings_unchanged", "test_r32_helper")

globals().update(rebind("test_reference_matmul.py", pj.run, "_matmul_on_jax",
                        reference_only=REFERENCE_ONLY))
