"""Differential campaigns: pj.batch.run against the pj.reference oracle (`ptojax fuzz`).

A campaign draws Cases from `ptojax.fuzz.gen` (case number k of seed S
is `random_case(default_rng(SeedSequence(S, spawn_key=(j,))))` for its draw
index j, the same Case `random_cases(S, n)[j]` gives), runs them in batches
through `pj.batch.run` and runs every case (or a seeded sample) through
`pj.reference.run`, and compares every State leaf, the fault and the executed
count. It counts coverage (operations by BSTART word, BSTART dtypes, B.DATR
Layout codes, final faults, the generator's kind and mutation labels) and
keeps the mismatching Cases for the shrinker.

One compiled shape: every `pj.batch.run` call gets `rows` rows of `length`
words. Cases fill rows 0..rows-2; the rest are filler rows of length 0 (never
executed) whose words are BSTARTs of every effectful operation, so the static
arguments `pj.batch.run` derives from the words (completion bound, effect
set) are the same for every call, and a whole campaign, its shrinking and its
replays compile `pj.batch.run` once per (config, rows).
"""

from __future__ import annotations

import collections
import concurrent.futures as cf
import dataclasses
import fnmatch
import functools
import multiprocessing
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Optional, Sequence

import jax
import numpy as np

from .. import tables
from ..report import index_ranges
from ..state import (MachineConfig, State, leaf_differences, own_words, state_leaves, tile_words,
                     tile_leaves as tile_leaves_of)
from . import gen as G
from .coverage import MATRIX_OPS, Coverage, case_ops, op_token

WORDS = 16                       # words per row: GenConfig.max_words, one length bucket
REPORT_FORMAT = "ptojax.fuzz-report.v1"

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


def case_at(seed: int, index: int, gen: G.GenConfig) -> G.Case:
    """Draw number `index` of seed `seed` (= random_cases(seed, n, gen)[index])."""
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(index,)))
    return G.random_case(rng, gen)


def draw_cases(seed: int, count: int, gen: G.GenConfig, select: Selection = Selection(),
               shard: tuple = (0, 1), max_misses: int = 20000) -> Iterator[tuple]:
    """(k, draw index, Case) of this shard's share of the first `count` selected cases.

    Case k (0-based among the selected ones) belongs to shard k % n, so the
    shards of one seed together run exactly the single-process campaign.
    """
    me, n = shard
    if select.everything:
        for k in range(me, count, n):
            yield k, k, case_at(seed, k, gen)
        return
    k = j = misses = 0
    while k < count:
        c = case_at(seed, j, gen)
        if select(c):
            if k % n == me:
                yield k, j, c
            k += 1
            misses = 0
        else:
            misses += 1
            if misses >= max_misses:
                raise ValueError(f"{max_misses} draws in a row matched no selected operation/kind; "
                                 "the generator does not produce such cases")
        j += 1


