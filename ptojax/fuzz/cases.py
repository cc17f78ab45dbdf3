"""A campaign's cases: which draws it keeps, which it samples, and pools of
cases as arrays.

Numbering. With `variants` M, campaign case k is variant k % M of the drawn
case of group g = k // M (variant 0 is the drawn case itself, fuzz/variants.py
the others); group g's drawn case is draw number j of the generator,
`random_case(default_rng(SeedSequence(S, spawn_key=(j,))))` (the same Case
`random_cases(S, n)[j]` gives), where j = g unless a Selection keeps only
some draws (then j is the g-th kept draw). A case is a function of (seed, j,
variant) alone: the same for any batch size, pool, worker or shard.

A Pool is the unit a worker process draws and the campaign runs: its drawn
Cases once (GM, GPRs, PC, TILE_CAPACITY, setup) and one row per case (its
words, labels and pokes).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import math
from dataclasses import dataclass, field
from typing import Optional, Sequence

import jax
import numpy as np

from .. import tables
from . import gen as G
from . import variants as V
from .coverage import case_ops
from ..state import MachineConfig, State
from .engine import WORDS, reset_leaves


@dataclass(frozen=True)
class Selection:
    """Which drawn Cases a campaign keeps.

    ops: a case is kept when one of its BSTART words names a selected
    operation, or when none of its words is a BSTART at all (header commands
    outside a block, random words: the block lifecycle every operation
    shares); None keeps every case. kinds: fnmatch patterns on Case.kind
    (None: any kind). Both must hold.
    """
    ops: Optional[frozenset] = None
    kinds: Optional[tuple] = None

    def __call__(self, case) -> bool:
        if self.kinds is not None and not any(fnmatch.fnmatchcase(case.kind, p) for p in self.kinds):
            return False
        if self.ops is None:
            return True
        named = case_ops(case)
        return not named or bool(named & self.ops)

    @property
    def everything(self) -> bool:
        return self.ops is None and self.kinds is None


@dataclass(frozen=True)
class Drawing:
    """How a campaign draws: the generator configs (`gen`; `core_gen` for the
    share of draws that run on the Core), that share, the selection and the
    number of variants per drawn case."""
    seed: int
    gen: G.GenConfig
    select: Selection = Selection()
    variants: int = 1
    core_gen: Optional[G.GenConfig] = None
    core_share: float = 0.0

    def config_of(self, index: int) -> G.GenConfig:
        """The generator config of draw `index`: core_gen for a seeded share of
        the draws (one uniform number per draw, apart from the draw's own)."""
        if self.core_gen is None or self.core_share <= 0:
            return self.gen
        if self.core_share >= 1:
            return self.core_gen
        u = int(V.mix64(np.uint64(self.seed & 0xFFFFFFFFFFFFFFFF) ^ np.uint64(0xC0DE) ^
                        V.mix64(np.uint64(index))))
        return self.core_gen if u < self.core_share * 2.0 ** 64 else self.gen

    def case(self, index: int) -> G.Case:
        return case_at(self.seed, index, self.config_of(index))


def case_at(seed: int, index: int, gen: G.GenConfig) -> G.Case:
    """Draw number `index` of seed `seed` (= random_cases(seed, n, gen)[index])."""
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(index,)))
    return G.random_case(rng, gen)


