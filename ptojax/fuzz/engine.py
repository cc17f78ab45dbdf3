"""pj.batch.run at a campaign's one compiled shape, and the initial States of its rows.

Every call runs `rows` rows of PROGRAM_WORDS words: case rows (at most WORDS
words) and setup passes (up to PROGRAM_WORDS words of a case's setup) fill
the first rows, and the rest are filler rows of length 0 (never executed)
whose words are BSTARTs of every effectful operation, so the static
arguments pj.batch.run derives from the words (completion bound, effect set)
never change: a campaign, its shrinking and its replays compile
pj.batch.run once per (config, rows, core). The executor's loops run as
many steps as a batch's longest stream and its most completions, so the
long rows a setup pass needs cost a batch of 16-word cases nothing.

The States of a batch are built on the device from the rows' GM, GPRs, PC
and TILE_CAPACITY (and, for a case whose setup ran, that row of the setup's
results): no host-side State, no per-case or per-leaf transfer, and the
batch is donated to the run.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from .. import tables
from .._x64 import x64
from ..isa import words as IW
from ..machine import commit_capable
from ..state import MachineConfig, State, state_leaves
from . import gen as G

WORDS = 16                       # words of a case row: GenConfig.max_words
PROGRAM_WORDS = 32               # words of a row of the compiled program (a setup pass's)
# one per effect group; TSTORE.SPART is both TSTORE and SHARED (Shared TLOAD/TSTORE),
# which a drawn B.IOS word reaches in single-PE campaigns too
FILLER_OPS = ("TLOAD", "TSTORE.SPART", "MGATHER.CAS", "TMATMUL", "TMOV")
EFFECT_BITS = {"TLOAD": 1, "TSTORE": 2, "SHARED": 4, "MGATHER.CAS": 8, "MATMUL": 16, "TMOV": 32}


def filler_words(length: int = PROGRAM_WORDS) -> np.ndarray:
    """The words of a filler row: BSTARTs of FILLER_OPS in turn, so every effect
    group (machine.possible_effects: TLOAD, TSTORE, SHARED, MGATHER.CAS,
    MATMUL, TMOV) is in every call's effect set, and its completion bound is the
    most any row of `length` words can have: one program per campaign."""
    starts = [G.START[op] for op in FILLER_OPS]
    return np.array([starts[k % len(starts)] for k in range(length)], np.uint32)


@functools.lru_cache(maxsize=8)
def reset_leaves(cfg: MachineConfig) -> State:
    """pj.reset(cfg) with numpy leaves (cheap to copy and stack)."""
    from ..state import reset
    return jax.tree_util.tree_map(np.asarray, reset(cfg))


# ----------------------------------------------------------------- rows of words


def _row_ops(words, lengths) -> tuple[np.ndarray, np.ndarray]:
    """(encoding index of each word, NONE past the row's length; whether each
    word is a BSTART)."""
    w = np.asarray(words, np.uint32)
    enc = IW.encodings(w)
    enc[np.arange(w.shape[1])[None, :] >= np.asarray(lengths)[:, None]] = IW.NONE
    return enc, np.isin(enc, _START_ENCODINGS)


_START_ENCODINGS, _START_NAMES, _DATATYPE = IW.start_fields()
_IOS_ENCODINGS = np.array([i for i, m in enumerate(IW.MNEMONICS) if m == "B.IOS"], np.int16)
# encoding index -> effect bits of a BSTART of it (machine._EFFECT_OPS)
_EFFECT_OF = np.zeros(len(IW.MNEMONICS), np.int64)
for _i, _op in zip(_START_ENCODINGS, _START_NAMES):
    _eng = {o: e for o, e, _ in tables.OPS}.get(_op)
    _EFFECT_OF[_i] = (EFFECT_BITS["MATMUL"] if _eng == "CUBE" else
                      EFFECT_BITS["TLOAD"] if _op == "TLOAD" else
                      EFFECT_BITS["TSTORE"] | (EFFECT_BITS["SHARED"] if _op == "TSTORE.SPART" else 0)
                      if _op in ("TSTORE", "TSTORE.SPART") else
                      EFFECT_BITS["MGATHER.CAS"] if _op == "MGATHER.CAS" else
                      EFFECT_BITS["TMOV"] if _op.startswith("TMOV") else 0)


def row_signature(words, lengths) -> np.ndarray:
    """Per row, what its completions can cost a batch: the effect groups its
    BSTARTs name (machine.possible_effects, row by row: a B.IOS with a TLOAD or
    TSTORE start adds SHARED) in the low bits, its completion bound above them.
    The executor runs a family only when some row of the batch needs it at that
    completion, so rows of one signature batched together pay for their own."""
    enc, starts = _row_ops(words, lengths)
    bits = np.bitwise_or.reduce(np.where(starts, _EFFECT_OF[np.maximum(enc, 0)], 0), axis=1)
    ios = np.isin(enc, _IOS_ENCODINGS).any(axis=1)
    tlsu = (bits & (EFFECT_BITS["TLOAD"] | EFFECT_BITS["TSTORE"])) != 0
    bits |= np.where(ios & tlsu, EFFECT_BITS["SHARED"], 0)
    masked = np.where(enc != IW.NONE, np.asarray(words, np.uint32), 0)
    commits = commit_capable(masked) if masked.shape[1] else np.zeros(len(masked), np.int64)
    return (np.asarray(commits, np.int64) << 8) | bits


_SIZED = np.array(sorted({e for e, f in IW.FIELDS if f.name == "SizeCode"}), np.int16)
_SIZE = IW.field_of(int(_SIZED[0]), "SizeCode")
assert all(IW.field_of(int(e), "SizeCode").pieces == _SIZE.pieces for e in _SIZED)


def row_size(words, lengths) -> np.ndarray:
    """Per row, the largest SizeCode its B.IOT and B.IOS words name (0: none): how
    many lanes its completions take (ops.lowering.lane_classes), where a machine
    has several lane classes."""
    enc, _ = _row_ops(words, lengths)
    return np.where(np.isin(enc, _SIZED), IW.extract(words, _SIZE), 0).max(axis=1, initial=0)


# ----------------------------------------------------------------- States on the device


@functools.partial(jax.jit, static_argnums=(0,))
def _assemble(rows: int, reset: State, prepared: Optional[State], which, gm, gpr, pc, cap) -> State:
    """`rows` States: row r is prepared[which[r]] (a setup's result) where
    which[r] >= 0, else the reset State; then its GM, GPRs, PC and
    TILE_CAPACITY from the row arrays. Fresh buffers (donatable)."""
    def leaf(r, p=None):
        out = jnp.broadcast_to(r, (rows,) + r.shape)
        if p is None:
            return out
        pick = jnp.take(p, jnp.maximum(which, 0), axis=0)
        return jnp.where((which >= 0).reshape((rows,) + (1,) * r.ndim), pick, out)
    if prepared is None:
        st = jax.tree_util.tree_map(leaf, reset)
    else:
        st = jax.tree_util.tree_map(leaf, reset, prepared)
    return st.replace(gm=gm, gpr=gpr, pc=pc, tile_capacity=cap, fault=jnp.zeros(rows, jnp.int32),
                      fault_address=jnp.zeros(rows, jnp.uint64))


@dataclass
class Rows:
    """Initial-State fields of the rows of one call (numpy, one row per entry):
    GM, GPR files, PC, TILE_CAPACITY, and where a setup's result is the start
    (`which`: its row in `prepared`, -1 none)."""
    gm: np.ndarray              # uint8[n, gm_bytes]
    gpr: np.ndarray             # uint64[n, 4, NUM_GPRS]
    pc: np.ndarray              # uint64[n]
    tile_capacity: np.ndarray   # uint64[n]
    which: Optional[np.ndarray] = None      # int32[n]
    prepared: Optional[State] = None        # a device State [rows, ...] (Engine.run's)

    def __len__(self) -> int:
        return len(self.pc)

    @classmethod
    def of_cases(cls, cases: Sequence, cfg: MachineConfig) -> "Rows":
        """The rows of Cases (their GM, GPRs, PC, TILE_CAPACITY: before any setup)."""
        a = [G.case_arrays(c, cfg) for c in cases]
        return cls(np.stack([x["gm"] for x in a]), np.stack([x["gpr"] for x in a]),
                   np.array([x["pc"] for x in a], np.uint64),
                   np.array([x["tile_capacity"] for x in a], np.uint64))


class Engine:
    """pj.batch.run at one compiled shape: `rows` rows of PROGRAM_WORDS words
    (core=True: pj.batch.run(core=True), every completion a Core collective)."""

    def __init__(self, cfg: MachineConfig, rows: int, pe: int = 0, on_fault: str = "abandon",
                 core: bool = False):
        if rows < 2:
            raise ValueError(f"a batch needs at least 2 rows (cases + the filler row), got {rows}")
        if core and pe != 0:
            raise ValueError("a Core runner runs every PE; leave pe at 0")
        self.cfg, self.rows, self.pe, self.on_fault, self.core = cfg, rows, pe, on_fault, core

    @property
    def capacity(self) -> int:
        """Rows per call: every row but the last, which is always a filler row."""
        return self.rows - 1

    @x64
    def states(self, rows: Rows) -> State:
        """The device States of a call: `rows` then reset filler rows."""
        n, R, cfg = len(rows), self.rows, self.cfg
        if not 1 <= n <= self.capacity:
            raise ValueError(f"{n} rows for a runner of {self.capacity} case rows")
        reset = reset_leaves(cfg)
        pad = lambda a, fill: np.concatenate([a, np.broadcast_to(fill, (R - n,) + a.shape[1:])])
        which = (np.full(n, -1, np.int32) if rows.which is None else rows.which).astype(np.int32)
        return _assemble(R, reset, rows.prepared, pad(which, -1), pad(rows.gm, reset.gm),
                         pad(rows.gpr, reset.gpr), pad(rows.pc, reset.pc),
                         pad(rows.tile_capacity, np.uint64(cfg.tile_capacity)))

    def run(self, rows: Rows, words, lengths, on_fault: Optional[str] = None):
        """pj.batch.run's BatchResult (all `rows` rows, the fillers last) of the
        rows' words ([n, <= PROGRAM_WORDS]) from the rows' States, donated."""
        from ..batch.execute import run as batch_run
        n = len(rows)
        w = np.tile(filler_words(), (self.rows, 1))
        w[:n] = 0
        words = np.asarray(words, np.uint32)
        if words.shape[1] > PROGRAM_WORDS:
            raise ValueError(f"rows of {words.shape[1]} words exceed the program's {PROGRAM_WORDS}")
        w[:n, : words.shape[1]] = words
        ln = np.zeros(self.rows, np.int32)
        ln[:n] = lengths
        return batch_run(self.states(rows), w, self.pe, lengths=ln,
                         on_fault=on_fault or self.on_fault, cfg=self.cfg, donate=True,
                         core=self.core)

    # ------------------------------------------------------------- setup

    def prepare(self, cases: Sequence, failed: Optional[list] = None) -> tuple[State, np.ndarray]:
        """Run Cases' setup words (gen.Case.setup, at most `capacity` cases), as
        gen.build_state does on the oracle: (the device States after them, row i
        the i-th case's, PC back at the case's, `undefine` applied; the GM bytes
        uint8[n, gm_bytes] of those rows). Pokes are not applied (they are the
        rows', Rows). A setup that does not complete cleanly is a RuntimeError,
        or, given a `failed` list, an (index, message) entry there."""
        n = len(cases)
        rows = Rows.of_cases(cases, self.cfg)
        setup = [np.asarray(c.setup, np.uint32) for c in cases]
        total = np.array([len(s) for s in setup], np.int64)
        done = np.zeros(n, np.int64)
        faulted = np.full(n, -1, np.int64)         # the fault of a setup that faulted
        prepared = None
        for start in range(0, int(total.max(initial=0)), PROGRAM_WORDS):
            chunk = np.zeros((n, PROGRAM_WORDS), np.uint32)
            ln = np.zeros(n, np.int32)
            for i, s in enumerate(setup):
                if faulted[i] < 0 and start < len(s):
                    part = s[start: start + PROGRAM_WORDS]
                    chunk[i, : len(part)] = part
                    ln[i] = len(part)
            if prepared is not None:
                rows = Rows(rows.gm, rows.gpr, rows.pc, rows.tile_capacity,
                            np.arange(n, dtype=np.int32), prepared)
            res = self.run(rows, chunk, ln, on_fault="abandon")
            prepared = res.state
            rows = Rows(np.asarray(prepared.gm)[:n], np.asarray(prepared.gpr)[:n],
                        np.asarray(prepared.pc)[:n], np.asarray(prepared.tile_capacity)[:n])
            code, ex = res.fault_code[:n], res.executed[:n]
            faulted = np.where((faulted < 0) & (code != 0), code, faulted)
            done += np.where(ln > 0, ex, 0)
        assert prepared is not None             # the cases have setup words
        open_ = np.asarray(prepared.block.active)[:n]
        bad = set()
        for i, c in enumerate(cases):
            if faulted[i] >= 0 or done[i] != total[i] or open_[i]:
                fault = tables.FAULTS[faulted[i]] if faulted[i] >= 0 else "Fault_None"
                msg = (f"setup of a {c.kind} case did not complete cleanly: {fault} "
                       f"after {done[i]}/{total[i]} words\n{c.describe()}")
                if failed is None:
                    raise RuntimeError(msg)
                failed.append((i, msg))
                bad.add(i)
        prepared = self._finish(prepared, [c for i, c in enumerate(cases)], skip=bad)
        return prepared, np.asarray(prepared.gm)[:n]

    @x64
    def _finish(self, prepared: State, cases: Sequence, skip=()) -> State:
        """PC back at each case's; `undefine` cleared in the rows that have it
        (few: on the host, written back row by row), but rows `skip`."""
        pcs = np.array([c.pc & ((1 << 64) - 1) for c in cases], np.uint64)
        pc = np.asarray(prepared.pc).copy()
        pc[: len(cases)] = pcs
        prepared = prepared.replace(pc=jnp.asarray(pc))
        for i, c in enumerate(cases):
            if c.undefine and i not in skip:
                prepared = _set_row(prepared, np.int32(i), _undefined(prepared, i, c, self.cfg))
        return prepared


def _undefined(states: State, i: int, case, cfg: MachineConfig) -> State:
    """Row i of `states` with the Case's `undefine` applied (gen.prepare_state's rule)."""
    one = jax.tree_util.tree_map(lambda a: np.array(a[i]), states)
    leaves = dict(one.tiles.items())
    G.undefine_words(leaves, case, cfg)
    return one.replace(tiles=one.tiles.replace(defined=leaves["defined"],
                                               defined_valid=leaves["defined_valid"]))


@functools.partial(jax.jit, donate_argnums=(0,))
def _set_row(states: State, i, row: State) -> State:
    return jax.tree_util.tree_map(lambda a, r: a.at[i].set(r), states, row)


def leaves_of(result, n: int) -> dict:
    """The first n rows of a BatchResult's State as numpy leaves (views)."""
    return {k: v[:n] for k, v in state_leaves(result.state).items()}


__all__ = ["EFFECT_BITS", "Engine", "FILLER_OPS", "PROGRAM_WORDS", "Rows", "WORDS",
           "filler_words", "leaves_of", "reset_leaves", "row_signature", "row_size"]
