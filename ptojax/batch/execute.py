"""`pj.batch.run`: the unbatched executor (`machine.stream`) under vmap, nothing more.

Streams are padded to a common length (a power of two) and carry their own
lengths; the batch is padded to `batch_rows(B)` rows (the next power of two,
a multiple of the device count) with length-0 streams on copies of a real
State, and the results are cut back to B rows. So the compiled function is
cached per (config, fault mode, padded length, padded rows, commit bound,
effects): a ladder of batch sizes or a campaign's last short batch reuses
the program of its power of two instead of compiling again. With several
local devices the batch axis is sharded over all of them with `jax.sharding`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from .. import tables
from .._x64 import x64
from ..ops.lowering import BATCH_AXIS
from ..machine import (bucket, check_run, commit_capable, open_block_ops, possible_effects,
                       STREAM_STATIC, stream)
from ..executables import PersistentJit
from ..result import RunResult
from ..state import MachineConfig, State


@dataclass(frozen=True)
class BatchResult:
    """States after their streams (leading batch axis) and per-stream outcome."""
    state: State
    fault_code: np.ndarray      # int32[B], index into tables.FAULTS
    fault_address: np.ndarray   # uint64[B] (_FaultAddress: data address or PC)
    executed: np.ndarray        # int32[B]

    @property
    def numeric_flags(self) -> np.ndarray:
        """int32[B]: each State's sticky numeric status flags (bit i is
        tables.NUMERIC_FLAGS[i]; tables.flag_names names them)."""
        return np.asarray(self.state.numeric_flags)

    def __len__(self) -> int:
        return len(self.fault_code)

    @property
    def faults(self) -> list[str]:
        return [tables.FAULTS[c] for c in self.fault_code]

    def __getitem__(self, i: int) -> RunResult:
        """The i-th stream's result as a RunResult (one State)."""
        return RunResult.from_state(unstack_state(self.state, i), int(self.executed[i]))


def _batched(states, words, lengths, pe, hold, cas_seed, cfg, max_commits, effects, core, uniform=False):
    # the axis name lets a loop share one trip count across the batch (ops.lowering.trip_count)
    return jax.vmap(lambda s, w, n: stream(s, w, n, pe, hold, cfg, max_commits, effects,
                                           cas_seed, core, uniform), axis_name=BATCH_AXIS)(states, words, lengths)


_run_kept = PersistentJit(_batched, static_argnames=STREAM_STATIC)
_run_donated = PersistentJit(_batched, static_argnames=STREAM_STATIC, donate_argnums=(0,))


def batch_rows(B: int, n_dev: int = 1) -> int:
    """Rows pj.batch.run compiles for B streams: the next power of two (at
    most 2x the work, one program per doubling), a multiple of `n_dev`."""
    if B < 1:
        raise ValueError(f"a batch has at least one row, got {B}")
    rows = 1 << (B - 1).bit_length()
    return -(-rows // n_dev) * n_dev


@functools.partial(jax.jit, static_argnums=(1,))
def _broadcast_rows(state, rows):
    """One State -> `rows` copies of it (fresh buffers, donatable)."""
    return jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a, (rows,) + a.shape), state)


@functools.partial(jax.jit, static_argnums=(1,))
def _pad_rows(states, rows):
    """[B, ...] States -> [rows, ...]: the extra rows copy row 0."""
    def pad(a):
        extra = jnp.broadcast_to(a[:1], (rows - a.shape[0],) + a.shape[1:])
        return jnp.concatenate([a, extra])
    return jax.tree_util.tree_map(pad, states)


@functools.partial(jax.jit, static_argnums=(1,))
def _first_rows(states, B):
    return jax.tree_util.tree_map(lambda a: a[:B], states)


def _consume(states):
    """What donation does to the input States, for a padded (hence copied) batch:
    free their buffers now, so a campaign's memory stays one batch."""
    seen = set()
    for a in jax.tree_util.tree_leaves(states):
        if isinstance(a, jax.Array) and id(a) not in seen and not a.is_deleted():
            seen.add(id(a))
            a.delete()


def stack_states(states) -> State:
    """Stack a list of single States into one batched State."""
    return jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *states)


def unstack_state(states: State, i: int) -> State:
    return jax.tree_util.tree_map(lambda a: a[i], states)


