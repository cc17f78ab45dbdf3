"""The MGATHER.CAS scenarios of the oracle's tests (every BSTART.MGATHER.CAS
DataType, E7, E8 duplicates in every lane order, lane faults, packed and schema
rejection, zero mask) run on the JAX executor; the any-serialization checker
judges JAX-produced states."""

import ptojax as pj
from _scenarios import rebind

# these run no bundle (the decoder's golden words, ptojax.cas_order's lane
# orders, the checker on the oracle's own serializations, its group search
# against brute force): they run once, in the oracle's file
REFERENCE_ONLY = ("test_decode_golden_words", "test_lane_order_definitions",
                  "test_checker_accepts_every_serialization",
                  "test_group_search_matches_brute_force")

globals().update(rebind("test_reference_mgather_cas.py", pj.run, "_mgather_cas_on_jax",
                        reference_only=REFERENCE_ONLY))
