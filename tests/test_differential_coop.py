"""Differential tests of the Core: pj.batch.run(core=True) vs pj.reference.run_core.

Cases come from ptojax.fuzz.gen.random_coop_cases (kinds COOP_KINDS:
right-only cooperative TMATMUL* with each active PE's own Local A, both-Shared
A/B, Trans bits on Shared operands, a Shared operand TLOAD in the stream,
zero-mask blocks, and Shared TLOAD / TSTORE / TSTORE.SPART programs; mutations
COOP_MUTATIONS towards each check of docs/shared-decisions.md sections 3-5),
plus existing kinds drawn with GenConfig(core=True) (transport, MGATHER.CAS,
All-Local matrix cases run on all four PEs). The operands come from Case.setup
words run with pj.reference.run_core by build_state; only the case's own words
(<= 16) run on the executors under test. Every leaf of the final State, the
fault and the executed count must agree in both numeric profiles.

Compile budget: every batch is [64, 16] words, 63 cases and one filler row of
length 0 whose words (BSTART.TLOAD, BSTART.TSTORE.SPART, BSTART.TMATMUL,
BSTART.MGATHER.CAS, BSTOPs) fix pj.batch.run's static completion bound (4) and
effect set (TLOAD, TSTORE, SHARED, MATMUL, MGATHER.CAS), so the file compiles
pj.batch.run(core=True) once per profile (the ieee one only with -m slow).
The machine is pj.preset("small").
"""

from __future__ import annotations

import collections
import functools
import json
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ptojax as pj
from ptojax import tables
from ptojax.fuzz import gen as G
from ptojax.machine import commit_capable

from _differential import Outcome, assert_same, padded, leaves

CFG = pj.preset("small")
PROFILES = {"portable": CFG, "ieee": CFG.replace(profile="ieee")}
# the ieee profile's Core program is one more 30-60 s compile: it runs with -m slow.
# In CI the ieee arithmetic of a fragment is checked by the single-PE matrix
# program (test_differential_matmul.py, both profiles) and by pj.run_core's ieee
# fragments (test_cooperative.py)
RUN_PROFILES = ["portable", pytest.param("ieee", marks=pytest.mark.slow)]
GEN = G.GenConfig(machine=CFG, max_words=16, core=True)
L = 16                       # words per row
B = 64                       # rows per batch call
ROWS = B - 1                 # cases per call; the last row is the filler
K = 4                        # the completion bound every call compiles for
SEED = 0xC0DE
N_MAIN = 3 * ROWS            # 189 cooperative cases, run in each profile

COOP_FAULTS = ("Fault_None", "Fault_TileLegality", "Fault_TileAllocation", "Fault_BundleControl",
               "Fault_DataPage", "Fault_DataAlignment")

# Never executed (length 0): 3 completions + BSTOP (bucket 4); effects TLOAD, TSTORE
# and SHARED (the TSTORE.SPART start), MATMUL, MGATHER.CAS
FILLER = [G.START["TLOAD"], G.START["TSTORE.SPART"], G.START["TMATMUL"],
          G.START["MGATHER.CAS"]] + [G.BSTOP] * (L - 4)

MAIN = G.random_coop_cases(SEED, N_MAIN, GEN)


def _mixed() -> list:
    """Existing kinds (and some cooperative ones) with core=True, within the bound."""
    gen = G.GenConfig(machine=CFG, core=True, cas_weight=0.2, matmul_weight=0.3, coop_weight=0.15)
    out, k = [], 0
    while len(out) < ROWS:
        c = G.random_case(G.case_rng(SEED + 1, k), gen)
        k += 1
        if commit_capable(np.asarray(c.words, np.uint32)) <= K:
            out.append(c)
    return out


MIXED = _mixed()