def _words_array(words) -> tuple[np.ndarray, np.ndarray]:
    """[B, L] uint32 words and int32 lengths from an array or a list of streams."""
    if isinstance(words, np.ndarray) or hasattr(words, "shape"):
        arr = np.asarray(words)
        if arr.ndim != 2:
            raise ValueError(f"words must be [batch, length], got shape {arr.shape}")
        if arr.dtype.kind not in "iu":
            raise TypeError(f"words must be integers, got dtype {arr.dtype}")
        if arr.size and (arr.min() < 0 or arr.max() > 0xFFFFFFFF):
            raise ValueError("words must be 32-bit values (0..0xffffffff)")
        return arr.astype(np.uint32), np.full(arr.shape[0], arr.shape[1], np.int32)
    streams = [np.asarray(list(s), dtype=np.int64) for s in words]
    L = max((len(s) for s in streams), default=0)
    out = np.zeros((len(streams), L), np.uint32)
    for i, s in enumerate(streams):
        if s.size and (s.min() < 0 or s.max() > 0xFFFFFFFF):
            raise ValueError(f"stream {i} holds a value that is not a 32-bit word")
        out[i, : len(s)] = s
    return out, np.array([len(s) for s in streams], np.int32)


def _shard(x, n_dev):
    if n_dev <= 1:
        return x
    mesh = jax.sharding.Mesh(np.array(jax.local_devices()), ("batch",))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("batch"))
    return jax.device_put(x, sharding)


@x64
def run(states: State, words, pe: int = 0, *, lengths=None, on_fault: str = "abandon",
        cfg: MachineConfig | None = None, donate: bool = False, core: bool = False,
        max_commits: int | None = None, uniform: bool = False) -> BatchResult:
    """Run one word stream per State, all at once (vmapped `pj.run`; with
    core=True vmapped `pj.run_core`, every completion a collective of the
    Core's four PEs).

    states: a batched State (leading axis B), or one State to start every
    stream from. words: [B, L] ints, or a list of B streams of any lengths.
    lengths: optional per-stream lengths for a padded [B, L] array.
    donate=True lets XLA update the input states in place (they become
    unusable), which is what long campaigns want. The batch runs as
    `batch_rows(B)` rows (the next power of two; the extra rows are
    length-0 streams on copies of State 0, then dropped), so batch sizes
    of one power-of-two bucket share one compiled program; the result has
    exactly B rows. A batch that needs padding is copied first and the
    copy donated; with donate=True the given States are freed all the same.
    max_commits: a bound on the bundles any stream completes, for callers
    that run many batches of different streams through one compiled
    program (it is part of the program's key); default, and at least: the
    words' own bound, as a power of two. uniform=True promises that every
    block names tiles of about cfg.tile_words (a tiled product's do): the
    blocks then run at that one size, as under pj.run, instead of at the
    least of several lane classes (ops.lowering.lane_classes), so the
    program traces and compiles in about a quarter of the time; smaller
    tiles cost their full width. Results never depend on it.
    """
    pe, hold, cfg = check_run(states, pe, on_fault, cfg, core, "pj.batch.run")
    w, n = _words_array(words)
    if lengths is not None:
        n = np.asarray(lengths, np.int32)
        if n.shape != (w.shape[0],) or (n < 0).any() or (n > w.shape[1]).any():
            raise ValueError(f"lengths must be {w.shape[0]} ints in 0..{w.shape[1]}")
    B = w.shape[0]
    if B == 0:
        raise ValueError("pj.batch.run needs at least one word stream")
    single = states.gm.ndim == 1
    if not single and states.gm.shape[0] != B:
        raise ValueError(f"{states.gm.shape[0]} states but {B} word streams")
    Lb = bucket(w.shape[1])
    K = bucket(int(np.max(commit_capable(w, np.asarray(states.block.active)), initial=1)), low=1)
    if max_commits is not None:
        if isinstance(max_commits, bool) or not isinstance(max_commits, (int, np.integer)) or max_commits < K:
            raise ValueError(f"max_commits must be an int of at least {K} (these streams can complete "
                             f"that many bundles), got {max_commits!r}")
        K = int(max_commits)
    effects = possible_effects(w, open_block_ops(states))
    n_dev = jax.local_device_count()
    rows = batch_rows(B, n_dev)
    # rows past B: length-0 streams (no-ops) on copies of a real State
    padded = np.zeros((rows, Lb), np.uint32)
    padded[:B, : w.shape[1]] = w
    n = np.concatenate([n, np.zeros(rows - B, np.int32)])
    if single:
        states = _broadcast_rows(states, rows)
    elif rows != B:
        given, states = states, _pad_rows(states, rows)
        if donate:      # the copy is donated; the caller's States are consumed all the same
            jax.block_until_ready(states)
            _consume(given)
            del given
    args = [_shard(x, n_dev) for x in (states, jnp.asarray(padded), jnp.asarray(n))]
    del states
    fn = _run_donated if donate else _run_kept
    st, executed = fn(*args, jnp.int32(pe), jnp.bool_(hold), jnp.int64(cfg.cas_seed & 0xFFFFFFFF),
                      cfg=cfg.replace(cas_seed=0), max_commits=K, effects=effects,
                      core=bool(core), uniform=bool(uniform))
    fault, address, executed = np.asarray(st.fault), np.asarray(st.fault_address), np.asarray(executed)
    if rows != B:
        st = _first_rows(st, B)
    return BatchResult(st, fault[:B], address[:B], executed[:B])
