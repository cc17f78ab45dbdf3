"""The transport scenarios of the oracle's tests (E1..E6, E9, every C.5..C.8
check, stream and header rules) run on the JAX executor."""

import ptojax as pj
from _scenarios import rebind

globals().update(rebind("test_reference_transport.py", pj.run, "_transport_on_jax"))
