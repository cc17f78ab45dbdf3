"""Differential tests of BSTART.MGATHER.CAS: pj.batch.run / pj.run vs the oracle.

Cases come from ptojax.fuzz.gen.random_cas_cases (kinds CAS_KINDS:
legal bundles over every transfer and index dtype, duplicate-heavy index
tiles, ColumnMajor/ZN/NZ destinations, a source TLOAD in the stream, round
trips through TSTORE, two CAS bundles, wide tiles, zero-mask blocks; and
mutations CAS_MUTATIONS towards each D.4 check). Their source tiles are
loaded by TLOAD words in Case.setup, which build_state runs on the oracle
before the case; only the case's own words (<= 16) run on the executors
under test. Every leaf of the final State, the fault and the executed count
must agree with pj.reference.run, under each MachineConfig.cas_lane_order
("row-major", "reverse", "permuted"); cas_check.explains must accept the
JAX-produced states of duplicate-heavy cases (and reject tampered ones).

Compile budget (XLA compiles take 25-35 s each on 2 cores): every batch is
[64, 16] words, 63 cases and one filler row of length 0 whose words
(BSTART.TLOAD, BSTART.TSTORE.SPART, BSTART.MGATHER.CAS, BSTOPs) fix pj.batch.run's
static completion bound (4) and effect set, so the file compiles
pj.batch.run once per lane order (3) and pj.run once (streams of <= 16 words
with <= 4 completions, shared with test_differential.py). (Compiling them
concurrently on threads was tried: slower on 2 cores.)
"""

from __future__ import annotations

import collections
import functools

import jax
import numpy as np
import pytest

import ptojax as pj
from ptojax import tables
from ptojax.state import tile_words, write_tile_words
from ptojax.fuzz import gen as G
from ptojax.machine import commit_capable
from ptojax.reference import cas_check
from ptojax.reference.state import Machine
from ptojax.reference.run import run_machine

from _differential import (CapacityEdges, Outcome, assert_same, diff, run_batch,
                           run_reference)

CFG = pj.MachineConfig(tile_words=512, hand_slots=2)
ORDERS = {"row-major": CFG, "reverse": CFG.replace(cas_lane_order="reverse"),
          "permuted": CFG.replace(cas_lane_order="permuted", cas_seed=0x5EED)}
GEN = G.GenConfig(machine=CFG, max_words=16)
L = 16                       # words per row
B = 64                       # rows per batch call
ROWS = B - 1                 # cases per call; the last row is the filler
K = 4                        # the completion bound every call compiles for
SEED = 0xCA5
N_MAIN = 4 * ROWS            # 252 cases, in each lane order
N_HOLD = 2 * ROWS            # the first 126 again with on_fault="hold" (row-major)
N_SINGLE = 16                # pj.run sample
OTHER_PE = 2

CAS_FAULTS = ("Fault_None", "Fault_TileLegality", "Fault_TileAllocation", "Fault_DataAlignment",
              "Fault_DataPage")

# Never executed (length 0): 3 completions (bucket 4), effects TLOAD, TSTORE and
# SHARED (TSTORE.SPART; a case's B.IOS word reaches it too), MGATHER.CAS
FILLER = [G.START["TLOAD"], G.START["TSTORE.SPART"], G.START["MGATHER.CAS"]] + [G.BSTOP] * (L - 3)

MAIN = G.random_cas_cases(SEED, N_MAIN, GEN)
PE_CASES = G.random_cas_cases(SEED + OTHER_PE, ROWS, G.GenConfig(machine=CFG, pe=OTHER_PE))
# one case per mutation label (alone) and per kind (unmutated): every aim is met
FORCED = ([G.random_cas_case(G.case_rng(SEED + 7, k), GEN, kind="cas_legal", mutations=[m])
           for k, m in enumerate(sorted(G.CAS_MUTATIONS))]
          + [G.random_cas_case(G.case_rng(SEED + 8, k), GEN, kind=kind, mutations=[])
             for k, kind in enumerate(sorted(G.CAS_KINDS))])
assert len(FORCED) <= ROWS

# pj.run: one compiled bucket (16 words, <= 4 completions); a spread of kinds
SINGLE = [i for i, c in enumerate(MAIN) if len(c.words) <= L and commit_capable(
    np.asarray(c.words, np.uint32)) <= 4][:3 * N_SINGLE:3]


