"""Differential tests of TMOV (Functions 2 and 9..12): pj.batch.run vs the oracle.

Cases come from ptojax.fuzz.gen.random_tmov_cases (kinds TMOV_KINDS, each
mutation of TMOV_MUTATIONS aimed at one ordered check); their source tiles and
Shared registers are made by Case.setup on the oracle. Every leaf of the final
State, the fault and the executed count must agree with pj.reference.run.
One batch shape ([64, 16] words, a filler row naming TLOAD, TSTORE.SPART,
MGATHER.CAS, TMATMUL and TMOV) compiles pj.batch.run once for the file.
"""

import collections

import pytest

from ptojax.fuzz import gen as G
from ptojax.isa.encode import BSTOP, bstart

from _differential import assert_same, run_batch, run_reference

GEN = G.GenConfig(max_words=16)
CFG = GEN.machine
FILLER = [bstart("TLOAD", 4), bstart("TSTORE.SPART", 4), bstart("MGATHER.CAS", 4),
          bstart("TMATMUL", 4), bstart("TMOV", 4)] + [BSTOP] * 11
ROWS = 63
SEED = 0x7A0


@pytest.fixture(scope="module")
def outcomes():
    cases = G.random_tmov_cases(SEED, 2 * ROWS, GEN)
    states = [G.build_state(c, GEN) for c in cases]
    got = []
    for k in range(0, len(cases), ROWS):
        got += run_batch(states[k:k + ROWS], [c.words for c in cases[k:k + ROWS]], "abandon",
                         cfg=CFG, filler=FILLER)
    want = [run_reference(s, c.words, "abandon", cfg=CFG) for s, c in zip(states, cases)]
    return cases, got, want


def test_batch_matches_the_oracle(outcomes):
    for case, g, w in zip(*outcomes):
        assert_same("pj.batch.run", case.describe(), g, w)


def test_cases_reach_every_kind_and_fault(outcomes):
    cases, _, want = outcomes
    assert set(c.kind for c in cases) == set(G.TMOV_KINDS)
    faults = collections.Counter(w.fault for w in want)
    for f in ("Fault_None", "Fault_TileLegality", "Fault_TileAllocation", "Fault_BundleControl"):
        assert faults[f] > 0, faults
    # the unmutated cases complete
    assert all(w.fault == "Fault_None" for c, w in zip(cases, want) if not c.mutations
               and c.kind != "ms_extract"), [c.kind for c, w in zip(cases, want)
                                              if not c.mutations and w.fault != "Fault_None"]