def sampled_mask(seed: int, ks, fraction: float) -> np.ndarray:
    """bool per case number: whether it runs on the oracle (a seeded, per-case
    fraction, independent of batching and shards)."""
    ks = np.asarray(ks, np.uint64)
    if fraction >= 1.0:
        return np.ones(ks.shape, bool)
    if fraction <= 0.0:
        return np.zeros(ks.shape, bool)
    with np.errstate(over="ignore"):
        key = V.mix64(np.uint64((seed * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF) ^
                      (ks + np.uint64(0x5A5A)))
    # key < fraction * 2^64 exactly: an integer is below a float iff it is below its ceiling
    return key < np.uint64(math.ceil(fraction * 2.0 ** 64))


def sampled(seed: int, k: int, fraction: float) -> bool:
    """Whether case k of a campaign with this seed runs on the oracle."""
    return bool(sampled_mask(seed, [k], fraction)[0])


@dataclass
class Pool:
    """Cases as arrays. Per drawn case (d of them): its Case and the State
    fields it starts from before any setup; per row (n): the drawn case it
    comes from (`base`), its variant number, words, labels and pokes."""
    drawn: list                       # [Case], d
    index: np.ndarray                 # int64[d] draw index
    gm: np.ndarray                    # uint8[d, gm_bytes]
    gpr: np.ndarray                   # uint64[d, 4, NUM_GPRS]
    pc: np.ndarray                    # uint64[d]
    tile_capacity: np.ndarray         # uint64[d]
    base: np.ndarray                  # int32[n] row -> drawn case
    variant: np.ndarray               # int32[n]
    words: np.ndarray                 # uint32[n, WORDS], 0 past the length
    lengths: np.ndarray               # int32[n]
    labels: list = field(default_factory=list)      # [tuple of variant labels], n
    pokes: list = field(default_factory=list)       # [tuple of Case.pokes], n
    k: Optional[np.ndarray] = None    # int64[n] case numbers (the campaign sets them)

    def __len__(self) -> int:
        return len(self.base)

    @property
    def core(self) -> np.ndarray:
        """bool[n]: the rows that run on the Core."""
        flags = np.array([bool(c.core) for c in self.drawn], bool)
        return flags[self.base] if len(self.base) else np.zeros(0, bool)

    def case(self, r: int) -> G.Case:
        """Row r as a Case (its words, variant labels and pokes on its drawn case)."""
        c = self.drawn[self.base[r]]
        if self.variant[r] == 0:
            return c
        return dataclasses.replace(c, words=[int(w) for w in self.words[r, : self.lengths[r]]],
                                   mutations=tuple(c.mutations) + tuple(self.labels[r]),
                                   pokes=tuple(c.pokes) + tuple(self.pokes[r]))

    def take(self, rows) -> "Pool":
        """The rows `rows` (their drawn cases kept whole)."""
        rows = np.asarray(rows, np.int64)
        return dataclasses.replace(
            self, base=self.base[rows], variant=self.variant[rows], words=self.words[rows],
            lengths=self.lengths[rows], labels=[self.labels[r] for r in rows],
            pokes=[self.pokes[r] for r in rows], k=None if self.k is None else self.k[rows])


def draw_pool(drawing: Drawing, indices: Sequence[int], gm_bytes: int) -> Pool:
    """The selected draws among `indices`, each with its `drawing.variants`
    rows (variant 0, the drawn case, then the variants)."""
    M = drawing.variants
    kept = [(j, c) for j in indices for c in (drawing.case(int(j)),) if drawing.select(c)]
    cfg = drawing.gen.machine
    arrays = [G.case_arrays(c, cfg) for _, c in kept]
    d = len(kept)
    base = np.repeat(np.arange(d, dtype=np.int32), M)
    variant = np.tile(np.arange(M, dtype=np.int32), d)
    words = np.zeros((d * M, WORDS), np.uint32)
    lengths = np.zeros(d * M, np.int32)
    for i, (_, c) in enumerate(kept):
        words[i * M:(i + 1) * M, : len(c.words)] = c.words
        lengths[i * M:(i + 1) * M] = len(c.words)
    labels, pokes = [()] * (d * M), [()] * (d * M)
    if M > 1 and d:
        v = np.flatnonzero(variant > 0)
        index = np.array([j for j, _ in kept], np.int64)
        core = np.array([c.core for _, c in kept], bool)
        pe = np.array([c.pe for _, c in kept], np.int64)
        w, ln, lab, pk = V.make(drawing.seed, index[base[v]], variant[v], words[v], lengths[v],
                                pe[base[v]], core[base[v]], gm_bytes)
        words[v], lengths[v] = w, ln
        for r, a, b in zip(v.tolist(), lab, pk):
            labels[r], pokes[r] = a, b
    return Pool(
        drawn=[c for _, c in kept], index=np.array([j for j, _ in kept], np.int64),
        gm=np.stack([a["gm"] for a in arrays]) if d else np.zeros((0, gm_bytes), np.uint8),
        gpr=np.stack([a["gpr"] for a in arrays]) if d else np.zeros((0, tables.NUM_PES, tables.NUM_GPRS), np.uint64),
        pc=np.array([a["pc"] for a in arrays], np.uint64),
        tile_capacity=np.array([a["tile_capacity"] for a in arrays], np.uint64),
        base=base, variant=variant, words=words, lengths=lengths, labels=labels, pokes=pokes)


def initial_state(case: G.Case, cfg: MachineConfig) -> State:
    """The Case's initial State with numpy leaves: gen.build_state's (its setup
    words on the oracle, `undefine`, pokes), without a device round trip when
    there is no setup. RuntimeError when the setup does not complete (a
    shrinking candidate can break it)."""
    a = G.case_arrays(case, cfg)
    if case.setup or case.undefine:
        return jax.tree_util.tree_map(np.asarray, G.build_state(case, cfg))
    gm, gpr = a["gm"], a["gpr"]
    G.apply_pokes(gm, gpr, case.pokes)
    return reset_leaves(cfg).replace(gm=gm, gpr=gpr, pc=np.asarray(a["pc"], np.uint64),
                                     tile_capacity=np.asarray(a["tile_capacity"], np.uint64))


__all__ = ["Drawing", "Pool", "Selection", "case_at", "draw_pool", "initial_state", "sampled",
           "sampled_mask"]
