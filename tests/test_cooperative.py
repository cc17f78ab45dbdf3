"""The Shared-tile, Core and cooperative-TMATMUL scenarios of the oracle's tests
(tests/test_reference_shared.py: ADR 0100's acceptance points, every ordered
check of docs/shared-decisions.md, both semantics and profiles) run on the JAX
executor through its public entry points, pj.run and pj.run_core.

Every scenario calls pj.run / pj.run_core as a user does, so each run compiles
what those entry points choose for its words (machine._run): the effect groups
the words can reach (possible_effects), the completion bound (commit_capable)
and the stream length, both bucketed, per config (pj.preset("small"), its
0.58.3 semantics, its ieee profile). Those programs are cached per process
(and in the persistent compilation cache, tests/conftest.py), and every
scenario runs in CI: for most Shared and Core rules this file is the only
executor-side check. Every copy must call pj.run or pj.run_core (rebind's
reference_only check; the oracle's file has no test that runs no bundle).
"""

import inspect

import ptojax as pj
from _scenarios import rebind

_TESTS = rebind("test_reference_shared.py", {"run": pj.run, "run_core": pj.run_core},
                "_shared_on_jax", reference_only=())
globals().update(_TESTS)


def test_scenarios_run_on_the_public_entry_points():
    # the re-bound module calls pj.run and pj.run_core themselves, not a wrapper
    # with its own completion bound or effect set
    scenario = inspect.unwrap(_TESTS["test_group_m_fragments"])
    assert scenario.__globals__["__name__"] == "_shared_on_jax"
    assert inspect.unwrap(scenario.__globals__["run"]) is inspect.unwrap(pj.run)
    assert inspect.unwrap(scenario.__globals__["run_core"]) is inspect.unwrap(pj.run_core)
