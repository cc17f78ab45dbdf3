"""Differential campaigns: pj.batch.run against the pj.reference oracle (`ptojax fuzz`).

A campaign is a pipeline of batches, every stage array code but the oracle:

1. draw: worker processes draw pools of cases (cases.draw_pool: the drawn
   Cases, their variants, as arrays);
2. set up: the drawn cases whose initial State needs setup words run them
   on pj.batch.run (engine.Engine.prepare), once for all their variants;
3. route: the rows are sorted by what their completions cost (the effect
   groups and the completion bound, engine.row_signature) into batches of
   one compiled shape, so a batch pays for the families its rows use;
4. run: each batch's States are built on the device and run, donated;
5. compare: a seeded sample of the rows runs on pj.reference in the workers
   (oracle.py), whose stacked final States are compared with the batch's in
   one vectorized pass per leaf (compare.mismatches); coverage is counted
   per batch (coverage.Coverage.add_batch);
6. export and DUT: a batch is written as one file of arrays, or sent to an
   external device under test as one request (dut.py), the answer compared
   the same way.

The engine runs in a thread of its own (XLA releases the GIL), the oracle and
the drawing in worker processes (`jobs` > 1) or in this thread.
"""

from __future__ import annotations

import collections
import concurrent.futures as cf
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Optional, Sequence

import jax
import numpy as np

from .. import tables
from ..state import MachineConfig, state_leaves
from . import gen as G
from .cases import (Drawing, Pool, Selection, case_at, draw_pool, initial_state, sampled,
                    sampled_mask)
from .compare import (BatchOutcomes, Outcome, Results, differences, format_difference, mismatches,
                      signature)
from .coverage import MATRIX_OPS, Coverage, op_token
from .engine import (PROGRAM_WORDS, WORDS, Engine, Rows, filler_words, leaves_of, reset_leaves,
                     row_signature, row_size)
from .oracle import Oracle, concat, reference_outcome
from .starts import Starts

if TYPE_CHECKING:
    from ..batch.execute import BatchResult

REPORT_FORMAT = "ptojax.fuzz-report.v1"
POOL_BATCHES = 8               # engine batches a pool holds: what routing sorts at once
# the Core's share of an all-families campaign: a Core completion costs the
# engine about ten single-PE ones (four PEs, all-or-nothing), so a small share
CORE_SHARE = 1 / 32


