"""The transport scenarios of the oracle's test file, run on the JAX executor.

tests/test_reference_transport.py holds the golden vectors (E1..E6, E9) and a
test for every check of the ordered check lists C.5..C.8, written against the
plain-Python reference. This module loads that file a second time with its
runner replaced by `pj.run`, so the JAX path must meet every one of them.
"""

import importlib.util
import pathlib

import ptojax as pj

_spec = importlib.util.spec_from_file_location(
    "_transport_scenarios_on_jax", pathlib.Path(__file__).with_name("test_reference_transport.py"))
_scenarios = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_scenarios)
_scenarios.run = pj.run

globals().update({name: obj for name, obj in vars(_scenarios).items()
                  if name.startswith("test_") or name in ("small",)})