_ACC_FORMS = ("TMATMUL.ACC", "TMATMULMX.ACC")
_FORCED_KIND = {"coop_trans_a_local": "coop_right", "coop_local_a_rows": "coop_right",
                "sh_store_mask": "sh_store", "sh_lb_missing": "sh_load", "sh_cols_not_pow2": "sh_load",
                "sh_update_mismatch": "sh_load", "sh_too_big": "sh_load",
                "sh_records_full": "sh_load"}


def _forced_case(seed: int, k: int, kind: str, mutations: list):
    """The first draw (of a few) that applied every mutation asked for."""
    gen = GEN
    if any(m in ("coop_c_capacity", "coop_c_is_d_hand") for m in mutations):
        gen = G.GenConfig(machine=CFG, max_words=16, core=True, matmul_forms=_ACC_FORMS)
    for attempt in range(16):
        c = G.random_coop_case(G.case_rng(seed + attempt, k), gen, kind=kind, mutations=mutations)
        if list(c.mutations) == mutations:
            return c
    raise AssertionError(f"{mutations} never applied to {kind}")


def _forced_kind(m: str) -> str:
    if m in _FORCED_KIND:
        return _FORCED_KIND[m]
    if m.startswith("sh_"):
        return "sh_load"
    return "coop_both" if m != "coop_idle_garbage" else "coop_right"


# one case per mutation label (alone, on a legal bundle) and per kind (unmutated)
FORCED = ([_forced_case(SEED + 7, k, _forced_kind(m), [m])
           for k, m in enumerate(sorted(G.COOP_MUTATIONS))]
          + [_forced_case(SEED + 8, k, kind, []) for k, kind in enumerate(sorted(G.COOP_KINDS))])
assert len(FORCED) <= ROWS


# ----------------------------------------------------------------- runners


def run_batch(states, cases, profile: str) -> list:
    """Outcomes of ONE pj.batch.run(core=True) call for up to 63 cases."""
    assert 1 <= len(cases) <= ROWS
    arr, lens = padded([c.words for c in cases], FILLER, B, L)
    rows = list(states) + [states[0]] * (B - len(states))
    br = pj.batch.run(pj.batch.stack_states(rows), arr, lengths=lens, cfg=PROFILES[profile],
                      core=True)
    batched = leaves(br.state)
    return [Outcome([(k, a[i]) for k, a in batched], tables.FAULTS[int(br.fault_code[i])],
                    int(br.executed[i])) for i in range(len(cases))]


def run_reference(state, case, profile: str) -> Outcome:
    return Outcome.of(pj.reference.run_core(state, case.words, cfg=PROFILES[profile]))


@functools.lru_cache(maxsize=None)
def initial(i: int, profile: str):
    return G.build_state(MAIN[i], PROFILES[profile])


@functools.lru_cache(maxsize=None)
def main_batch(chunk: int, profile: str) -> list:
    idx = range(chunk * ROWS, min((chunk + 1) * ROWS, N_MAIN))
    return run_batch([initial(i, profile) for i in idx], [MAIN[i] for i in idx], profile)


@functools.lru_cache(maxsize=None)
def oracle(i: int, profile: str):
    return run_reference(initial(i, profile), MAIN[i], profile)


@functools.lru_cache(maxsize=None)
def _forced(profile: str):
    states = [G.build_state(c, PROFILES[profile]) for c in FORCED]
    return states, run_batch(states, FORCED, profile)


@functools.lru_cache(maxsize=None)
def _mixed_batch():
    states = [G.build_state(c, CFG) for c in MIXED]
    return states, run_batch(states, MIXED, "portable")


# ----------------------------------------------------------------- generator