def _mix64(x: int) -> int:
    """splitmix64 finalizer (deterministic per-case sampling)."""
    x = (x + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return x ^ (x >> 31)


def sampled(seed: int, k: int, fraction: float) -> bool:
    """Whether case k of a campaign with this seed runs on the oracle."""
    if fraction >= 1.0:
        return True
    if fraction <= 0.0:
        return False
    return _mix64((seed * 0x100000001B3) ^ (k + 0x5A5A)) < fraction * 2.0 ** 64


# ----------------------------------------------------------------- states and rows


@functools.lru_cache(maxsize=8)
def reset_leaves(cfg: MachineConfig) -> State:
    """pj.reset(cfg) with numpy leaves (cheap to copy and stack)."""
    from ..state import reset
    return jax.tree_util.tree_map(np.asarray, reset(cfg))


def _prepared(case) -> bool:
    """Whether the Case's initial State needs more than its GM/GPR/PC/capacity
    fields (setup words run on the oracle, undefined Words: gen.Case)."""
    return bool(getattr(case, "setup", ()) or getattr(case, "undefine", ()))


def initial_state(case: G.Case, cfg: MachineConfig) -> State:
    """The Case's initial State with numpy leaves: what gen.build_state
    builds (it runs a Case's setup words on the oracle), without a device
    round trip per case when there is no setup. Raises RuntimeError when the
    setup does not complete (a shrinking candidate can break it)."""
    a = G.case_arrays(case, cfg)
    st = reset_leaves(cfg).replace(gm=a["gm"], gpr=a["gpr"], pc=np.asarray(a["pc"], np.uint64),
                                   tile_capacity=np.asarray(a["tile_capacity"], np.uint64))
    if _prepared(case):
        prepare = getattr(G, "prepare_state", None)     # build_state's second half
        st = prepare(st, case, cfg) if prepare else G.build_state(case, cfg)
        st = jax.tree_util.tree_map(np.asarray, st)
    return st


# one per effect group; TSTORE.SPART is both TSTORE and SHARED (Shared TLOAD/TSTORE),
# which a drawn B.IOS word reaches in single-PE campaigns too
FILLER_OPS = ("TLOAD", "TSTORE.SPART", "MGATHER.CAS", "TMATMUL")


def filler_words(length: int = WORDS) -> np.ndarray:
    """The words of a filler row: BSTARTs of FILLER_OPS in turn, so every effect
    group (machine.possible_effects: TLOAD, TSTORE, SHARED, MGATHER.CAS,
    MATMUL) is in every call's effect set: one program per campaign, where a
    batch with a B.IOS word used to compile a second one."""
    starts = [G.START[op] for op in FILLER_OPS]
    return np.array([starts[k % len(starts)] for k in range(length)], np.uint32)


def leaf_names(cfg: MachineConfig) -> list:
    return list(state_leaves(reset_leaves(cfg)))


def batch_arrays(rows: Sequence, cfg: MachineConfig, length: int = WORDS,
                 scratch: Optional[dict] = None):
    """(batched State, words uint32[R, length], lengths int32[R]) for rows that are
    Cases, (State, words) pairs, or None (a filler row).

    scratch: a dict the caller keeps between calls, whose arrays the leaves of
    whole-State rows are written into (the State returned is then only good
    until the next call). A batch at `asl` is hundreds of MB, and a fresh
    array of that size costs its page faults again every call."""
    R = len(rows)
    base = reset_leaves(cfg)
    gm = np.zeros((R, cfg.gm_bytes), np.uint8)
    gpr = np.zeros((R, tables.NUM_PES, tables.NUM_GPRS), np.uint64)
    pc = np.zeros(R, np.uint64)
    cap = np.full(R, cfg.tile_capacity, np.uint64)
    words = np.tile(filler_words(length), (R, 1))
    lengths = np.zeros(R, np.int32)
    full = {}                                      # rows given as whole States
    for r, row in enumerate(rows):
        if row is None:
            continue
        if isinstance(row, G.Case) and _prepared(row):
            row = (initial_state(row, cfg), row.words)
        if isinstance(row, G.Case):
            a = G.case_arrays(row, cfg)
            gm[r], gpr[r], pc[r], cap[r] = a["gm"], a["gpr"], a["pc"], a["tile_capacity"]
            w = row.words
        else:
            st, w = row
            full[r] = st
        if len(w) > length:
            raise ValueError(f"row {r}: {len(w)} words exceed the row length {length}")
        words[r, : len(w)] = np.asarray(w, np.uint32)
        lengths[r] = len(w)
    st = jax.tree_util.tree_map(lambda a: np.broadcast_to(a, (R,) + a.shape), base)
    st = st.replace(gm=gm, gpr=gpr, pc=pc, tile_capacity=cap)
    if full:
        out = []
        for i, a in enumerate(jax.tree_util.tree_leaves(st)):
            buf = None if scratch is None else scratch.get(i)
            if buf is None or buf.shape != a.shape or buf.dtype != a.dtype:
                buf = np.empty(a.shape, a.dtype)
                if scratch is not None:
                    scratch[i] = buf
            np.copyto(buf, a)
            out.append(buf)
        for r, s in full.items():
            for i, x in enumerate(jax.tree_util.tree_leaves(s)):
                out[i][r] = np.asarray(x)
        st = jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(st), out)
    return st, words, lengths


# ----------------------------------------------------------------- outcomes


@dataclass
class Outcome:
    """One run's result as numpy: every State leaf, and the executed count.
    `error` holds the exception a model raised instead of a result (leaves empty)."""
    leaves: dict
    executed: int
    error: Optional[str] = None

    @property
    def fault(self) -> str:
        if self.error is not None:
            return "(exception)"
        return tables.FAULTS[int(self.leaves[".fault"])]

    @property
    def fault_address(self) -> int:
        return int(self.leaves[".fault_address"]) if self.error is None else 0

    @property
    def pc(self) -> int:
        return int(self.leaves[".pc"]) if self.error is None else 0

    @classmethod
    def of(cls, result) -> "Outcome":
        """From a RunResult (pj.run / pj.reference.run)."""
        return cls(state_leaves(result.state), int(result.executed))

    @classmethod
    def failed(cls, e: BaseException) -> "Outcome":
        return cls({}, -1, f"{type(e).__name__}: {e}")

    def state(self, cfg: MachineConfig) -> State:
        """The final State (numpy leaves)."""
        if self.error is not None:
            raise ValueError(f"no State: the run raised {self.error}")
        base = reset_leaves(cfg)
        treedef = jax.tree_util.tree_structure(base)
        return jax.tree_util.tree_unflatten(treedef, list(self.leaves.values()))

    def same(self, other: "Outcome") -> bool:
        if self.error is not None or other.error is not None:
            return False
        return self.executed == other.executed and not leaf_differences(self.leaves, other.leaves,
                                                                        limit=1)