# ----------------------------------------------------------------- the campaign's config


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
    semantics: str = "adr0100"      # MachineConfig.semantics of both models
    core: bool = False              # every case on the Core: pj.batch.run(core=True) / run_core
    core_share: Optional[float] = None     # share of draws on the Core; None: from `ops`, `core`
    coop_weight: Optional[float] = None    # share of cooperative / Shared kinds (Core draws)
    edge_weight: float = 0.0        # share of large-tile / budget-edge kinds (gen/edges.py)
    tmov_weight: float = 0.0        # share of TMOV kinds (gen/tmov.py)
    variants: int = 1               # rows per drawn case: it and variants - 1 variants of it
    keep_mismatches: int = 50       # Mismatch records kept (all are counted)

    @property
    def machine(self) -> MachineConfig:
        from ..state import preset
        return preset(self.config).replace(profile=self.profile, semantics=self.semantics)

    @property
    def share_core(self) -> float:
        """The share of draws that run on the Core: 1 with `core`, else as given,
        else CORE_SHARE when the ops are all (every family, the Core's
        included), 0 for a selection of ops."""
        if self.core:
            return 1.0
        if self.core_share is not None:
            return float(self.core_share)
        return CORE_SHARE if self.ops is None else 0.0

    @property
    def cas(self) -> float:
        """The generator's probability of an MGATHER.CAS kind: as given, else 0
        without MGATHER.CAS among the ops, 1 when it is the only op, 1/5 with all
        ops, 1/3 otherwise (at most 1 - a given matmul_weight)."""
        if self.cas_weight is not None:
            return float(self.cas_weight)
        if self.ops is not None and "MGATHER.CAS" not in self.ops:
            return 0.0
        share = 1.0 if self.ops == frozenset({"MGATHER.CAS"}) else \
            0.2 if self.ops is None else 1.0 / 3.0
        if self.matmul_weight is not None:
            share = min(share, 1.0 - float(self.matmul_weight))
        return max(0.0, min(share, 1.0 - self.edge_weight - self.tmov_weight))

    @property
    def matmul(self) -> float:
        """The generator's probability of a TMATMUL/TGEMV kind: as given, else 3/10
        when the ops are all, all that the cooperative and edge shares leave when
        only matrix operations are selected, 1/3 when some are, 0 when none is (at
        most what the CAS and edge shares leave)."""
        if self.matmul_weight is not None:
            return float(self.matmul_weight)
        if self.ops is not None and not self.ops & frozenset(MATRIX_OPS):
            return 0.0
        if self.ops is not None and self.ops <= frozenset(MATRIX_OPS):
            return max(0.0, 1.0 - self.coop - self.edge_weight - self.tmov_weight)
        share = 0.3 if self.ops is None else 1.0 / 3.0
        return max(0.0, min(share, 1.0 - self.cas - self.edge_weight - self.tmov_weight))

    @property
    def coop(self) -> float:
        """The probability of a cooperative / Shared kind (COOP_KINDS) among the
        Core's draws: as given, else 1/3 when the ops include a TMATMUL form
        (or are all); 0 without Core draws."""
        if self.share_core <= 0:
            return 0.0
        if self.coop_weight is not None:
            return float(self.coop_weight)
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
        """The generator config of the draws (the Core's: core_gen)."""
        return self._gen(self.core)

    @property
    def core_gen(self) -> Optional[G.GenConfig]:
        return self._gen(True) if self.share_core > 0 else None

    def _gen(self, core: bool) -> G.GenConfig:
        kw: dict[str, Any] = {"cas_weight": self.cas} if self.cas > 0 else {}     # GenConfig keywords
        # the Core's draws give the cooperative kinds their share from the matrix one
        matmul = min(self.matmul, max(0.0, 1.0 - self.cas - self.coop - self.edge_weight
                                      - self.tmov_weight)) \
            if core else self.matmul
        if matmul > 0 or (core and self.coop > 0):
            kw.update(matmul_forms=self.matmul_forms)
        if matmul > 0:
            kw.update(matmul_weight=matmul)
        if core:
            kw.update(core=True, coop_weight=self.coop)
        if self.edge_weight > 0:
            kw.update(edge_weight=self.edge_weight)
        if self.tmov_weight > 0 and not core:      # TMOV kinds are single-PE draws
            kw.update(tmov_weight=self.tmov_weight)
        return G.GenConfig(machine=self.machine, max_words=WORDS, pe=0 if core else self.pe, **kw)

    @property
    def drawing(self) -> Drawing:
        return Drawing(self.seed, self.gen, Selection(self.ops, self.kinds), max(1, self.variants),
                       self.core_gen, self.share_core)

    def coverage(self) -> Coverage:
        return Coverage(self.ops, self.cas, self.matmul, self.coop, self.edge_weight, self.machine,
                        core_share=self.share_core, variants=self.variants > 1)


# ----------------------------------------------------------------- results


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
class CampaignResult:
    cfg: CampaignConfig
    cases: int = 0                  # run on pj.batch.run
    drawn: int = 0                  # of which drawn by the generator (the rest: variants)
    compared: int = 0               # also run on the oracle
    mismatches: int = 0
    against_compared: int = 0
    against_mismatches: int = 0
    seconds: float = 0.0
    first_call_seconds: float = 0.0
    coverage: Optional[Coverage] = None
    kept: list = field(default_factory=list)
    devices: int = 1
    interrupted: bool = False       # stopped by Ctrl-C: the counts cover the cases finished
    stopped: Optional[str] = None   # why the campaign stopped early (an external DUT's failure)
    setup_failures: list = field(default_factory=list)   # drawn cases whose setup did not complete
    batches: int = 0
    setup_batches: int = 0
    stage_seconds: dict = field(default_factory=lambda: collections.defaultdict(float))

    @property
    def cases_per_s(self) -> float:
        return self.cases / self.seconds if self.seconds > 0 else 0.0


# ----------------------------------------------------------------- drawing pools


