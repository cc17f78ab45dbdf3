"""The oracle side of a campaign: pj.reference on chunks of cases, in worker
processes or in this one.

A chunk (starts.Starts) carries what its cases start from as arrays (the GM,
GPRs, PC and TILE_CAPACITY of each case, and the result of a setup once per
drawn case that has one) and their words; a worker rebuilds each initial State,
runs `pj.reference.run_leaves` (numpy out, never a JAX array) and sends the
chunk's final States back stacked (compare.Results), which the campaign
compares with pj.batch.run's in one vectorized pass per leaf.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
from typing import Optional

import jax
import numpy as np

from ..state import MachineConfig, State
from .compare import Outcome, Results
from .starts import Starts


def reference_outcome(state: State, words, pe: int, on_fault: str, cfg: MachineConfig,
                      core: bool = False) -> Outcome:
    """pj.reference's result (core=True: the Core's, run_core) as an Outcome; an
    exception it raises is an Outcome too (a finding)."""
    from ..reference import run_leaves
    try:
        leaves, executed = run_leaves(state, list(words), pe, on_fault=on_fault, cfg=cfg, core=core)
        return Outcome(leaves, executed)
    except Exception as e:                   # noqa: BLE001 - reported as a mismatch
        return Outcome.failed(e)


def run_work(work: Starts, cfg: MachineConfig, pe: int, on_fault: str) -> Results:
    """The reference model's results of a chunk, stacked."""
    return Results.collect([reference_outcome(work.state(i, cfg), work.words_of(i), pe, on_fault,
                                              cfg, bool(work.core[i])) for i in range(len(work))], cfg)


def _worker_init():
    # the oracle needs no accelerator: keep worker processes on the CPU
    jax.config.update("jax_platforms", "cpu")


class _Done:
    """A finished 'future' (work done in this process)."""

    def __init__(self, value):
        self._value = value

    def done(self) -> bool:
        return True

    def result(self):
        return self._value


class Oracle:
    """pj.reference on chunks of Starts: in this process (jobs <= 1), or in `jobs`
    worker processes (spawned; they import ptojax and run on the CPU), which
    also draw the campaign's pools (`submit_call`)."""

    task_cases = 256                # cases per worker task

    def __init__(self, cfg: MachineConfig, pe: int, on_fault: str, jobs: int = 1):
        self.cfg, self.pe, self.on_fault, self.jobs = cfg, pe, on_fault, max(1, int(jobs))
        self.pool = None
        if self.jobs > 1:
            self.pool = cf.ProcessPoolExecutor(self.jobs, mp_context=multiprocessing.get_context("spawn"),
                                               initializer=_worker_init)

    def submit_call(self, fn, *args):
        """fn(*args) in a worker (or here, at once, with jobs 1): a future."""
        if self.pool is None:
            return _Done(fn(*args))
        return self.pool.submit(fn, *args)

    def submit(self, work: Starts) -> list:
        """Futures whose Results, in order, are the chunk's."""
        n = len(work)
        if not n:
            return []
        if self.pool is None:
            return [_Done(run_work(work, self.cfg, self.pe, self.on_fault))]
        k = max(1, min(self.task_cases, -(-n // self.jobs)))
        return [self.pool.submit(run_work, work.part(i, min(n, i + k)), self.cfg, self.pe,
                                 self.on_fault) for i in range(0, n, k)]

    def close(self):
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.pool = None


def concat(parts: list) -> Optional[Results]:
    """Results of consecutive chunks as one."""
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0]
    if parts[0].outcomes is not None:
        return Results({".fault": np.concatenate([p.leaves[".fault"] for p in parts])},
                       np.concatenate([p.executed for p in parts]),
                       [e for p in parts for e in (p.errors or [None] * len(p))]
                       if any(p.errors for p in parts) else None, {},
                       [o for p in parts for o in p.outcomes])
    offs = np.cumsum([0] + [len(p) for p in parts])
    errors = None
    if any(p.errors is not None for p in parts):
        errors = [e for p in parts for e in (p.errors or [None] * len(p))]
    odd = {int(o) + i: v for p, o in zip(parts, offs) for i, v in p.odd.items()}
    return Results({k: np.concatenate([p.leaves[k] for p in parts]) for k in parts[0].leaves},
                   np.concatenate([p.executed for p in parts]), errors, odd)


__all__ = ["Oracle", "concat", "reference_outcome", "run_work"]