def reference_outcome(state: State, words, pe: int, on_fault: str, cfg: MachineConfig,
                      core: bool = False) -> Outcome:
    """pj.reference.run's result (core=True: pj.reference.run_core's); an
    exception it raises is an Outcome too (a finding)."""
    from .. import reference
    try:
        if core:
            return Outcome.of(reference.run_core(state, list(words), on_fault=on_fault, cfg=cfg))
        return Outcome.of(reference.run(state, list(words), pe, on_fault=on_fault, cfg=cfg))
    except Exception as e:                   # noqa: BLE001 - reported as a mismatch
        return Outcome.failed(e)


class BatchOutcomes:
    """pj.batch.run's results for the case rows of one call (numpy)."""

    def __init__(self, leaves: dict, executed: np.ndarray):
        self.leaves = leaves
        self.executed = executed

    def __len__(self) -> int:
        return len(self.executed)

    def __getitem__(self, i: int) -> Outcome:
        return Outcome({k: v[i] for k, v in self.leaves.items()}, int(self.executed[i]))

    @property
    def fault_code(self) -> np.ndarray:
        return self.leaves[".fault"]


class JaxRunner:
    """pj.batch.run at one compiled shape: `rows` rows of `length` words
    (core=True: pj.batch.run(core=True), every completion a Core collective)."""

    def __init__(self, cfg: MachineConfig, rows: int, pe: int = 0, on_fault: str = "abandon",
                 length: int = WORDS, core: bool = False):
        if rows < 2:
            raise ValueError(f"a batch needs at least 2 rows (cases + the filler row), got {rows}")
        if core and pe != 0:
            raise ValueError("a Core runner runs every PE; leave pe at 0")
        self.cfg, self.rows, self.pe, self.on_fault, self.length = cfg, rows, pe, on_fault, length
        self.core = core
        self._scratch = {}      # batch_arrays' reused arrays: run() finishes a batch before the next

    @property
    def capacity(self) -> int:
        """Cases per call: every row but the last, which is always a filler row."""
        return self.rows - 1

    def run(self, items: Sequence) -> BatchOutcomes:
        """Outcomes of up to `capacity` rows (Cases or (State, words) pairs), one call."""
        from ..batch.execute import run as batch_run
        n = len(items)
        if not 1 <= n <= self.capacity:
            raise ValueError(f"{n} rows for a runner of {self.capacity} case rows")
        rows = list(items) + [None] * (self.rows - n)
        st, words, lengths = batch_arrays(rows, self.cfg, self.length, scratch=self._scratch)
        res = batch_run(st, words, self.pe, lengths=lengths, on_fault=self.on_fault, cfg=self.cfg,
                        core=self.core)
        leaves = {k: v[:n] for k, v in state_leaves(res.state).items()}
        return BatchOutcomes(leaves, np.asarray(res.executed)[:n])

    def run_many(self, items: Sequence) -> list:
        """Outcomes of any number of rows, `capacity` per call."""
        out = []
        for i in range(0, len(items), self.capacity):
            b = self.run(items[i: i + self.capacity])
            out += [b[j] for j in range(len(b))]
        return out


def mismatch_mask(got: BatchOutcomes, want: Sequence, rows: Sequence[int]) -> np.ndarray:
    """bool[len(rows)]: row rows[i] of `got` differs from Outcome want[i] anywhere."""
    if not rows:
        return np.zeros(0, bool)
    idx = np.asarray(rows)
    failed = np.array([w.error is not None for w in want])
    # a leaf of another shape or dtype (a model that grew GM, say) differs too
    for k, a in got.leaves.items():
        failed |= np.array([w.error is None and (w.leaves[k].shape != a.shape[1:]
                                                 or w.leaves[k].dtype != a.dtype) for w in want])
    bad = failed | (got.executed[idx] != np.array([w.executed for w in want]))
    # row by row: stacking the oracle's States first would copy a batch of them
    for i, (r, w) in enumerate(zip(idx, want)):
        bad[i] = bad[i] or not all(np.array_equal(a[r], w.leaves[k]) for k, a in got.leaves.items())
    return bad


# ----------------------------------------------------------------- differences