def _merge(pools: list) -> Pool:
    """Pools drawn in parts (consecutive draws) as one."""
    pools = [p for p in pools if len(p.drawn)]
    if not pools:
        return draw_pool_empty()
    if len(pools) == 1:
        return pools[0]
    offs = np.cumsum([0] + [len(p.drawn) for p in pools])
    return Pool(drawn=[c for p in pools for c in p.drawn],
                index=np.concatenate([p.index for p in pools]),
                gm=np.concatenate([p.gm for p in pools]), gpr=np.concatenate([p.gpr for p in pools]),
                pc=np.concatenate([p.pc for p in pools]),
                tile_capacity=np.concatenate([p.tile_capacity for p in pools]),
                base=np.concatenate([p.base + o for p, o in zip(pools, offs)]).astype(np.int32),
                variant=np.concatenate([p.variant for p in pools]),
                words=np.concatenate([p.words for p in pools]),
                lengths=np.concatenate([p.lengths for p in pools]),
                labels=[x for p in pools for x in p.labels],
                pokes=[x for p in pools for x in p.pokes])


def draw_pool_empty() -> Pool:
    z = np.zeros(0, np.int64)
    return Pool([], z, np.zeros((0, 1), np.uint8), np.zeros((0, tables.NUM_PES, tables.NUM_GPRS),
                                                           np.uint64),
                z.astype(np.uint64), z.astype(np.uint64), z.astype(np.int32), z.astype(np.int32),
                np.zeros((0, WORDS), np.uint32), z.astype(np.int32))