def test_generator_is_seeded_and_bounded():
    again = G.random_coop_cases(SEED, 30, GEN)
    for a, b in zip(MAIN[:30], again):
        assert (a.words, a.gm, a.gprs, a.pc, a.kind, a.mutations, a.setup, a.tile_capacity,
                a.core) == (b.words, b.gm, b.gprs, b.pc, b.kind, b.mutations, b.setup,
                            b.tile_capacity, b.core)
    c = G.random_coop_case(G.case_rng(SEED, 5), GEN)
    assert (c.words, c.setup, c.kind) == (MAIN[5].words, MAIN[5].setup, MAIN[5].kind)
    for c in MAIN + FORCED + MIXED:
        assert c.core and 1 <= len(c.words) <= L
        assert all(isinstance(w, int) and 0 <= w <= 0xFFFFFFFF for w in c.words + list(c.setup))
        assert commit_capable(np.asarray(c.words, np.uint32)) <= K
    for c in MAIN + FORCED:
        assert c.kind in G.COOP_KINDS and set(c.mutations) <= set(G.COOP_MUTATIONS)
    # the default machine is pj.preset("small"); the existing generators are unchanged
    # without core (core=True only copies GPR values to every PE and marks the Case)
    assert G.COOP_MACHINE == pj.preset("small")
    assert G.random_coop_case(G.case_rng(SEED, 5)).words == MAIN[5].words
    plain = G.GenConfig(machine=CFG)
    assert not any(c.core for c in G.random_cases(2, 10, plain))
    with pytest.raises(ValueError, match="needs core=True"):
        G.GenConfig(machine=CFG, coop_weight=0.2)
    with pytest.raises(ValueError, match="summing to at most 1"):
        G.GenConfig(machine=CFG, core=True, coop_weight=0.6, matmul_weight=0.5)


def test_shapes_cover_group_m_and_forms():
    """group_M 1, 15-17, 31-33, 63-65, 96-100, 127/128 and others; all six forms;
    right-only and both-Shared; TransA and TransB; idle PEs; K = 64 MX."""
    heads = [c.notes[0].split() for c in MAIN if c.notes[0].startswith("coop:")]
    forms = {h[0][len("coop:"):] for h in heads}
    assert forms == set(G.COOP_FORMS)
    gs = {int(h[2][1:]) for h in heads}
    assert {1, 16, 17, 64, 65, 128} & gs and any(g > 96 for g in gs) and any(g <= 16 for g in gs)
    assert any("right" in h for h in heads) and any("both" in h for h in heads)
    assert any("transA" in h for h in heads) and any("transB" in h for h in heads)
    assert any(h[2] in ("G1", "G15", "G16", "G17") for h in heads)


def test_labels_meet_their_aims():
    """A case with one mutation faults the way the mutation aims (COOP_AIMS); an
    unmutated case succeeds."""
    off = []
    for i, c in enumerate(MAIN):
        want = G.COOP_AIMS[c.mutations[0]] if len(c.mutations) == 1 else \
            "Fault_None" if not c.mutations else None
        got = oracle(i, "portable").fault
        if want is not None and got != want:
            off.append(f"case {i}: {want} expected, {got}\n{c.describe()}")
    assert not off, f"{len(off)} cases off their aim; first:\n{off[0]}"


# ----------------------------------------------------------------- generated cases, both profiles