def _cas_bundles(words) -> int:
    """BSTART.MGATHER.CAS words with an assigned DataType (decodable)."""
    return sum(1 for w in words if (w & 0x07FFFFFF) == G.START["MGATHER.CAS"]
               and (w >> 27) in tables.DTYPE_BY_CODE)


# ----------------------------------------------------------------- runners


@functools.lru_cache(maxsize=None)
def initial(i: int):
    return G.build_state(MAIN[i], CFG)


def batch(states, cases, order: str, on_fault: str = "abandon", pe: int = 0) -> list:
    return run_batch(states, [c.words for c in cases], on_fault, pe, cfg=ORDERS[order],
                     filler=FILLER, B=B, L=L)


@functools.lru_cache(maxsize=None)
def main_batch(chunk: int, order: str, on_fault: str = "abandon") -> list:
    idx = range(chunk * ROWS, min((chunk + 1) * ROWS, N_MAIN))
    return batch([initial(i) for i in idx], [MAIN[i] for i in idx], order, on_fault)


@functools.lru_cache(maxsize=None)
def oracle(i: int, order: str, on_fault: str = "abandon") -> Outcome:
    return run_reference(initial(i), MAIN[i].words, on_fault, MAIN[i].pe, cfg=ORDERS[order])


def state_of(outcome: Outcome, like):
    """The State of a batched row's leaves (the same tree as `like`)."""
    return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(like),
                                        [a for _, a in outcome.leaves])


def lane_trace(state, words, pe: int):
    """The oracle's record of the stream's MGATHER.CAS lanes (row-major order)."""
    m = Machine(state, CFG)
    m.cas_trace = []
    run_machine(m, list(words), pe, "abandon")
    return m.cas_trace[0] if m.cas_trace else None


# ----------------------------------------------------------------- generator


def test_generator_is_seeded_and_bounded():
    again = G.random_cas_cases(SEED, 30, GEN)
    for a, b in zip(MAIN[:30], again):
        assert (a.words, a.gm, a.gprs, a.pc, a.kind, a.mutations, a.setup, a.undefine) == \
            (b.words, b.gm, b.gprs, b.pc, b.kind, b.mutations, b.setup, b.undefine)
    c = G.random_cas_case(G.case_rng(SEED, 5), GEN)
    assert (c.words, c.setup, c.kind) == (MAIN[5].words, MAIN[5].setup, MAIN[5].kind)
    for c in MAIN + PE_CASES + FORCED:
        assert 1 <= len(c.words) <= L and c.kind in G.CAS_KINDS
        assert all(isinstance(w, int) and 0 <= w <= 0xFFFFFFFF for w in c.words + list(c.setup))
        assert set(c.mutations) <= set(G.CAS_MUTATIONS)
        # one compiled batch shape: the filler's bound covers every stream
        assert commit_capable(np.asarray(c.words, np.uint32)) <= K - 1
    # the TLOAD/TSTORE kinds are unchanged: cas_weight 0 draws no CAS case
    assert all(c.kind in G.PROGRAM_KINDS for c in G.random_cases(1, 20, GEN))
    mixed = G.random_cases(1, 40, G.GenConfig(machine=CFG, cas_weight=0.5))
    assert {c.kind in G.CAS_KINDS for c in mixed} == {True, False}


def test_setup_prepares_the_sources():
    c = next(c for c in MAIN if c.setup and not c.mutations and c.kind == "cas_legal")
    s = initial(MAIN.index(c))
    assert int(np.asarray(s.pc)) == c.pc and int(np.asarray(s.fault)) == 0
    assert not bool(np.asarray(s.block.active))
    loads = sum(1 for w in c.setup if (w & 0x07FFFFFF) == G.START["TLOAD"])
    assert int(np.asarray(s.tiles.allocated).sum()) == loads
    # undefine leaves a tile one element short of fully defined
    u = next(c for c in MAIN + FORCED if c.undefine)
    s = G.build_state(u, CFG)
    (index, word), = u.undefine
    slot = CFG.slot_of(index)
    t = s.tiles
    pe = u.pe
    assert not bool(np.asarray(t.defined)[pe, slot, word])
    assert int(np.asarray(t.defined_valid)[pe, slot]) == \
        int(np.asarray(t.valid_rows)[pe, slot]) * int(np.asarray(t.valid_cols)[pe, slot]) - 1


