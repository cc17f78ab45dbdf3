"""`pj.batch.run`: the unbatched `run_stream` under vmap, nothing more.

Streams are padded to a common length (a power of two) and carry their own
lengths; the compiled function is cached per (config, PE, fault mode, padded
length, commit bound). With several local devices the batch axis is sharded
over all of them with `jax.sharding`.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from .. import tables
from .._x64 import x64
from ..machine import (_bucket, _check_pe, check_config, check_on_fault, commit_capable,
                       open_block_ops, possible_effects, run_stream)
from ..result import RunResult
from ..state import MachineConfig, State


@dataclass(frozen=True)
class BatchResult:
    """States after their streams (leading batch axis) and per-stream outcome."""
    state: State
    fault_code: np.ndarray      # int32[B], index into tables.FAULTS
    fault_address: np.ndarray   # uint64[B] (_FaultAddress: data address or PC)
    executed: np.ndarray        # int32[B]

    def __len__(self) -> int:
        return len(self.fault_code)

    @property
    def faults(self) -> list[str]:
        return [tables.FAULTS[c] for c in self.fault_code]

    def __getitem__(self, i: int) -> RunResult:
        """The i-th stream's result as a RunResult (one State)."""
        return RunResult.from_state(unstack_state(self.state, i), int(self.executed[i]))


def _batched(states, words, lengths, pe, hold, cas_seed, cfg, max_commits, effects, core):
    return jax.vmap(lambda s, w, n: run_stream(s, w, n, pe, hold, cfg, max_commits, effects,
                                               cas_seed, core))(states, words, lengths)


_STATIC = ("cfg", "max_commits", "effects", "core")
_run_kept = jax.jit(_batched, static_argnames=_STATIC)
_run_donated = jax.jit(_batched, static_argnames=_STATIC, donate_argnums=(0,))


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
        cfg: MachineConfig | None = None, donate: bool = False, core: bool = False) -> BatchResult:
    """Run one word stream per State, all at once (vmapped `pj.run`; with
    core=True vmapped `pj.run_core`, every completion a collective of the
    Core's four PEs).

    states: a batched State (leading axis B), or one State to start every
    stream from. words: [B, L] ints, or a list of B streams of any lengths.
    lengths: optional per-stream lengths for a padded [B, L] array.
    donate=True lets XLA update the input states in place (they become
    unusable), which is what long campaigns want.
    """
    if not isinstance(states, State):
        raise TypeError(f"states must be a ptojax State, got {type(states).__name__}")
    pe = _check_pe(pe)
    if core and pe != 0:
        raise ValueError("core=True runs every PE; leave pe at 0")
    hold = check_on_fault(on_fault)
    w, n = _words_array(words)
    if lengths is not None:
        n = np.asarray(lengths, np.int32)
        if n.shape != (w.shape[0],) or (n < 0).any() or (n > w.shape[1]).any():
            raise ValueError(f"lengths must be {w.shape[0]} ints in 0..{w.shape[1]}")
    B = w.shape[0]
    if B == 0:
        raise ValueError("pj.batch.run needs at least one word stream")
    if states.gm.ndim == 1:
        states = jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a, (B,) + a.shape), states)
    elif states.gm.shape[0] != B:
        raise ValueError(f"{states.gm.shape[0]} states but {B} word streams")
    cfg = check_config(states, cfg)      # sizes come from the trailing axes
    Lb = _bucket(w.shape[1])
    padded = np.zeros((B, Lb), np.uint32)
    padded[:, : w.shape[1]] = w
    K = _bucket(int(np.max(commit_capable(w, np.asarray(states.block.active)), initial=1)), low=1)
    n_dev = jax.local_device_count()
    pad_b = (-B) % n_dev
    if pad_b:
        states = jax.tree_util.tree_map(lambda a: jnp.concatenate([a, a[:pad_b]]), states)
        padded = np.concatenate([padded, padded[:pad_b]])
        n = np.concatenate([n, np.zeros(pad_b, np.int32)])
    args = [_shard(x, n_dev) for x in (states, jnp.asarray(padded), jnp.asarray(n))]
    fn = _run_donated if donate else _run_kept
    effects = possible_effects(w, open_block_ops(states))
    st, executed = fn(*args, jnp.int32(pe), jnp.bool_(hold), jnp.int64(cfg.cas_seed & 0xFFFFFFFF),
                      cfg=cfg.replace(cas_seed=0), max_commits=K, effects=effects,
                      core=bool(core))
    if pad_b:
        st = jax.tree_util.tree_map(lambda a: a[:B], st)
        executed = executed[:B]
    return BatchResult(st, np.asarray(st.fault), np.asarray(st.fault_address), np.asarray(executed))
