"""The TMOV scenarios of the oracle's tests (tests/test_reference_tmov.py: the
spec's TMOV vectors, F1..F14, every MV.* and MS.* check) run on the JAX
executor, pj.run and pj.run_core."""

import ptojax as pj
from _scenarios import rebind

globals().update(rebind("test_reference_tmov.py", {"run": pj.run, "run_core": pj.run_core},
                        "_tmov_on_jax", reference_only=("test_tmov_words_decode_to_one_form",)))