def test_labels_meet_their_aims():
    """A case with one mutation faults the way the mutation aims (CAS_AIMS); an
    unmutated case (other than a zero-mask kind) succeeds."""
    off = []
    for i, c in enumerate(MAIN):
        want = G.CAS_AIMS[c.mutations[0]] if len(c.mutations) == 1 else \
            "Fault_None" if not c.mutations else None
        if want is not None and oracle(i, "row-major").fault != want:
            off.append(f"case {i}: {want} expected, {oracle(i, 'row-major').fault}\n{c.describe()}")
    assert not off, f"{len(off)} cases off their aim; first:\n{off[0]}"


# ----------------------------------------------------------------- (a) generated programs


@pytest.mark.parametrize("order", list(ORDERS))
@pytest.mark.parametrize("i", range(N_MAIN))
def test_batch_matches_oracle(order, i):
    got = main_batch(i // ROWS, order)[i % ROWS]
    assert_same(f"pj.batch.run ({order})", MAIN[i].describe(), got, oracle(i, order))


@pytest.mark.parametrize("i", range(N_HOLD))
def test_batch_matches_oracle_hold(i):
    got = main_batch(i // ROWS, "row-major", "hold")[i % ROWS]
    assert_same("pj.batch.run(on_fault='hold')", MAIN[i].describe(), got,
                oracle(i, "row-major", "hold"))


@pytest.mark.parametrize("i", SINGLE)
def test_run_matches_oracle(i):
    got = Outcome.of(pj.run(initial(i), MAIN[i].words, MAIN[i].pe, cfg=CFG))
    assert_same("pj.run", MAIN[i].describe(), got, oracle(i, "row-major"))
    assert not diff(got, main_batch(i // ROWS, "row-major")[i % ROWS])


# Cases of MAIN whose MGATHER.CAS runs every lane (no fault; each test below
# checks it against the oracle, so a changed generator or SEED shows here).
COMPLETING = [13, 15, 25, 37, 43, 63, 67, 84, 94, 102, 109, 110, 114, 122, 123, 131, 142, 145,
              147, 148, 162, 177, 194, 195, 200, 203, 205, 206, 207, 223, 224, 225, 226, 237,
              241, 242, 245]
# Every row one case (one lane count over the whole batch); each row must
# still be the oracle's.
UNIFORM = COMPLETING[:8] + list(range(4))


@functools.lru_cache(maxsize=None)
def _uniform_batch(i: int) -> list:
    return batch([initial(i)] * ROWS, [MAIN[i]] * ROWS, "row-major")


@pytest.mark.parametrize("i", UNIFORM)
def test_one_case_over_the_whole_batch_matches_oracle(i):
    want = oracle(i, "row-major")
    for n, got in enumerate(_uniform_batch(i)):
        assert_same(f"pj.batch.run (row {n} of {ROWS} copies)", MAIN[i].describe(), got, want)


def _completing_rows() -> list:
    return [COMPLETING[n % len(COMPLETING)] for n in range(ROWS)]


@functools.lru_cache(maxsize=None)
def _completing_batch() -> list:
    rows = _completing_rows()
    return batch([initial(i) for i in rows], [MAIN[i] for i in rows], "row-major")


@pytest.mark.parametrize("n", range(len(COMPLETING)))
def test_completing_cases_of_different_shapes_in_one_batch_match_oracle(n):
    """Every row runs all its lanes, each row its own lane count and shape."""
    i = _completing_rows()[n]
    want = oracle(i, "row-major")
    assert want.fault == "Fault_None" and _cas_bundles(MAIN[i].words), MAIN[i].describe()
    assert_same("pj.batch.run (completing rows)", MAIN[i].describe(), _completing_batch()[n], want)


@functools.lru_cache(maxsize=None)
def _pe_batch():
    states = [G.build_state(c, CFG) for c in PE_CASES]
    return states, batch(states, PE_CASES, "row-major", pe=OTHER_PE)


@pytest.mark.parametrize("n", range(ROWS))
def test_other_pe_matches_oracle(n):
    """Base, stride and B.DIM GPRs in PE 2's file (the others hold junk)."""
    states, got = _pe_batch()
    want = run_reference(states[n], PE_CASES[n].words, "abandon", OTHER_PE, cfg=CFG)
    assert_same(f"pj.batch.run(pe={OTHER_PE})", PE_CASES[n].describe(), got[n], want)


@functools.lru_cache(maxsize=None)
def _forced(order: str):
    states = [G.build_state(c, CFG) for c in FORCED]
    return states, batch(states, FORCED, order)


@pytest.mark.parametrize("n", range(len(FORCED)), ids=[c.mutations[0] if c.mutations else c.kind
                                                        for c in FORCED])
def test_forced_labels(n):
    """Each mutation alone (on a legal bundle) and each kind unmutated: the oracle
    meets the aim and pj.batch.run agrees."""
    c = FORCED[n]
    assert len(c.mutations) == (1 if n < len(G.CAS_MUTATIONS) else 0), c.describe()
    states, got = _forced("row-major")
    want = run_reference(states[n], c.words, "abandon", c.pe, cfg=CFG)
    aim = G.CAS_AIMS[c.mutations[0]] if c.mutations else "Fault_None"
    assert want.fault == aim, c.describe()
    assert_same("pj.batch.run", c.describe(), got[n], want)


EDGE = CapacityEdges(lambda rng, muts: G.random_cas_case(rng, G.GenConfig(
    machine=CFG, max_words=16, edge_weight=1.0), kind="cas_legal", mutations=muts),
    "cas", "cas_budget", SEED + 9, cfg=CFG, run=lambda st, cs: batch(st, cs, "row-major"))


@pytest.mark.parametrize("n", range(len(EDGE.pairs)))
def test_destination_at_the_capacity_edge(n):
    """TILE_CAPACITY exactly the sources' and the destination's charge (succeeds)
    or 1 byte less (Fault_TileAllocation)."""
    EDGE.check(n)


# ----------------------------------------------------------------- (b) any serialization


DUPS = [i for i, c in enumerate(MAIN) if c.kind == "cas_dup" and _cas_bundles(c.words) == 1]


def _tampered(state, rec, where: str, rng):
    """`state` with one lane address's memory (or one lane's old value in the
    destination) set to a value no order can produce there: neither the
    address's initial value nor any replacement of its lanes."""
    by_addr = collections.defaultdict(list)
    for lane in rec.lanes:
        by_addr[lane.address].append(lane)
    address, lanes = max(by_addr.items(), key=lambda kv: len(kv[1]))
    n, bits = rec.dtype.element_bytes, rec.dtype.bits
    mask = (1 << bits) - 1
    reachable = {int.from_bytes(rec.gm_before[address:address + n], "little")}
    reachable |= {lane.replacement for lane in lanes}
    v = next(x for x in (int(rng.integers(0, 1 << min(bits, 62))) for _ in range(100))
             if x & mask not in reachable)
    with jax.enable_x64(True):
        if where == "gm":
            gm = np.array(state.gm)
            gm[address:address + n] = np.frombuffer(v.to_bytes(n, "little"), np.uint8)
            return state.replace(gm=jax.numpy.asarray(gm)), address
        t = {k: np.array(v) for k, v in state.tiles.items()}
        words, defined = tile_words(t, rec.pe, rec.slot)
        words[lanes[0].slot_word] = np.uint64(v)
        write_tile_words(t, rec.pe, rec.slot, words, defined)
        return state.replace(tiles=state.tiles.replace(words=jax.numpy.asarray(t["words"]))), address


@pytest.mark.parametrize("order", list(ORDERS))
@pytest.mark.parametrize("i", DUPS)
def test_checker_explains_jax_state(order, i):
    """Duplicate-heavy cases: some serialization explains the JAX result exactly;
    one lane address's memory or old value tampered with: none does."""
    c, s = MAIN[i], initial(i)
    got = state_of(main_batch(i // ROWS, order)[i % ROWS], s)
    res = cas_check.explains(s, c.words, got, c.pe, cfg=CFG)
    assert res.ok and not res.undecided, f"{res.reason}\n{c.describe()}"
    if oracle(i, order).fault != "Fault_None":
        return
    rec = lane_trace(s, c.words, c.pe)
    if rec is None:                            # the block never completed (zero mask, no BSTOP)
        return
    rng = np.random.default_rng(i)
    bad, address = _tampered(got, rec, ("gm", "dest")[i % 2], rng)
    res = cas_check.explains(s, c.words, bad, c.pe, cfg=CFG)
    assert not res.ok and not res.undecided, f"tampered at {address:#x} accepted: {res.reason}"


def test_orders_disagree_on_duplicates():
    """The duplicate-heavy kind really depends on the order: the three configured
    orders give different final States for most successful cases."""
    ok = [i for i in DUPS if oracle(i, "row-major").fault == "Fault_None"]
    differ = [i for i in ok if diff(main_batch(i // ROWS, "row-major")[i % ROWS],
                                    main_batch(i // ROWS, "reverse")[i % ROWS])
              or diff(main_batch(i // ROWS, "row-major")[i % ROWS],
                      main_batch(i // ROWS, "permuted")[i % ROWS])]
    assert len(ok) >= 15 and len(differ) >= 0.6 * len(ok), (len(ok), len(differ))


# ----------------------------------------------------------------- (c) coverage


def test_sample_covers_every_cas_fault():
    faults = collections.Counter(oracle(i, "row-major").fault for i in range(N_MAIN))
    kinds = collections.Counter(c.kind for c in MAIN)
    muts = collections.Counter(m for c in MAIN for m in c.mutations)
    by_fault = collections.defaultdict(collections.Counter)
    for i, c in enumerate(MAIN):
        by_fault[oracle(i, "row-major").fault].update(c.labels)
    print("\nfaults:", dict(faults))
    print("kinds:", dict(kinds))
    print("mutations:", dict(muts))
    for f, labels in sorted(by_fault.items()):
        print(f"  {f}: {dict(labels.most_common(6))}")
    missing = [f for f in CAS_FAULTS if f not in faults]
    assert not missing, f"the sample never produced {missing}: {dict(faults)}"
    assert set(kinds) == set(G.CAS_KINDS)
    assert len(muts) >= 0.8 * len(G.CAS_MUTATIONS), sorted(set(G.CAS_MUTATIONS) - set(muts))
    forced = {run_reference(s, c.words, "abandon", c.pe, cfg=CFG).fault
              for s, c in zip(_forced("row-major")[0], FORCED)}
    assert set(CAS_FAULTS) <= forced


def test_bench_cas_bundles_on_the_oracle():
    """benchmarks/bundles.py's MGATHER.CAS points succeed (the duplicate chains
    complete in row-major order) and the checker accepts every lane order."""
    import importlib.util
    import pathlib
    spec = importlib.util.spec_from_file_location(
        "_bench_bundles", pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "bundles.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    cfg = pj.preset(bench.PRESET)
    for name, lanes in bench.CAS_LANES.items():
        s, _ = bench.start_state(pj, cfg, name, np.random.default_rng(0))
        words = pj.asm.assemble(bench.program(*bench.BUNDLES[name]))
        for order in ("row-major", "reverse"):
            r = pj.reference.run(s, words, cfg=cfg.replace(cas_lane_order=order))
            assert r.ok and r.executed == len(words)
            assert cas_check.explains(s, words, r.state, cfg=cfg).ok
        if lanes == "dup":
            assert list(np.asarray(r.state.gm)[bench.DST:bench.DST + 8]) != [8, 0, 0, 0] * 2
            r = pj.reference.run(s, words, cfg=cfg)
            assert list(np.asarray(r.state.gm)[bench.DST:bench.DST + 8]) == [8, 0, 0, 0] * 2


# ----------------------------------------------------------------- slow campaign


@pytest.mark.slow
@pytest.mark.parametrize("order", list(ORDERS))
def test_campaign(order, n=2016):
    cases = G.random_cas_cases(SEED + 1, n, GEN)
    cfg = ORDERS[order]
    bad, faults, checked = [], collections.Counter(), 0
    for c0 in range(0, n, ROWS):
        chunk = cases[c0: c0 + ROWS]
        states = [G.build_state(c, CFG) for c in chunk]
        got = batch(states, chunk, order)
        for s, c, g in zip(states, chunk, got):
            want = run_reference(s, c.words, "abandon", c.pe, cfg=cfg)
            faults[want.fault] += 1
            d = diff(g, want)
            if d:
                bad.append(c.describe() + "\n" + "\n".join(d))
            elif c.kind == "cas_dup" and _cas_bundles(c.words) == 1:
                res = cas_check.explains(s, c.words, state_of(g, s), c.pe, cfg=CFG)
                checked += 1
                if not res.ok:
                    bad.append(f"explains rejects: {res.reason}\n{c.describe()}")
    print(f"\n{n} cases ({order}): {dict(faults)}; {checked} checked by explains")
    assert not bad, f"{len(bad)} unexplained mismatches; first:\n{bad[0]}"
    assert set(CAS_FAULTS) <= set(faults)
