"""Shared helpers of the differential tests (test_differential*.py).

`Outcome` is a numpy view of one run (every State leaf, the fault name, the
executed count); `assert_same` compares two leaf by leaf. `run_batch` runs up
to B-1 (State, stream) pairs through ONE pj.batch.run call of shape [B, L]:
the rows after the cases hold a filler stream of length 0 (never executed)
whose words fix the data-dependent static arguments of pj.batch.run (the
completion bound from its completing BSTARTs, the effect set from the ops
they start), so every call with the same filler, config and shape reuses one
compiled function.
"""

from __future__ import annotations

import functools
import itertools

import numpy as np

import ptojax as pj
from ptojax import tables
from ptojax.state import state_leaves


class Outcome:
    """Numpy view of one run's result: State leaves, fault name, executed."""

    def __init__(self, leaves, fault: str, executed: int, state=None):
        self.leaves = leaves
        self.fault = fault
        self.executed = executed
        self.state = state

    @classmethod
    def of(cls, r: pj.RunResult) -> "Outcome":
        return cls(leaves(r.state), r.fault, int(r.executed), r.state)


def leaves(state):
    return list(state_leaves(state).items())


def diff(got: Outcome, want: Outcome) -> list:
    out = []
    if got.fault != want.fault:
        out.append(f"fault: {got.fault} != oracle {want.fault}")
    if got.executed != want.executed:
        out.append(f"executed: {got.executed} != oracle {want.executed}")
    for (k, a), (k2, b) in zip(got.leaves, want.leaves):
        assert k == k2
        if a.shape != b.shape or a.dtype != b.dtype:
            out.append(f"{k}: shape/dtype {a.shape} {a.dtype} != oracle {b.shape} {b.dtype}")
        elif not np.array_equal(a, b):
            idx = np.argwhere(a != b)
            where = [tuple(int(v) for v in i) for i in idx[:4]]
            vals = [(a[w], b[w]) for w in where] if a.ndim else [(a, b)]
            out.append(f"{k}: {len(idx) or 1} differ, first at {where}: got/oracle {vals}")
    return out


def assert_same(what: str, case_text: str, got: Outcome, want: Outcome):
    d = diff(got, want)
    assert not d, f"{what} differs from the oracle\n{case_text}\n" + "\n".join(d)


def padded(streams, filler, B: int, L: int):
    """[B, L] words, lengths: cases in rows 0..n-1, filler rows (length 0) after them."""
    arr = np.tile(np.asarray(filler, np.uint32), (B, 1))
    lens = np.zeros(B, np.int32)
    for i, w in enumerate(streams):
        assert len(w) <= L, f"stream of {len(w)} words > {L}"
        arr[i, : len(w)] = w
        lens[i] = len(w)
    return arr, lens


def run_batch(states, streams, on_fault: str, pe: int = 0, *, cfg, filler, B: int = 64,
              L: int = 16) -> list:
    """Outcomes of pj.batch.run for up to B-1 (state, stream) pairs, one call."""
    assert 1 <= len(states) == len(streams) <= B - 1
    arr, lens = padded(streams, filler, B, L)
    rows = list(states) + [states[0]] * (B - len(states))
    br = pj.batch.run(pj.batch.stack_states(rows), arr, pe, lengths=lens, on_fault=on_fault,
                      cfg=cfg)
    batched = leaves(br.state)
    return [Outcome([(k, a[i]) for k, a in batched], tables.FAULTS[int(br.fault_code[i])],
                    int(br.executed[i])) for i in range(len(streams))]


def run_reference(state, words, on_fault: str, pe: int = 0, *, cfg) -> Outcome:
    return Outcome.of(pj.reference.run(state, words, pe, on_fault=on_fault, cfg=cfg))


class CapacityEdges:
    """(case, aimed fault) pairs with an edge weight (gen/edges.py edge_capacity):
    the first n draws `draw(rng, mutations)` (seed `seed`) whose TILE_CAPACITY
    is exactly the destination's charge on top of what is in use (unmutated:
    Fault_None), then the first n with it 1 byte short (`budget_mutation`:
    Fault_TileAllocation). `run(states, cases)` is the file's pj.batch.run
    call; `check(n)` compares row n with the oracle and its aim."""

    def __init__(self, draw, family: str, budget_mutation: str, seed: int, *, cfg, run, n=3):
        from ptojax.fuzz import gen as G
        self.cfg, self.run, self.pairs = cfg, run, []
        for label, muts, aim in (("exact", [], "Fault_None"),
                                 ("over1", [budget_mutation], "Fault_TileAllocation")):
            cases = (draw(G.case_rng(seed, k), muts) for k in range(1000))
            hits = (c for c in cases if f"edge:budget:{family}_{label}" in c.notes
                    and list(c.mutations) == muts)
            self.pairs += [(c, aim) for c in itertools.islice(hits, n)]

    @functools.cached_property
    def rows(self) -> tuple:
        from ptojax.fuzz import gen as G
        states = [G.build_state(c, self.cfg) for c, _ in self.pairs]
        return states, self.run(states, [c for c, _ in self.pairs])

    def check(self, n: int):
        states, got = self.rows
        case, aim = self.pairs[n]
        want = run_reference(states[n], case.words, "abandon", case.pe, cfg=self.cfg)
        assert want.fault == aim, case.describe()
        assert_same("pj.batch.run", case.describe(), got[n], want)