@pytest.mark.parametrize("profile", RUN_PROFILES)
@pytest.mark.parametrize("i", range(N_MAIN))
def test_batch_matches_oracle(profile, i):
    got = main_batch(i // ROWS, profile)[i % ROWS]
    assert_same(f"pj.batch.run(core=True) ({profile})", MAIN[i].describe(), got, oracle(i, profile))


@pytest.mark.parametrize("n", range(ROWS))
def test_existing_kinds_on_the_core(n):
    """Transport, MGATHER.CAS and All-Local matrix kinds drawn with core=True."""
    states, got = _mixed_batch()
    assert_same("pj.batch.run(core=True)", MIXED[n].describe(), got[n],
                run_reference(states[n], MIXED[n], "portable"))


@pytest.mark.parametrize("profile", RUN_PROFILES)
@pytest.mark.parametrize("n", range(len(FORCED)), ids=[c.mutations[0] if c.mutations else c.kind
                                                        for c in FORCED])
def test_forced_labels(profile, n):
    """Each mutation alone (on a legal bundle) and each kind unmutated: the oracle
    meets the aim and pj.batch.run(core=True) agrees."""
    c = FORCED[n]
    states, got = _forced(profile)
    want = run_reference(states[n], c, profile)
    aim = G.COOP_AIMS[c.mutations[0]] if c.mutations else "Fault_None"
    assert want.fault == aim, c.describe()
    assert_same(f"pj.batch.run(core=True) ({profile})", c.describe(), got[n], want)


def test_sample_covers_the_faults():
    faults = collections.Counter(oracle(i, p).fault for i in range(N_MAIN) for p in PROFILES)
    kinds = collections.Counter(c.kind for c in MAIN)
    muts = collections.Counter(m for c in MAIN for m in c.mutations)
    print("\nfaults:", dict(faults))
    print("kinds:", dict(kinds))
    print("mutations:", dict(muts))
    missing = [f for f in COOP_FAULTS[:4] if f not in faults]
    assert not missing, f"the sample never produced {missing}: {dict(faults)}"
    assert set(kinds) == set(G.COOP_KINDS)
    assert len(muts) >= 0.6 * len(G.COOP_MUTATIONS), sorted(set(G.COOP_MUTATIONS) - set(muts))
    forced = {run_reference(s, c, "portable").fault for s, c in zip(_forced("portable")[0], FORCED)}
    assert set(COOP_FAULTS) <= forced


def test_collectives_publish_per_pe_fragments():
    """Successful cooperative cases: every active PE (valid_M[i] > 0) gained one
    D tile with its own mask bit, idle PEs' Local files are unchanged."""
    checked = 0
    for i, c in enumerate(MAIN):
        if not c.notes[0].startswith("coop:") or c.mutations or c.kind == "coop_zero_mask":
            continue
        want = oracle(i, "portable")
        if want.fault != "Fault_None":
            continue
        vm = json.loads(re.search(r" vm(\[[^\]]*\])", c.notes[0]).group(1))
        s0, s1 = initial(i, "portable"), want.state
        a0, a1 = np.asarray(s0.tiles.allocated), np.asarray(s1.tiles.allocated)
        for p in range(4):
            new = np.flatnonzero(a1[p] & ~a0[p])
            if vm[p]:
                assert len(new) == 1, (i, p)
                assert int(np.asarray(s1.tiles.mask)[p, new[0]]) == 1 << (3 - p)
                assert int(np.asarray(s1.tiles.valid_rows)[p, new[0]]) == vm[p]
            else:
                assert len(new) == 0
                for leaf in ("words", "defined", "allocated", "mask"):
                    assert np.array_equal(np.asarray(getattr(s0.tiles, leaf))[p],
                                          np.asarray(getattr(s1.tiles, leaf))[p])
        checked += 1
    assert checked >= 20, checked


# ----------------------------------------------------------------- hypothesis


_DRAW = st.tuples(st.integers(0, 2 ** 32 - 1), st.sampled_from(sorted(G.COOP_KINDS)),
                  st.lists(st.sampled_from(sorted(G.COOP_MUTATIONS)), max_size=2, unique=True))


@pytest.mark.parametrize("profile", RUN_PROFILES)
@settings(max_examples=4, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(draws=st.lists(_DRAW, min_size=1, max_size=8))
def test_random_bundles_agree(profile, draws):
    """Random legal and illegal cooperative / Shared bundles (kind, mutations and
    seed drawn by hypothesis), several per call of the one compiled shape."""
    cfg = PROFILES[profile]
    cases = [G.random_coop_case(np.random.default_rng(seed), GEN, kind=kind, mutations=list(muts))
             for seed, kind, muts in draws]
    states = [G.build_state(c, cfg) for c in cases]
    got = run_batch(states, cases, profile)
    for s, c, g in zip(states, cases, got):
        assert_same(f"pj.batch.run(core=True) ({profile})", c.describe(), g,
                    run_reference(s, c, profile))