def _tile_name(slot: int, hand_slots: int) -> str:
    return tables.tile_name((slot // hand_slots) * tables.HAND_SLOTS + slot % hand_slots)


def _code_name(leaf: str, v: int):
    if leaf == "dtype":
        d = tables.DTYPE_BY_CODE.get(v)
        return d.name if d else v
    if leaf == "layout":
        return tables.TILE_LAYOUTS[v] if 0 <= v < len(tables.TILE_LAYOUTS) else v
    if leaf == "location":
        return tables.TILE_LOCATIONS[v] if 0 <= v < len(tables.TILE_LOCATIONS) else v
    if leaf == "mask":
        return tables.mask_str(v)
    if leaf == "allocated":
        return bool(v)
    return v


def _py(v):
    a = np.asarray(v)
    if a.ndim == 0:
        x = a.item()
        return bool(x) if a.dtype == bool else int(x)
    return [_py(x) for x in a]


def differences(a: Outcome, b: Outcome, names: tuple = ("jax", "reference"), limit: int = 8) -> list:
    """Field-by-field differences of two outcomes, as JSON-ready dicts.

    Each entry has "field" and the two values under `names`: fault,
    executed, pc, fault_address, GM byte ranges (hex), GPRs by PE and name,
    TILE_CAPACITY, per tile (by assembly name) each descriptor field and the
    payload Words / defined bits that differ (slot lists, at most `limit`
    shown with the count), and each block field.
    """
    x, y = names
    out = []

    def add(fieldname, va, vb, **extra):
        out.append({"field": fieldname, **extra, x: va, y: vb})

    if a.error is not None or b.error is not None:
        add("exception", a.error, b.error)
        return out

    la, lb = dict(a.leaves), dict(b.leaves)
    for k in list(la):
        if la[k].shape != lb[k].shape or la[k].dtype != lb[k].dtype:
            add(f"shape {k[1:]}", f"{la[k].dtype}{list(la[k].shape)}", f"{lb[k].dtype}{list(lb[k].shape)}")
            la[k], lb[k] = None, None          # compared no further
    scalar = lambda k: la[k] is not None
    if scalar(".fault") and a.fault != b.fault:
        add("fault", a.fault, b.fault)
    if a.executed != b.executed:
        add("executed", a.executed, b.executed)
    if scalar(".pc") and a.pc != b.pc:
        add("pc", hex(a.pc), hex(b.pc))
    if scalar(".fault_address") and a.fault_address != b.fault_address:
        add("fault_address", hex(a.fault_address), hex(b.fault_address))
    ga, gb = la[".gm"], lb[".gm"]
    if ga is not None:
        for s, e in index_ranges(np.flatnonzero(ga != gb), gap=8):
            add("gm", ga[s:e].tobytes().hex(), gb[s:e].tobytes().hex(), address=hex(s), length=e - s)
    ra, rb = la[".gpr"], lb[".gpr"]
    if ra is not None:
        for pe, r in np.argwhere(ra != rb).tolist():
            add(f"gpr PE{pe} {tables.GPR_NAMES[r]}", hex(int(ra[pe, r])), hex(int(rb[pe, r])))
    if la[".tile_capacity"] is not None and int(la[".tile_capacity"]) != int(lb[".tile_capacity"]):
        add("tile_capacity", int(la[".tile_capacity"]), int(lb[".tile_capacity"]))
    tile_leaves = [k for k in la if k.startswith(".tiles.") and la[k] is not None]
    ta, tb = tile_leaves_of(la), tile_leaves_of(lb)
    hs = (la[".tiles.base"].shape[1] // 4) if ".tiles.base" in tile_leaves else 0
    pool_reported = set()
    for pe, slot in ((p, q) for p in range(tables.NUM_PES) for q in range(hs * 4)):
        name = f"PE{pe} {_tile_name(slot, hs)}"
        for k in tile_leaves:
            leaf = k[len(".tiles."):]
            if leaf in ("words", "defined"):     # the Words the slot owns on either side
                part = ("words", "defined").index(leaf)
                n = max(own_words(t, pe, slot)[part].size for t in (ta, tb))
                va, vb = (tile_words(t, pe, slot)[part][:n] for t in (ta, tb))
            else:
                va, vb = la[k][pe, slot], lb[k][pe, slot]
            if np.array_equal(va, vb):
                continue
            pool_reported.add(k)
            if va.ndim == 0:
                add(f"tile {name} {leaf}", _code_name(leaf, int(va)), _code_name(leaf, int(vb)))
            else:
                where = np.flatnonzero(va != vb)
                shown = where[:limit].tolist()
                fmt = (lambda v: bool(v)) if va.dtype == bool else (lambda v: f"0x{int(v):016x}")
                add(f"tile {name} {leaf}", [fmt(va[i]) for i in shown], [fmt(vb[i]) for i in shown],
                    slots=shown, count=int(where.size))
    for k in (".tiles.words", ".tiles.defined"):     # pool Words no tile owns
        if k in tile_leaves and k not in pool_reported and not np.array_equal(la[k], lb[k]):
            where = np.argwhere(la[k] != lb[k])
            add(f"tile pool {k[len('.tiles.'):]}", f"{len(where)} Words differ",
                f"first at PE{where[0][0]} Word {where[0][1] * la[k].shape[-1] + where[0][2]}")
    for k in la:
        if k.startswith(".shared.") and la[k] is not None and not np.array_equal(la[k], lb[k]):
            rec = np.flatnonzero((la[k] != lb[k]).reshape(la[k].shape[0], -1).any(axis=1))
            add(f"shared {k[len('.shared.'):]}", f"records {rec.tolist()}",
                [_py(la[k][i]) if la[k].ndim == 1 else int(np.sum(la[k][i] != lb[k][i]))
                 for i in rec[:limit]])
    for k in la:
        if k.startswith(".block.") and la[k] is not None and not np.array_equal(la[k], lb[k]):
            add(f"block {k[len('.block.'):]}", _py(la[k]), _py(lb[k]))
    return out


def format_difference(d: dict, names: tuple = ("jax", "reference")) -> str:
    x, y = names
    f = d["field"]
    if f == "gm":
        return f"gm[{d['address']}..+{d['length']}]: {x} {d[x]} | {y} {d[y]}"
    if "slots" in d:
        more = f" (of {d['count']})" if d["count"] > len(d["slots"]) else ""
        return f"{f} at slots {d['slots']}{more}: {x} {d[x]} | {y} {d[y]}"
    return f"{f}: {x} {d[x]} | {y} {d[y]}"


def signature(diffs: list, names: tuple = ("jax", "reference")) -> tuple:
    """A coarse label of a mismatch: the two faults when they differ, else the
    fault and the kinds of field that differ (gm, tile, block, gpr, ...)."""
    x, y = names
    for d in diffs:
        if d["field"] == "exception":
            return ("exception",)
        if d["field"].startswith("shape "):
            return ("shape",)
        if d["field"] == "fault":
            return (f"{d[x]} vs {d[y]}",)
    return ("same fault",) + tuple(sorted({d["field"].split(" ")[0] for d in diffs}))


# ----------------------------------------------------------------- the oracle


def _oracle_init():
    # the oracle needs no accelerator: keep worker processes on the CPU
    jax.config.update("jax_platforms", "cpu")


def _oracle_chunk(items, cfg, on_fault):
    """Reference outcomes of [Case or (Case, initial State)]."""
    out = []
    for item in items:
        c, st = item if isinstance(item, tuple) else (item, None)
        st = initial_state(c, cfg) if st is None else st
        out.append(reference_outcome(st, c.words, c.pe, on_fault, cfg, getattr(c, "core", False)))
    return out


class _Done:
    """A finished 'future' (in-process oracle)."""

    def __init__(self, value):
        self._value = value

    def done(self) -> bool:
        return True

    def result(self):
        return self._value


class Oracle:
    """pj.reference.run on lists of Cases: in this process (jobs <= 1), or in
    `jobs` worker processes (spawned; they import ptojax and run on the CPU)."""

    task_cases = 32                 # cases per worker task

    def __init__(self, cfg: MachineConfig, on_fault: str, jobs: int = 1):
        self.cfg, self.on_fault, self.jobs = cfg, on_fault, max(1, int(jobs))
        self.pool = None
        if self.jobs > 1:
            self.pool = cf.ProcessPoolExecutor(self.jobs, mp_context=multiprocessing.get_context("spawn"),
                                               initializer=_oracle_init)

    def submit(self, cases: list) -> list:
        """Futures whose results concatenate to the outcomes of `cases` (Cases,
        or (Case, initial State) pairs), in order."""
        if not cases:
            return []
        if self.pool is None:
            return [_Done(_oracle_chunk(cases, self.cfg, self.on_fault))]
        k = max(1, min(self.task_cases, -(-len(cases) // self.jobs)))
        return [self.pool.submit(_oracle_chunk, cases[i: i + k], self.cfg, self.on_fault)
                for i in range(0, len(cases), k)]

    def close(self):
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.pool = None


# ----------------------------------------------------------------- the campaign


@dataclass
class Mismatch:
    """A case whose two results differ."""
    k: int
    index: int
    case: G.Case
    diffs: list
    against: bool = False          # found by the external command (--against)

    @property
    def signature(self) -> tuple:
        if self.against:
            return ("against",) + signature(self.diffs, ("jax", "external"))
        return signature(self.diffs)


@dataclass
class CampaignConfig:
    seed: int = 0
    count: int = 1000
    config: str = "tiny"
    rows: int = 256
    sample: float = 1.0
    on_fault: str = "abandon"
    pe: int = 0
    ops: Optional[frozenset] = None
    kinds: Optional[tuple] = None
    jobs: int = 1
    shard: tuple = (0, 1)
    cas_weight: Optional[float] = None     # share of MGATHER.CAS kinds; None: from `ops`
    matmul_weight: Optional[float] = None  # share of TMATMUL/TGEMV kinds; None: from `ops`
    profile: str = "portable"       # MachineConfig.profile of both models
    core: bool = False              # every case on the Core: pj.batch.run(core=True) / run_core
    coop_weight: Optional[float] = None    # share of cooperative / Shared kinds (core only)
    edge_weight: float = 0.0        # share of large-tile / budget-edge kinds (gen/edges.py)
    keep_mismatches: int = 50       # Mismatch records kept (all are counted)

    @property
    def machine(self) -> MachineConfig:
        from ..state import preset
        cfg = preset(self.config)
        return cfg if cfg.profile == self.profile else cfg.replace(profile=self.profile)

    @property
    def cas(self) -> float:
        """The generator's probability of an MGATHER.CAS kind: as given, else 0
        without MGATHER.CAS among the ops, 1 when it is the only op, 1/3 otherwise
        (at most 1 - a given matmul_weight)."""
        if self.cas_weight is not None:
            return float(self.cas_weight)
        if "cas_weight" not in {f.name for f in dataclasses.fields(G.GenConfig)}:
            return 0.0
        if self.ops is not None and "MGATHER.CAS" not in self.ops:
            return 0.0
        share = 1.0 if self.ops == frozenset({"MGATHER.CAS"}) else 1.0 / 3.0
        if self.matmul_weight is not None:
            share = min(share, 1.0 - float(self.matmul_weight))
        return min(share, 1.0 - self.coop)

    @property
    def matmul(self) -> float:
        """The generator's probability of a TMATMUL/TGEMV kind: as given, else 0
        unless a matrix operation is among the ops ("all" keeps the mix of the
        campaigns before the matrix kinds), 1 when only matrix operations are,
        1/3 otherwise (at most 1 - the CAS share)."""
        if self.matmul_weight is not None:
            return float(self.matmul_weight)
        if self.ops is None or not self.ops & frozenset(MATRIX_OPS):
            return 0.0
        if self.ops <= frozenset(MATRIX_OPS):
            return 1.0 - self.coop
        return max(0.0, min(1.0 / 3.0, 1.0 - self.cas - self.coop))

    @property
    def coop(self) -> float:
        """The generator's probability of a cooperative / Shared kind (COOP_KINDS):
        as given, else 1/3 with core when the ops include a TMATMUL form (or are
        all), 0 without core."""
        if self.coop_weight is not None:
            return float(self.coop_weight)
        if not self.core:
            return 0.0
        if self.ops is not None and not self.ops & frozenset(G.COOP_FORMS):
            return 0.0
        return 1.0 / 3.0

    @property
    def matmul_forms(self) -> tuple:
        """The matrix forms the generator draws: the selected ones (all when none is)."""
        if self.ops is None:
            return ()
        return tuple(o for o in MATRIX_OPS if o in self.ops)

    @property
    def gen(self) -> G.GenConfig:
        kw = {"cas_weight": self.cas} if self.cas > 0 else {}
        if self.matmul > 0 or self.coop > 0:
            kw.update(matmul_forms=self.matmul_forms)
        if self.matmul > 0:
            kw.update(matmul_weight=self.matmul)
        if self.core:
            kw.update(core=True, coop_weight=self.coop)
        if self.edge_weight > 0:
            kw.update(edge_weight=self.edge_weight)
        return G.GenConfig(machine=self.machine, max_words=WORDS, pe=self.pe, **kw)


@dataclass
class CampaignResult:
    cfg: CampaignConfig
    cases: int = 0                  # run on pj.batch.run
    compared: int = 0               # also run on the oracle
    mismatches: int = 0
    against_compared: int = 0
    against_mismatches: int = 0
    seconds: float = 0.0
    first_call_seconds: float = 0.0
    coverage: Coverage = None
    kept: list = field(default_factory=list)
    exported: list = field(default_factory=list)
    devices: int = 1
    interrupted: bool = False       # stopped by Ctrl-C: the counts cover the cases finished

    @property
    def cases_per_s(self) -> float:
        return self.cases / self.seconds if self.seconds > 0 else 0.0


def run_campaign(cc: CampaignConfig, *, progress: Callable = None, export=None, against=None,
                 oracle: Oracle = None) -> CampaignResult:
    """Run a campaign; `progress(done, total, result)` after every batch.

    export(k, index, case, initial_state, reference_outcome): called for cases
    to export (it decides which; return False to stop asking).
    against: an object with `.run_many([(case, state)]) -> [Outcome]` (the
    external command, casefile.External); every case is compared with
    pj.batch.run's result too.
    """
    mcfg, gen = cc.machine, cc.gen
    runner = JaxRunner(mcfg, cc.rows, cc.pe, cc.on_fault, core=cc.core)
    own_oracle = oracle is None
    oracle = oracle or Oracle(mcfg, cc.on_fault, cc.jobs)
    res = CampaignResult(cc, coverage=Coverage(cc.ops, cc.cas, cc.matmul, cc.coop,
                                                       cc.edge_weight, mcfg),
                         devices=jax.local_device_count())
    me, n_shards = cc.shard
    total = len(range(me, cc.count, n_shards))
    cases = draw_cases(cc.seed, cc.count, gen, Selection(cc.ops, cc.kinds), cc.shard)
    jax_thread = cf.ThreadPoolExecutor(1, thread_name_prefix="ptojax-fuzz-jax")
    want_export = export is not None

    def chunks():
        while True:
            chunk = []
            for item in cases:
                chunk.append(item)
                if len(chunk) == runner.capacity:
                    break
            if not chunk:
                return
            yield chunk

    def start_of(c, prepared, r):
        return prepared[r] if r in prepared else initial_state(c, mcfg)

    def finalize(chunk, prepared, jfut, ofuts, sample_rows):
        nonlocal want_export
        got = jfut.result()
        want = [o for f in ofuts for o in f.result()]
        oracle_of = _tally(res, cc, chunk, got, want, sample_rows)
        if want_export:
            want_export = _export_chunk(export, cc, mcfg, chunk, oracle_of,
                                        lambda c, r: start_of(c, prepared, r))
        if against is not None:
            _compare_against(res, cc, against, chunk, got, lambda c, r: start_of(c, prepared, r))

    t0 = time.perf_counter()
    try:
        _loop(chunks, finalize, runner, oracle, jax_thread, res, progress, total, cc, mcfg, t0)
    except KeyboardInterrupt:
        res.interrupted = True
    finally:
        jax_thread.shutdown(wait=True)
        if own_oracle:
            oracle.close()
    res.seconds = time.perf_counter() - t0
    return res


def _tally(res, cc, chunk, got, want, sample_rows) -> dict:
    """Coverage, counts and kept mismatches of one finished chunk; {row: oracle outcome}."""
    bad = mismatch_mask(got, want, sample_rows)
    oracle_of = dict(zip(sample_rows, want))
    for r, (k, j, c) in enumerate(chunk):
        ref = oracle_of.get(r)
        res.coverage.add(c, ref.fault if ref is not None else tables.FAULTS[int(got.fault_code[r])])
    res.cases += len(chunk)
    res.compared += len(sample_rows)
    for i in np.flatnonzero(bad).tolist():
        r = sample_rows[i]
        res.mismatches += 1
        if len(res.kept) < cc.keep_mismatches:
            k, j, c = chunk[r]
            res.kept.append(Mismatch(k, j, c, differences(got[r], want[i])))
    return oracle_of


def _export_chunk(export, cc, mcfg, chunk, oracle_of, start_of) -> bool:
    """Offer every case of the chunk to `export` (with its reference outcome);
    False once it declines further cases."""
    for r, (k, j, c) in enumerate(chunk):
        ref = oracle_of.get(r)
        st = start_of(c, r)
        if ref is None:
            ref = reference_outcome(st, c.words, c.pe, cc.on_fault, mcfg, c.core)
        if export(k, j, c, st, ref) is False:
            return False
    return True


def _compare_against(res, cc, against, chunk, got, start_of):
    """The external command's outcomes of the chunk, compared with pj.batch.run's."""
    exts = against.run_many([(c, start_of(c, r)) for r, (_, _, c) in enumerate(chunk)])
    for r, ((k, j, c), ext) in enumerate(zip(chunk, exts)):
        res.against_compared += 1
        mine = got[r]
        if not mine.same(ext):
            res.against_mismatches += 1
            if len(res.kept) < cc.keep_mismatches:
                res.kept.append(Mismatch(k, j, c, differences(mine, ext, ("jax", "external")),
                                         against=True))


def _loop(chunks, finalize, runner, oracle, jax_thread, res, progress, total, cc, mcfg, t0):
    """Batches in flight: pj.batch.run in `jax_thread`, the oracle in its
    workers (or this thread); finished in order, `depth` at most pending."""
    pending = collections.deque()
    depth = 3 if oracle.pool is not None else 1

    def finish_one():
        finalize(*pending.popleft())
        res.seconds = time.perf_counter() - t0
        if progress:
            progress(res.cases, total, res)

    for chunk in chunks():
        sample_rows = [r for r, (k, _, _) in enumerate(chunk) if sampled(cc.seed, k, cc.sample)]
        # initial States that need setup words run: built once, for both sides
        prepared = {r: initial_state(c, mcfg) for r, (_, _, c) in enumerate(chunk) if _prepared(c)}
        rows = [(prepared[r], c.words) if r in prepared else c for r, (_, _, c) in enumerate(chunk)]
        jfut = jax_thread.submit(runner.run, rows)
        ofuts = oracle.submit([(chunk[r][2], prepared.get(r)) for r in sample_rows])
        if res.first_call_seconds == 0.0:
            jfut.result()
            res.first_call_seconds = time.perf_counter() - t0
        pending.append((chunk, prepared, jfut, ofuts, sample_rows))
        while pending and (len(pending) >= depth
                           or (pending[0][2].done() and all(f.done() for f in pending[0][3]))):
            finish_one()
    while pending:
        finish_one()


def report_json(res: CampaignResult, extra: Optional[dict] = None) -> dict:
    cc = res.cfg
    steady = res.seconds - res.first_call_seconds
    first_cases = min(res.cases, cc.rows - 1)
    out = {
        "format": REPORT_FORMAT,
        "seed": cc.seed, "count": cc.count, "config": cc.config, "batch": cc.rows,
        "cases_per_call": cc.rows - 1, "on_fault": cc.on_fault, "pe": cc.pe,
        "ops": sorted(op_token(o) for o in cc.ops) if cc.ops else "all",
        "kinds": list(cc.kinds) if cc.kinds else "all",
        "sample": cc.sample, "cas_weight": round(cc.cas, 4), "matmul_weight": round(cc.matmul, 4),
        "core": cc.core, "coop_weight": round(cc.coop, 4),
        "edge_weight": round(cc.edge_weight, 4),
        "profile": cc.profile, "shard": list(cc.shard),
        "devices": res.devices, "jobs": cc.jobs,
        "cases": res.cases, "compared": res.compared, "mismatches": res.mismatches,
        "seconds": round(res.seconds, 3), "cases_per_s": round(res.cases_per_s, 1),
        "first_call_seconds": round(res.first_call_seconds, 3),
        "steady_cases_per_s": round((res.cases - first_cases) / steady, 1) if steady > 0 else None,
        "coverage": res.coverage.to_json(),
        "never_hit": res.coverage.never_hit(),
        "not_applicable": res.coverage.not_applicable(),
        "fault_by_label": {k: dict(v) for k, v in sorted(res.coverage.fault_by_label.items())},
        "interrupted": res.interrupted,
    }
    if res.against_compared:
        out["against"] = {"compared": res.against_compared, "mismatches": res.against_mismatches}
    if extra:
        out.update(extra)
    return out


def merge_reports(reports: Iterable[dict]) -> dict:
    """Combine the --json reports of the shards of one campaign (sums counts)."""
    reports = list(reports)
    if not reports:
        raise ValueError("no reports to merge")
    out = dict(reports[0])
    for k in ("cases", "compared", "mismatches"):
        out[k] = sum(r[k] for r in reports)
    out["seconds"] = max(r["seconds"] for r in reports)
    out["cases_per_s"] = round(out["cases"] / out["seconds"], 1) if out["seconds"] else 0.0
    cov = {}
    for r in reports:
        for axis, counts in r["coverage"].items():
            c = cov.setdefault(axis, collections.Counter())
            c.update(counts)
    out["coverage"] = {a: dict(c) for a, c in cov.items()}
    out["never_hit"] = {a: [v for v in vals if all(v in r["never_hit"][a] for r in reports)]
                        for a, vals in reports[0]["never_hit"].items()}
    out["shard"] = [None, len(reports)]
    out.pop("steady_cases_per_s", None)
    out.pop("fault_by_label", None)
    return out


__all__ = ["CampaignConfig", "CampaignResult", "JaxRunner", "Mismatch", "Oracle",
           "Outcome", "Selection", "batch_arrays", "case_at", "differences",
           "draw_cases", "filler_words", "format_difference", "initial_state", "merge_reports",
           "reference_outcome", "report_json", "run_campaign", "sampled",
           "state_leaves", "WORDS"]