class Pools:
    """This shard's cases in order, as Pools of about `rows` rows with their case
    numbers, drawn `ahead` pools ahead in the workers (`submit(fn, *args)`)."""

    max_misses = 20000              # draws in a row that a selection may reject

    def __init__(self, cc: CampaignConfig, submit: Callable, rows: int, parts: int = 1,
                 ahead: int = 2):
        self.cc, self.submit, self.parts, self.ahead = cc, submit, max(1, parts), ahead
        self.drawing = cc.drawing
        self.M = self.drawing.variants
        self.groups = -(-cc.count // self.M)             # drawn cases in the whole campaign
        self.per_pool = max(1, rows // self.M)           # drawn cases a pool holds
        self.gm_bytes = cc.machine.gm_bytes
        self.me, self.n = cc.shard

    @property
    def total(self) -> int:
        """Cases this shard runs."""
        M, N = self.M, self.cc.count
        return sum(min(M, N - g * M) for g in range(self.me, self.groups, self.n))

    def _tasks(self) -> Iterator[list]:
        """Lists of draw indices to draw, in order (each one pool's)."""
        if self.drawing.select.everything:
            mine = range(self.me, self.groups, self.n)
            for a in range(0, len(mine), self.per_pool):
                yield list(mine[a: a + self.per_pool])
        else:                       # every shard scans every draw; groups are counted in order
            j, step = 0, max(64, self.per_pool * self.n)
            while True:
                yield list(range(j, j + step))
                j += step

    def _submit(self, js: list):
        k = -(-len(js) // self.parts)
        return [self.submit(draw_pool, self.drawing, js[i: i + k], self.gm_bytes)
                for i in range(0, len(js), k)]

    def __iter__(self) -> Iterator[Pool]:
        tasks = self._tasks()
        pending: collections.deque[list[Any]] = collections.deque()  # futures: cf.Future or oracle._Done
        js: Optional[list[int]]
        for js in tasks:
            pending.append(self._submit(js))
            if len(pending) == self.ahead:
                break
        g = 0                         # the next group number (selection: counted here)
        misses = 0
        select_all = self.drawing.select.everything
        while pending:
            pool = _merge([f.result() for f in pending.popleft()])
            if select_all:
                groups = pool.index.astype(np.int64)
            else:
                # the selected draws of this range are the next groups, in draw order
                groups = np.arange(g, g + len(pool.drawn), dtype=np.int64)
                drawn_in = len(pool.drawn)
                misses = 0 if drawn_in else misses + self.per_pool * self.n
                g += drawn_in
                if misses >= self.max_misses:
                    raise ValueError(f"{self.max_misses} draws in a row matched no selected "
                                     "operation/kind; the generator does not produce such cases")
            k = groups[pool.base] * self.M + pool.variant
            keep = (k < self.cc.count) & (groups[pool.base] % self.n == self.me)
            done = not select_all and g >= self.groups
            if not done:
                js = next(tasks, None)
                if js is not None:
                    pending.append(self._submit(js))
            if keep.any():
                pool = pool.take(np.flatnonzero(keep))
                pool.k = k[keep]
                yield pool
            if done:
                return


# ----------------------------------------------------------------- planning batches


@dataclass
class Batch:
    """One engine call: pool rows `rows` of one pool, their States' arrays,
    words, case numbers, which are sampled, and the oracle's futures."""
    pool: Pool
    rows: np.ndarray                # rows of the pool
    core: bool
    state_rows: Rows
    starts: Starts                  # the same initial States, for the oracle, export and DUT
    k: np.ndarray
    sample: np.ndarray              # bool per row: compared with the oracle
    engine: Optional[cf.Future[BatchResult]] = None     # future of Engine.run's BatchResult
    oracle: list = field(default_factory=list)
    dut: object = None              # the DUT's pending answer


class Planner:
    """Pools into Batches: setup words run on the engine once per drawn case,
    each row's GM and GPRs after them with its pokes, rows routed by signature."""

    def __init__(self, cc: CampaignConfig, engines: Callable, res: CampaignResult):
        self.cc, self.engine_of, self.res = cc, engines, res
        self.mcfg = cc.machine

    def plan(self, pool: Pool) -> list:
        cc, n = self.cc, len(pool)
        assert pool.k is not None       # Pools numbers the cases
        drawn = pool.drawn
        core = pool.core
        used = np.unique(pool.base)
        need = [d for d in used.tolist() if drawn[d].setup or drawn[d].undefine]
        prep_of = np.full(len(drawn), -1, np.int64)      # which prepared batch
        prep_row = np.full(len(drawn), -1, np.int64)
        preps, broken = [], set()
        gm_d, gpr_d = pool.gm.copy(), pool.gpr.copy()
        setup_size = _setup_sizes(pool)
        t = time.perf_counter()
        for flag in (False, True):
            # setups of like size and length together: a pass runs at its largest tile
            ds = sorted((d for d in need if bool(drawn[d].core) == flag),
                        key=lambda d: (setup_size[d], len(drawn[d].setup)))
            eng = self.engine_of(flag)
            for a in range(0, len(ds), eng.capacity if ds else 1):
                chunk = ds[a: a + eng.capacity]
                failed: list[tuple[int, str]] = []
                st, gm = eng.prepare([drawn[d] for d in chunk], failed)
                preps.append((st, flag))
                for i, d in enumerate(chunk):
                    prep_of[d], prep_row[d] = len(preps) - 1, i
                    gm_d[d] = gm[i]
                for i, msg in failed:                 # a generator defect: reported, not run
                    broken.add(chunk[i])
                    rows = np.flatnonzero(pool.base == chunk[i])
                    self.res.setup_failures.append({"k": [int(k) for k in pool.k[rows]],
                                                    "index": int(pool.index[chunk[i]]),
                                                    "error": msg})
                self.res.setup_batches += 1
        self.res.stage_seconds["setup"] += time.perf_counter() - t
        if broken:
            pool = pool.take(np.flatnonzero(~np.isin(pool.base, list(broken))))
            n = len(pool)
            core = pool.core
        assert pool.k is not None       # take keeps them
        # the rows' own State fields: the drawn case's (after its setup), then the row's pokes
        gm, gpr = gm_d[pool.base], gpr_d[pool.base]
        for r in (r for r, p in enumerate(pool.pokes) if p):
            G.apply_pokes(gm[r], gpr[r], pool.pokes[r])
        pc, cap = pool.pc[pool.base], pool.tile_capacity[pool.base]
        pid = prep_of[pool.base]
        # routing: Core rows apart, rows of one prepared batch together, by effect
        # groups then completions within
        sig = row_signature(pool.words, pool.lengths)
        kind = _kind_ids(pool)
        size = np.maximum(row_size(pool.words, pool.lengths), setup_size[pool.base])
        order = np.lexsort((sig >> 8, kind, size, sig & 0xFF, pid, core))
        sample = sampled_mask(cc.seed, pool.k, cc.sample)
        out = []
        host_prep = {}
        i = 0
        while i < n:
            flag = bool(core[order[i]])
            eng = self.engine_of(flag)
            j, batch_pid = i, -1
            while j < n and j - i < eng.capacity and bool(core[order[j]]) == flag:
                p = pid[order[j]]
                if p >= 0 and batch_pid >= 0 and p != batch_pid:
                    break
                batch_pid = max(batch_pid, p)
                j += 1
            rows = order[i:j]
            which = np.where(pid[rows] >= 0, prep_row[pool.base[rows]], -1).astype(np.int32)
            prepared = preps[batch_pid][0] if batch_pid >= 0 else None
            state_rows = Rows(gm[rows], gpr[rows], pc[rows], cap[rows], which, prepared)
            if batch_pid >= 0 and batch_pid not in host_prep:
                host_prep[batch_pid] = {k: np.asarray(v) for k, v in state_leaves(prepared).items()}
            prep_leaves = host_prep.get(batch_pid, {})
            starts = Starts(gm[rows], gpr[rows], pc[rows], cap[rows], which, pool.words[rows],
                            pool.lengths[rows], core[rows], prep_leaves)
            out.append(Batch(pool, rows, flag, state_rows, starts, pool.k[rows], sample[rows]))
            i = j
        return out


# ----------------------------------------------------------------- running


def run_campaign(cc: CampaignConfig, *, progress: Optional[Callable] = None, export=None, against=None,
                 oracle: Optional[Oracle] = None) -> CampaignResult:
    """Run a campaign; `progress(done, total, result)` after every batch.

    export: an object with `.batch(batch, jax_results, oracle_results or None,
    cfg)` (report.BatchExporter, report.Exporter). against: the external
    device under test (dut.BatchedDut: `.send(batch, cfg)`, `.receive(token)`
    -> Results; casefile.External for the one-JSON-line-per-case protocol).
    A DUT that fails stops the campaign with every result so far
    (CampaignResult.stopped).
    """
    from .casefile import ExternalError
    mcfg = cc.machine
    own_oracle = oracle is None
    oracle = oracle or Oracle(mcfg, cc.pe, cc.on_fault, cc.jobs)
    res = CampaignResult(cc, coverage=cc.coverage(), devices=jax.local_device_count())
    engines = {}

    def engine_of(core: bool) -> Engine:
        if core not in engines:
            engines[core] = Engine(mcfg, core_rows(cc) if core else cc.rows, 0 if core else cc.pe,
                                   cc.on_fault, core=core)
        return engines[core]

    pools = Pools(cc, oracle.submit_call, POOL_BATCHES * (cc.rows - 1), parts=oracle.jobs)
    total = pools.total
    planner = Planner(cc, engine_of, res)
    jax_thread = cf.ThreadPoolExecutor(1, thread_name_prefix="ptojax-fuzz-jax")
    pending: collections.deque[Batch] = collections.deque()
    depth = 2
    t0 = time.perf_counter()

    def finish_one():
        b = pending.popleft()
        _finish(res, cc, mcfg, b, export, against)
        res.seconds = time.perf_counter() - t0
        if progress:
            progress(res.cases, total, res)

    planned = _planned(pools, planner, res)
    try:
        for b in planned:
            eng = engine_of(b.core)
            b.engine = jax_thread.submit(eng.run, b.state_rows, b.pool.words[b.rows],
                                         b.pool.lengths[b.rows])
            if b.sample.any():
                b.oracle = oracle.submit(b.starts.take(np.flatnonzero(b.sample)))
            if against is not None and hasattr(against, "send"):
                b.dut = against.send(b, mcfg)
            if res.first_call_seconds == 0.0:
                b.engine.result()
                res.first_call_seconds = time.perf_counter() - t0
            pending.append(b)
            while pending and (len(pending) > depth or _ready(pending[0])):
                finish_one()
        while pending:
            finish_one()
    except KeyboardInterrupt:
        res.interrupted = True
    except ExternalError as e:
        res.stopped = str(e)
    finally:
        planned.close()
        jax_thread.shutdown(wait=True, cancel_futures=True)
        if own_oracle:
            oracle.close()
    res.seconds = time.perf_counter() - t0
    return res


class _planned:
    """The Batches of every pool, planned in a thread of their own (a pool's
    setup words run on the engine there) while this one compares and counts
    the batches before them; iterating yields them in order."""

    def __init__(self, pools: Pools, planner: Planner, res: CampaignResult, ahead: int = 2):
        self.q: queue.Queue = queue.Queue(maxsize=ahead * POOL_BATCHES)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(pools, planner, res), daemon=True,
                                       name="ptojax-fuzz-plan")
        self.thread.start()

    def _run(self, pools, planner, res):
        try:
            for pool in pools:
                res.drawn += int(np.count_nonzero(pool.variant == 0))
                for b in planner.plan(pool):
                    while not self.stop.is_set():
                        try:
                            self.q.put(b, timeout=0.5)
                            break
                        except queue.Full:         # wait for room, or for the stop
                            continue
                    if self.stop.is_set():
                        return
            self.q.put(None)
        except BaseException as e:                 # handed to the consumer, raised there
            self.q.put(e)

    def __iter__(self):
        while True:
            item = self.q.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def close(self):
        self.stop.set()


def _setup_sizes(pool: Pool) -> np.ndarray:
    """Per drawn case, the largest SizeCode its setup words name (its tiles)."""
    n = len(pool.drawn)
    L = max([len(c.setup) for c in pool.drawn] + [1])
    w = np.zeros((n, L), np.uint32)
    ln = np.array([len(c.setup) for c in pool.drawn], np.int32)
    for i, c in enumerate(pool.drawn):
        w[i, : len(c.setup)] = c.setup
    return row_size(w, ln) if n else np.zeros(0, np.int64)


def _kind_ids(pool: Pool) -> np.ndarray:
    """Per row, a number for its drawn case's kind: rows of one kind share the
    costly parts of a family (a matrix kind's K loop and epilogue, say)."""
    names = sorted({c.kind for c in pool.drawn})
    ids = np.array([names.index(c.kind) for c in pool.drawn], np.int64)
    return ids[pool.base] if len(pool.base) else np.zeros(0, np.int64)


def core_rows(cc: CampaignConfig) -> int:
    """Rows of the Core's program: all of them in a Core campaign; else an
    eighth (at least 64), since only the Core's share of a pool's rows and
    setups fill its batches, and an emptier batch costs as much as a full one."""
    if cc.share_core >= 1:
        return cc.rows
    return min(cc.rows, max(64, cc.rows // 8))


def _ready(b: Batch) -> bool:
    assert b.engine is not None     # submitted
    return b.engine.done() and all(f.done() for f in b.oracle)


def _finish(res: CampaignResult, cc: CampaignConfig, mcfg: MachineConfig, b: Batch, export, against):
    """Compare, count and hand on one finished batch."""
    t = time.perf_counter()
    assert b.engine is not None     # submitted
    br = b.engine.result()
    n = len(b.rows)
    got = Results(leaves_of(br, n), np.asarray(br.executed[:n], np.int64))
    res.stage_seconds["engine wait"] += time.perf_counter() - t
    t = time.perf_counter()
    srows = np.flatnonzero(b.sample)
    want = concat([f.result() for f in b.oracle]) if len(srows) else None
    res.stage_seconds["oracle wait"] += time.perf_counter() - t
    t = time.perf_counter()
    faults = np.asarray(got.fault_code).copy()
    bad = np.zeros(0, bool)
    if want is not None:
        bad = mismatches(got, srows, want)
        faults[srows] = _fault_codes(want)
    pool = b.pool
    assert res.coverage is not None     # run_campaign gives it one
    res.coverage.add_batch(pool, b.rows, faults, got.leaves[".numeric_flags"])
    res.cases += n
    res.batches += 1
    res.compared += len(srows)
    for i in np.flatnonzero(bad).tolist():
        r = int(srows[i])
        assert want is not None         # bad rows are the compared ones
        res.mismatches += 1
        if len(res.kept) < cc.keep_mismatches:
            row = int(b.rows[r])
            res.kept.append(Mismatch(int(b.k[r]), int(pool.index[pool.base[row]]), pool.case(row),
                                     differences(got[r], want[i])))
    res.stage_seconds["compare"] += time.perf_counter() - t
    if export is not None:
        t = time.perf_counter()
        export.batch(b, got, want, mcfg)
        res.stage_seconds["export"] += time.perf_counter() - t
    if against is not None:
        t = time.perf_counter()
        ext = against.receive(b.dut) if hasattr(against, "receive") else _run_lines(against, b, mcfg)
        _compare_against(res, cc, b, got, ext)
        res.stage_seconds["dut"] += time.perf_counter() - t


def _fault_codes(r: Results) -> np.ndarray:
    codes = np.asarray(r.fault_code).astype(np.int64).copy()
    if r.errors is not None:
        codes[[i for i, e in enumerate(r.errors) if e is not None]] = -1
    return codes


def _run_lines(ext, b: Batch, mcfg: MachineConfig) -> Results:
    """The one-JSON-line-per-case protocol (casefile.External) on a batch."""
    items = [(b.pool.case(int(r)), b.starts.state(i, mcfg)) for i, r in enumerate(b.rows)]
    return Results.collect(ext.run_many(items), mcfg)


def _compare_against(res: CampaignResult, cc: CampaignConfig, b: Batch, got: Results, ext: Results):
    """The DUT's results of a batch compared with pj.batch.run's."""
    n = len(b.rows)
    bad = mismatches(got, np.arange(n), ext)
    res.against_compared += n
    for r in np.flatnonzero(bad).tolist():
        res.against_mismatches += 1
        if len(res.kept) < cc.keep_mismatches:
            row = int(b.rows[r])
            pool = b.pool
            res.kept.append(Mismatch(int(b.k[r]), int(pool.index[pool.base[row]]), pool.case(row),
                                     differences(got[r], ext[r], ("jax", "external")), against=True))


# ----------------------------------------------------------------- the report


def report_json(res: CampaignResult, extra: Optional[dict] = None) -> dict:
    cc = res.cfg
    steady = res.seconds - res.first_call_seconds
    first_cases = min(res.cases, cc.rows - 1)
    assert res.coverage is not None     # run_campaign gives it one
    out = {
        "format": REPORT_FORMAT,
        "seed": cc.seed, "count": cc.count, "config": cc.config, "batch": cc.rows,
        "cases_per_call": cc.rows - 1, "on_fault": cc.on_fault, "pe": cc.pe,
        "ops": sorted(op_token(o) for o in cc.ops) if cc.ops else "all",
        "kinds": list(cc.kinds) if cc.kinds else "all",
        "sample": cc.sample, "cas_weight": round(cc.cas, 4), "matmul_weight": round(cc.matmul, 4),
        "core": cc.core, "core_share": round(cc.share_core, 4), "coop_weight": round(cc.coop, 4),
        "edge_weight": round(cc.edge_weight, 4), "tmov_weight": round(cc.tmov_weight, 4),
        "variants": cc.variants,
        "profile": cc.profile, "semantics": cc.semantics, "shard": list(cc.shard),
        "devices": res.devices, "jobs": cc.jobs,
        "cases": res.cases, "drawn": res.drawn, "compared": res.compared,
        "mismatches": res.mismatches,
        "seconds": round(res.seconds, 3), "cases_per_s": round(res.cases_per_s, 1),
        "first_call_seconds": round(res.first_call_seconds, 3),
        "steady_cases_per_s": round((res.cases - first_cases) / steady, 1) if steady > 0 else None,
        "batches": res.batches, "setup_batches": res.setup_batches,
        "stage_seconds": {k: round(v, 3) for k, v in sorted(res.stage_seconds.items())},
        "coverage": res.coverage.to_json(),
        "never_hit": res.coverage.never_hit(),
        "not_applicable": res.coverage.not_applicable(),
        "fault_by_label": {k: dict(v) for k, v in sorted(res.coverage.fault_by_label.items())},
        "interrupted": res.interrupted,
        "stopped": res.stopped,
        "setup_failures": res.setup_failures[:20],
        "setup_failure_cases": sum(len(f["k"]) for f in res.setup_failures),
    }
    if res.against_compared or res.stopped:
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
    for k in ("cases", "drawn", "compared", "mismatches"):
        out[k] = sum(r.get(k, 0) for r in reports)
    out["seconds"] = max(r["seconds"] for r in reports)
    out["cases_per_s"] = round(out["cases"] / out["seconds"], 1) if out["seconds"] else 0.0
    cov: dict[str, collections.Counter[str]] = {}
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


# ----------------------------------------------------------------- one case at a time


def draw_cases(seed: int, count: int, gen: G.GenConfig, select: Selection = Selection(),
               shard: tuple = (0, 1), max_misses: int = 20000) -> Iterator[tuple]:
    """(k, draw index, Case) of this shard's share of the first `count` selected
    drawn cases (no variants), one at a time in this process: case k belongs to
    shard k % n, so the shards of one seed together are the whole campaign."""
    me, n = shard
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


class JaxRunner:
    """pj.batch.run at a campaign's shape on given rows (Cases, or (State, words)
    pairs): what the shrinker and `replay` run; Results out."""

    def __init__(self, cfg: MachineConfig, rows: int, pe: int = 0, on_fault: str = "abandon",
                 length: int = WORDS, core: bool = False):
        self.engine = Engine(cfg, rows, pe, on_fault, core)
        self.cfg, self.rows, self.pe, self.on_fault, self.core = cfg, rows, pe, on_fault, core

    @property
    def capacity(self) -> int:
        return self.engine.capacity

    def run(self, items: Sequence) -> Results:
        n = len(items)
        if not 1 <= n <= self.capacity:
            raise ValueError(f"{n} rows for a runner of {self.capacity} case rows")
        pairs = [(initial_state(x, self.cfg), x.words) if isinstance(x, G.Case) else x for x in items]
        states = [jax.tree_util.tree_map(np.asarray, s) for s, _ in pairs]
        for _, w in pairs:
            if len(w) > PROGRAM_WORDS:
                raise ValueError(f"{len(w)} words exceed a row's {PROGRAM_WORDS}")
        stacked = jax.tree_util.tree_map(lambda *xs: np.stack(xs), *states)
        rows = Rows(stacked.gm, stacked.gpr, stacked.pc, stacked.tile_capacity,
                    np.arange(n, dtype=np.int32), stacked)
        words = np.zeros((n, max([len(w) for _, w in pairs] + [1])), np.uint32)
        for i, (_, w) in enumerate(pairs):
            words[i, : len(w)] = np.asarray(w, np.uint32)
        br = self.engine.run(rows, words, [len(w) for _, w in pairs])
        return Results(leaves_of(br, n), np.asarray(br.executed[:n], np.int64))

    def run_many(self, items: Sequence) -> list:
        out = []
        for i in range(0, len(items), self.capacity):
            b = self.run(items[i: i + self.capacity])
            out += [b[j] for j in range(len(b))]
        return out


def batch_arrays(rows: Sequence, cfg: MachineConfig, length: int = WORDS):
    """(batched numpy State, words uint32[R, length], lengths int32[R]) for rows
    that are Cases, (State, words) pairs, or None (a filler row): a batch for
    pj.batch.run itself (the campaign builds its States on the device)."""
    R = len(rows)
    states, words, lengths = [], np.tile(filler_words(length), (R, 1)), np.zeros(R, np.int32)
    for r, row in enumerate(rows):
        if row is None:
            states.append(reset_leaves(cfg))
            continue
        st, w = (initial_state(row, cfg), row.words) if isinstance(row, G.Case) else row
        states.append(jax.tree_util.tree_map(np.asarray, st))
        words[r, : len(w)] = np.asarray(w, np.uint32)
        words[r, len(w):] = 0
        lengths[r] = len(w)
    return jax.tree_util.tree_map(lambda *xs: np.stack(xs), *states), words, lengths


__all__ = ["BatchOutcomes", "CampaignConfig", "CampaignResult", "JaxRunner", "Mismatch", "Oracle",
           "Outcome", "Results", "Selection", "batch_arrays", "case_at", "differences",
           "draw_cases", "filler_words", "format_difference", "initial_state", "merge_reports",
           "reference_outcome", "report_json", "run_campaign", "sampled", "state_leaves", "WORDS"]
