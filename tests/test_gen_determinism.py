"""The case generator draws the same cases from the same seeds, byte for byte.

Every family's public entry point (random_cases / random_case with CAS,
matrix and cooperative weights, random_words_case, random_cas_cases,
random_matmul_cases, random_coop_cases, and the forced kind / mutation paths
of random_cas_case, random_matmul_case and random_coop_case) draws cases on
the presets the campaign uses; each case is hashed (sha256) over every Case
field (words and setup as uint32 bytes, GM, GPRs, kind, labels, notes, PC,
TILE_CAPACITY, PE, undefine, core) and, for the main draws, over the leaves
of its start State (campaign.initial_state: the setup run on the oracle, no
jit). The literals were computed on the generator before it was split into
ptojax/fuzz/gen/ (the four with start States recomputed when the State gained
its numeric_flags leaf, and again for its shared.defined leaf: hashed without
that leaf they were unchanged each time; the
CAS draws changed when a 4-bit Index came to be read through its carriers,
issue 53); a refactor that changes any draw changes a digest.
`python tests/test_gen_determinism.py` prints the digests.
"""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np
import pytest

from ptojax.fuzz import campaign as C
from ptojax.fuzz import gen as G
from ptojax.state import PRESETS, state_leaves

TINY, SMALL = PRESETS["tiny"], PRESETS["small"]
N = 200
CASE_FIELDS = ("words", "gm", "gprs", "kind", "mutations", "pc", "tile_capacity", "pe", "notes",
               "setup", "undefine", "core", "pokes")


def _case_digest(h, case: G.Case):
    words = np.asarray(case.words, np.uint32)
    setup = np.asarray(case.setup, np.uint32)
    h.update(repr((case.labels, words.size, setup.size, len(case.gm), case.pc,
                   case.tile_capacity, case.pe, case.core, tuple(case.notes),
                   tuple(case.undefine))).encode())
    h.update(words.tobytes())
    h.update(setup.tobytes())
    h.update(bytes(case.gm))
    h.update(repr(sorted((pe, sorted(regs.items())) for pe, regs in case.gprs.items())).encode())
    if case.pokes:                    # the generator draws none (a campaign's variants add them)
        h.update(repr(tuple(case.pokes)).encode())


def _state_digest(h, case: G.Case, cfg):
    for path, leaf in state_leaves(C.initial_state(case, cfg)).items():
        leaf = np.ascontiguousarray(leaf)
        h.update(f"{path} {leaf.dtype} {leaf.shape}".encode())
        h.update(leaf.tobytes())


def _digest(cases, cfg=None, states: int = N) -> str:
    """sha256 over the cases (and the first `states` start States when `cfg` is given)."""
    h = hashlib.sha256()
    for i, case in enumerate(cases):
        _case_digest(h, case)
        if cfg is not None and i < states:
            _state_digest(h, case, cfg)
    return h.hexdigest()


def _forced(draw, kinds, mutations, cfg, seed: int) -> list:
    """One case per kind and one per (first compatible kind, mutation), forced;
    a refusal (ValueError: MatmulImpossible) is hashed as its class name."""
    out = []
    jobs = [(k, None) for k in kinds] + [(None, m) for m in mutations]
    for i, (kind, m) in enumerate(jobs):
        rng = G.case_rng(seed, i)
        try:
            out.append(draw(rng, cfg, kind=kind, mutations=None if m is None else [m]))
        except ValueError as e:
            out.append(G.Case(words=[], gm=b"", gprs={}, kind=type(e).__name__))
    return out


def _matmul_forced(rng, cfg, kind=None, mutations=None):
    if kind is None:                  # a mutation alone: the first kind that takes it
        kind = next(k for k in G.MATMUL_KINDS if G.matmul_possible(k, mutations)
                    and G.mm_mutation_ok(mutations[0], k, []))
    return G.random_matmul_case(rng, cfg, kind=kind, mutations=mutations)


def _coop_forced(rng, cfg, kind=None, mutations=None):
    if kind is None:
        kind = "sh_load" if mutations[0].startswith("sh_") else "coop_right"
    return G.random_coop_case(rng, cfg, kind=kind, mutations=mutations)


def _cas_forced(rng, cfg, kind=None, mutations=None):
    return G.random_cas_case(rng, cfg, kind=kind or "cas_legal", mutations=mutations)


