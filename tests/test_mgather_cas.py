"""The MGATHER.CAS scenarios of the oracle's tests (decode, E7, E8 duplicates in
every lane order, lane faults, packed and schema rejection, zero mask) run on
the JAX executor; the any-serialization checker judges JAX-produced states."""

import ptojax as pj
from _scenarios import rebind

globals().update(rebind("test_reference_mgather_cas.py", pj.run, "_mgather_cas_on_jax"))