def _draws() -> dict:
    """name -> () -> (cases, cfg for start States or None[, how many States])."""
    tiny = G.GenConfig(machine=TINY, max_words=16)
    core = G.GenConfig(machine=SMALL, max_words=16, core=True, cas_weight=0.2, matmul_weight=0.3,
                       coop_weight=0.2)
    return {
        "transport": lambda: (G.random_cases(11, N, tiny), TINY),
        "cas": lambda: (G.random_cas_cases(12, N, tiny), TINY),
        "matmul": lambda: (G.random_matmul_cases(13, N, tiny), TINY),
        "coop": lambda: (G.random_coop_cases(14, N), G.COOP_MACHINE, 60),   # run_core: slow
        "mixed_core": lambda: (G.random_cases(15, N, core), None),
        "mixed": lambda: (G.random_cases(16, N, dataclasses.replace(
            tiny, cas_weight=1 / 3, matmul_weight=1 / 3, pe=2)), None),
        "small_seeds": lambda: (G.random_cases(21, N, G.GenConfig(machine=SMALL))
                                + G.random_cas_cases(22, N, SMALL)
                                + G.random_matmul_cases(23, N, dataclasses.replace(
                                    tiny, machine=SMALL, pe=1))
                                + G.random_coop_cases(24, N // 2, G.GenConfig(
                                    machine=TINY, core=True)), None),
        "matmul_forms": lambda: (G.random_matmul_cases(25, N, dataclasses.replace(
            tiny, matmul_forms=("TGEMV.ACC", "TMATMULMX.BIAS"))), None),
        "words": lambda: ([G.random_words_case(G.case_rng(26, i), tiny, structured=bool(i % 2))
                           for i in range(40)], None),
        "forced_cas": lambda: (_forced(_cas_forced, G.CAS_KINDS, G.CAS_MUTATIONS, tiny, 31), None),
        "forced_matmul": lambda: (_forced(_matmul_forced, G.MATMUL_KINDS, G.MATMUL_MUTATIONS,
                                          tiny, 32), None),
        "forced_coop": lambda: (_forced(_coop_forced, G.COOP_KINDS, G.COOP_MUTATIONS, None, 33),
                                None),
    }


DIGESTS = {
    'transport': '14bc375f304208b370ce808bc112e5bc02783199c36c0482f1fea0aa924b3565',
    'cas': '776c7e581a2dfccb137a110aa5a29902960b93f2483806e7844214ebb4d9b37e',
    'matmul': '070f4ffe45b7ffaf8dafefc765f3d06543f0ce943fc5dc91be8f60853af858c0',
    'coop': '4779f040ac253f4148378aa197f865831968af863d5130484f181372da9703ba',
    'mixed_core': 'db0e1397c92e18a4e040abe58ac9ac6b2d648b6b1383dfb90300696f8756cb99',
    'mixed': '3b121094e246b42c902375d678c9196864e2b22b9af216b940a98025f0a5a371',
    'small_seeds': 'd077e13eda2c948e538314229190745fb59442a75a4a075adb330b060ee6ae88',
    'matmul_forms': '753a01fc84659ce113f73fc012ab351013fa8158d1c143d8e5cdaae1189fd880',
    'words': 'b742bb8344c5c936cfd6668bdef69f4a077fae210328f2fa4c23c2b2fd12a8a1',
    'forced_cas': 'a922df2a72d3ddf187f0a26a99ad51adbcd108de2b4a18e0630fdebd41c63b65',
    'forced_matmul': '23fb6af1a9fea32cd8bfba94252a24059febe8a75ceb5e5c21803453f25ff5f6',
    'forced_coop': 'be1e5848e3c47a905e0b30e3596573adc2eb4976acf76784f1eeae88b5adca18',
}


def test_case_fields_covered():
    """The digest hashes every Case field (a new field must join it)."""
    assert tuple(f.name for f in dataclasses.fields(G.Case)) == CASE_FIELDS


@pytest.mark.parametrize("name", sorted(DIGESTS))
def test_same_seed_same_cases(name):
    assert _digest(*_draws()[name]()) == DIGESTS[name]


def test_every_draw_has_a_digest():
    assert set(DIGESTS) == set(_draws())


if __name__ == "__main__":
    for name, draw in _draws().items():
        print(f"    {name!r}: {_digest(*draw())!r},")
