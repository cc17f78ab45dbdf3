"""Word-stream execution: decode, header commands, completion (`pj.run`).

One step executes one word on one State; `lax.scan` runs a stream; the batch
path is this same function under `jax.vmap` (ptojax.batch). Every check is a
boolean and every effect a masked write, so a stream never raises: a fault is
data in `state.fault` / `state.fault_address` (docs/execution-model.md).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import cast

import jax
import jax.numpy as jnp
import numpy as np
from numpy.typing import ArrayLike, NDArray

from . import families, tables
from ._x64 import x64
from .executables import PersistentJit
from .indexing import row
from .isa.decode_array import decode
from .isa.forms import ENCODINGS
from .ops import dispatch, header
from .ops.common import F, U64
from .ops.lowering import once_per_batch, settle, trip_count
from .result import RunResult
from .block_domain import check_block
from .ops.commands import apply_header, empty_block_words, header_step
from .state import MachineConfig, State, check_pool, config_of
from .storage import LocalFile, pack_block, pack_tiles, unpack_block, unpack_tiles

ON_FAULT = ("abandon", "hold")

# phase 1's loop carry: (the packed open block, the header fault's word index,
# the header fault, commits recorded, the recorded blocks, their word indices)
_Phase1 = tuple[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array, jax.Array]
# phase 2's: (the state, the fault's word index, the fault, its address, the faulting block)
_Phase2 = tuple[State, jax.Array, jax.Array, jax.Array, jax.Array]


def _scan_headers(max_commits: int, block: jax.Array, pc: jax.Array, words: jax.Array, length: jax.Array,
                  gpr_row: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array]:
    """Phase 1: the words through decode and the block header, from the open
    block (packed) at `pc`, stopping at the first header fault. Returns (the
    open block after the scan, which is the block before the faulting word
    when there is one, the header fault's word index (L: none), the header
    fault, the recorded commits and their word indices)."""
    L = words.shape[0]

    # the named scopes label the compiled program's instructions by phase (profiles, HLO dumps)
    @jax.named_scope("phase1")
    def phase1(i: jax.Array, carry: _Phase1) -> _Phase1:
        blk, stop_at, hfault, n, commits, pos = carry
        w = words[i]
        with jax.named_scope("decode"):
            d = decode(w)
        go = (i < length) & (stop_at == L)
        with jax.named_scope("header"):
            fault, completes, update = header_step(blk, w, d, gpr_row, pc + U64(4) * i.astype(U64))
        faulted = go & (fault != 0)
        rec = go & ~faulted & completes & (n < max_commits)
        go, fault, faulted, rec = settle((go, fault, faulted, rec))
        # the block goes into its commit slot (n; past the last slot when
        # nothing is recorded, where the write is dropped)
        at = jnp.where(rec, n, max_commits)
        commits = commits.at[at].set(blk, mode="drop")
        pos = pos.at[at].set(i, mode="drop")
        return (apply_header(blk, update, go & ~faulted),
                jnp.where(faulted, i, stop_at), jnp.where(faulted, fault, hfault),
                n + rec.astype(jnp.int32), commits, pos)

    # as many steps as the batch's longest stream (trip_count), not L: a
    # program compiled for long streams costs a batch of short ones nothing
    blk, stop_at, hfault, _, commits, pos = jax.lax.fori_loop(
        0, trip_count(jnp.asarray(length, jnp.int32)), phase1, _scan_start(max_commits, block, L))
    return blk, stop_at, hfault, commits, pos


def _scan_start(max_commits: int, block: jax.Array, L: int) -> _Phase1:
    """Phase 1's carry before the first word: what a scan of no words returns."""
    empty = empty_block_words()
    return (block, jnp.int32(L), jnp.int32(0), jnp.int32(0),
            jnp.broadcast_to(empty, (max_commits, empty.size)), jnp.full((max_commits,), L, jnp.int32))


def _commit_blocks(st: State, commits: jax.Array, pos: jax.Array, L: int, pe: jax.Array,
                   cfg: MachineConfig, effects: frozenset[str], cas_seed: jax.Array | int,
                   core: bool, uniform: bool = False) -> _Phase2:
    """Phase 2: the recorded blocks committed in order, stopping at the first
    completion fault. Returns (the state, the fault's word index (L: none), the
    fault, its address, the faulting block)."""
    @jax.named_scope("phase2")
    def phase2(carry: _Phase2, xs: tuple[jax.Array, jax.Array]) -> tuple[_Phase2, None]:
        s, cstop, cfault, caddr, cblk = carry
        packed, p = xs
        go = (p < L) & (cstop == L)
        with jax.named_scope("block"):
            # once for a batch whose committing rows commit the same block (phase 1's case)
            h = once_per_batch(lambda b: header.decode(unpack_block(b)), settle(packed), active=go)
        dr_bad = h.catr_dr & ~header.is_tlsu_op(h)      # B.CATR DR=1 only in a TLSU block
        if core:
            f, addr, s2 = dispatch.complete_core(s, h, cfg, go & ~dr_bad, effects, cas_seed,
                                                     uniform)
        else:
            f, addr, s2 = dispatch.complete(s, h, pe, cfg, go & ~dr_bad, effects, cas_seed, uniform)
        f = jnp.where(dr_bad, F["Fault_BundleControl"], f)
        f = jnp.where((f == 0) & h.catr_trap, F["Fault_BundlePostCommit"], f)
        faulted = go & (f != 0)
        f, addr, faulted = settle((f, addr, faulted))
        return (s2, jnp.where(faulted, p, cstop), jnp.where(faulted, f, cfault),
                jnp.where(faulted, addr, caddr), jnp.where(faulted, packed, cblk)), None

    # the loop runs as many times as the batch's longest list of recorded commits
    # (trip_count), not max_commits: a bound sized for the worst stream costs a
    # batch of short ones nothing
    n = trip_count(jnp.sum(pos < L).astype(jnp.int32))

    def body(i: jax.Array, carry: _Phase2) -> _Phase2:
        return phase2(carry, (commits[i], pos[i]))[0]

    return cast(_Phase2, jax.lax.fori_loop(0, n, body, (st, jnp.int32(L), jnp.int32(0), U64(0),
                                                          jnp.asarray(empty_block_words()))))


def stream(st: State, words: jax.Array, length: jax.Array, pe: jax.Array, hold: jax.Array,
           cfg: MachineConfig, max_commits: int, effects: frozenset[str] | None = None,
           cas_seed: jax.Array | int = 0, core: bool = False,
           uniform: bool = False) -> tuple[State, jax.Array]:
    """Run words[:length] on one State (traceable: `run_stream` jits it, the
    batch path vmaps it inside its own jit).

    Phase 1 scans the words through decode and the block header, stopping at
    the first header fault and recording the block each completing word
    commits (at most `max_commits`). Phase 2 commits those blocks in order and
    stops at the first completion fault. With `core` (static) every
    completion is a collective of the Core's PEs (dispatch.complete_core) and
    the header reads PE `pe`'s GPRs (0 for pj.run_core). With `uniform`
    (static) every block runs at the machine's tile_words, as under pj.run,
    even under pj.batch.run (dispatch.complete). `pe` (current PE), `hold`
    (on_fault="hold") and `cas_seed` are traced, so they never cause a
    recompile (callers pass cfg with cas_seed=0 and the seed here).
    Returns (state, executed).
    """
    L = words.shape[0]
    effects = ALL_EFFECTS if effects is None else effects
    W = st.tiles.words.shape[-1]
    tiles = st.tiles
    # a collective's blocks run as every PE; one PE's blocks touch its descriptors only
    st = st.replace(fault=jnp.int32(0), fault_address=U64(0),
                    tiles=pack_tiles(tiles, None if core else pe))
    gpr_row = row(st.gpr, pe)
    # blocks travel packed (one int32 vector): selecting or storing one costs one op
    packed, length = pack_block(st.block), jnp.asarray(length, jnp.int32)
    # a batch that runs one stream from one block (a bundle repeated, a golden
    # GEMM's chunk) scans it once (a sixth of a batched TLOAD's kernel time);
    # rows without words (a batch's padding) do not count, and scan nothing
    scan = once_per_batch(functools.partial(_scan_headers, max_commits), packed, st.pc, words,
                          length, gpr_row, active=length > 0)
    blk0, stop0, hfault0, _, commits0, pos0 = _scan_start(max_commits, packed, L)
    blk, stop_at, hfault, commits, pos = jax.tree_util.tree_map(
        lambda a, b: jnp.where(length > 0, a, b), scan, (blk0, stop0, hfault0, commits0, pos0))
    st, cstop, cfault, caddr, cblk = _commit_blocks(st, commits, pos, L, pe, cfg, effects, cas_seed,
                                                    core, uniform)

    # the first fault in word order stops the stream (commit faults precede
    # the header fault: only commits before it were recorded)
    commit_first = cstop < L
    fault = jnp.where(commit_first, cfault, hfault)
    at = jnp.where(commit_first, cstop, stop_at)
    faulted = at < L
    post_commit = fault == F["Fault_BundlePostCommit"]
    # on a header fault the scan's block is the block before the faulting word
    empty = empty_block_words()
    kept = jnp.where(hold, jnp.where(commit_first, cblk, blk), empty)
    final_block = unpack_block(settle(jnp.where(faulted & ~post_commit, kept,
                                                jnp.where(faulted, empty, blk))))
    memory_fault = (fault == F["Fault_DataAlignment"]) | (fault == F["Fault_DataPage"])
    executed = jnp.where(faulted, at, length)
    pc = st.pc + U64(4) * executed.astype(U64)
    # (the stream holds the tiles packed: a storage.LocalFile)
    st = st.replace(tiles=unpack_tiles(cast(LocalFile, st.tiles), W, tiles, pe), block=final_block, pc=pc,
                    fault=jnp.where(faulted, fault, 0),
                    fault_address=jnp.where(faulted, jnp.where(memory_fault, caddr, pc), U64(0)))
    return st, executed


STREAM_STATIC = ("cfg", "max_commits", "effects", "core", "uniform")
# pj.run's calls are one State each: their cost is the compile plus one pass
# over the State. XLA:CPU's older LLVM emitters compile this program about
# twice as fast as its fusion emitters, whose code runs faster (pj.batch.run
# compiles its own vmapped program, `stream` inside its jit, with the
# defaults). Without LLVM's optimizations the compile takes 0.4-0.5 s less
# and a pass over the State 2-5x longer: the better trade while the State is
# small (tiny: 1 ms more per call; the model's 80 MB State: 0.3 s more).
LATENCY_COMPILER_OPTIONS = {"xla_cpu_use_fusion_emitters": False}
QUICK_COMPILER_OPTIONS = dict(LATENCY_COMPILER_OPTIONS, xla_backend_optimization_level=0)
QUICK_STATE_BYTES = 1 << 20
run_stream = PersistentJit(stream, static_argnames=STREAM_STATIC,
                            compiler_options=LATENCY_COMPILER_OPTIONS)
run_stream_quick = PersistentJit(stream, static_argnames=STREAM_STATIC,
                                  compiler_options=QUICK_COMPILER_OPTIONS)


def stream_runner(cfg: MachineConfig) -> PersistentJit:
    """The jitted `stream` a one-State call uses on `cfg`: `run_stream_quick`
    for a State of at most QUICK_STATE_BYTES, else `run_stream`."""
    return run_stream_quick if cfg.state_bytes <= QUICK_STATE_BYTES else run_stream


# effect group -> the operations whose completion it traces: the default
# family's two (TSTORE.SPART reads GM like a TSTORE), then each routed family's
# (ptojax/families.py); SHARED is also a B.IOS in the words (possible_effects)
_EFFECT_OPS = {"TLOAD": ("TLOAD",), "TSTORE": ("TSTORE", "TSTORE.SPART"),
               # (a routed family always names its effect group)
               **{cast(str, f.effect): f.ops for f in families.ROUTED if f.effect != "SHARED"}}


# the catalog's BSTART encodings: each one's operation, mask and match
_BSTARTS = [e for e in ENCODINGS if e.form.mnemonic.startswith("BSTART.")]
_START_OPS = [e.variant or e.form.mnemonic[len("BSTART."):] for e in _BSTARTS]
_START_MASKS = np.array([e.mask for e in _BSTARTS], np.uint32)
_START_MATCHES = np.array([e.match for e in _BSTARTS], np.uint32)
# Shared TLOAD/TSTORE/TSTORE.SPART: a B.IOS word with a TLOAD/TSTORE start, a
# TSTORE.SPART start, or an open TLSU block (it may hold a B.IOS binding already)
_IOS = tuple((e.mask, e.match) for e in ENCODINGS if e.form.mnemonic == "B.IOS")
_SHARED_OPEN = ("TLOAD", "TSTORE", "TSTORE.SPART")
ALL_EFFECTS = frozenset(_EFFECT_OPS) | {"SHARED"}


def _matches(words: NDArray[np.uint32], encodings: Iterable[tuple[int, int]]) -> bool:
    return any(np.any((words & np.uint32(mask)) == np.uint32(match)) for mask, match in encodings)


def _started(words: NDArray[np.uint32]) -> set[str]:
    """The operations with a BSTART among `words`: every BSTART encoding is
    tried in one pass against each distinct word whose low 7 bits are 1
    (those bits of every BSTART encoding)."""
    starts = np.unique(words[(words & np.uint32(0x7F)) == 1])
    hit = ((starts[:, None] & _START_MASKS) == _START_MATCHES).any(axis=0)
    return {op for op, h in zip(_START_OPS, hit) if h}


def possible_effects(words: ArrayLike, open_ops: ArrayLike = ()) -> frozenset[str]:
    """Effect groups a run can have: a BSTART of them in the words, or a block
    of them already open in the starting State(s)."""
    w = np.asarray(words).astype(np.uint32).ravel()
    ops = np.asarray(open_ops).ravel()
    opened = {tables.OPS[i][0] for i in np.unique(ops[ops >= 0]).tolist()}
    started = _started(w)
    out = {e for e, names in _EFFECT_OPS.items() if (started | opened) & set(names)}
    if ((started & {"TLOAD", "TSTORE"} and _matches(w, _IOS)) or "TSTORE.SPART" in started
            or opened & set(_SHARED_OPEN)):
        out.add("SHARED")
    return frozenset(out)


def open_block_ops(state: State) -> NDArray[np.int32]:
    """Operation ids of the blocks open in a State or batch (-1 where none)."""
    return np.where(np.asarray(state.block.active), np.asarray(state.block.op), -1)


def commit_capable(words: ArrayLike,
                   initially_open: ArrayLike = False) -> NDArray[np.int64] | np.int64 | int:
    """Per stream (last axis), an upper bound on the completions it can make.

    A BSTOP or a BSTART completes a block only when one is open: after a
    BSTART with no BSTOP since, or from the start when the State has one open.
    Faults can only end a stream earlier, so this bounds phase 2's length.
    Counted without a scan: every event but the first completes when the one
    before it was a BSTART, so a stream's count is its BSTARTs, less one when
    its last event is a BSTART, plus one when it starts open and has an event.
    """
    w = np.atleast_2d(np.asarray(words).astype(np.uint32))
    if w.shape[1] == 0:
        return np.zeros(w.shape[0], np.int64) if np.ndim(words) > 1 else 0
    bstop = w == 1
    bstart = ((w & 0x7F) == 1) & ~bstop
    event = bstart | bstop
    any_event = event.any(axis=1)
    last = w.shape[1] - 1 - np.argmax(event[:, ::-1], axis=1)
    last_is_start = any_event & bstart[np.arange(w.shape[0]), last]
    init = np.broadcast_to(np.asarray(initially_open, bool).reshape(-1), any_event.shape)
    count: NDArray[np.int64] = bstart.sum(axis=1) - last_is_start + (init & any_event)
    return count if np.ndim(words) > 1 else count[0]


def bucket(n: int, low: int = 8) -> int:
    """Sizes are padded to a power of two (>= low) to bound recompiles."""
    b = low
    while b < n:
        b *= 2
    return b


def as_words(words: Iterable[int]) -> NDArray[np.uint32]:
    """Validate instruction words -> uint32 array (TypeError/ValueError otherwise)."""
    if isinstance(words, (str, bytes)):
        raise TypeError("words must be a sequence of 32-bit ints (use pj.asm.assemble for text)")
    arr = np.asarray(list(words) if not isinstance(words, np.ndarray) else words, dtype=object)
    if arr.ndim != 1:
        raise ValueError(f"words must be a flat sequence, got shape {arr.shape}")
    out = np.zeros(arr.shape, np.uint32)
    for i, w in enumerate(arr):
        if isinstance(w, bool) or not isinstance(w, (int, np.integer)):
            raise TypeError(f"word {i} is {type(w).__name__}; expected an int")
        if not 0 <= int(w) < 1 << 32:
            raise ValueError(f"word {i} = {int(w)} is not a 32-bit value (0..0xffffffff)")
        out[i] = int(w)
    return out


def check_on_fault(on_fault: str) -> bool:
    if on_fault not in ON_FAULT:
        raise ValueError(f"on_fault must be one of {ON_FAULT}, got {on_fault!r}")
    return on_fault == "hold"


def check_config(state: State, cfg: MachineConfig | None) -> MachineConfig:
    """The config to run with: the State's own sizes and rules (State.rules), or
    `cfg` when one is given: its sizes must match the State's, and its
    semantics and profile then hold for this call."""
    sizes = config_of(state)
    if cfg is None:
        return sizes
    if not isinstance(cfg, MachineConfig):
        raise TypeError(f"cfg must be a MachineConfig, got {type(cfg).__name__}")
    for f in ("gm_bytes", "tile_words", "hand_slots", "shared_slots", "shared_words"):
        if getattr(cfg, f) != getattr(sizes, f):
            raise ValueError(f"cfg.{f}={getattr(cfg, f)} does not match the State "
                             f"({getattr(sizes, f)}); build the State with pj.reset(cfg)")
    return cfg


def check_pe(pe: object) -> int:
    if isinstance(pe, bool) or not isinstance(pe, (int, np.integer)) or not 0 <= pe < tables.NUM_PES:
        raise ValueError(f"pe must be an int in 0..{tables.NUM_PES - 1}, got {pe!r}")
    return int(pe)


@x64
def run(state: State, words: Iterable[int], pe: int = 0, *, on_fault: str = "abandon",
        cfg: MachineConfig | None = None) -> RunResult:
    """Execute a stream of instruction words on one State as PE `pe`
    (docs/architecture.md, "Public API")."""
    return _run(state, words, pe, on_fault, cfg, core=False)


@x64
def run_core(state: State, words: Iterable[int], *, on_fault: str = "abandon",
             cfg: MachineConfig | None = None) -> RunResult:
    """Execute a stream on all four PEs of the Core together: each completion is one
    collective (docs/shared-decisions.md section 2); same result type as `run`."""
    return _run(state, words, 0, on_fault, cfg, core=True)


def check_run(state: State, pe: int, on_fault: str, cfg: MachineConfig | None, core: bool,
              what: str) -> tuple[int, bool, MachineConfig]:
    """The arguments pj.run, pj.run_core and pj.batch.run share, checked (the
    State or batch `state`, its block and pool; pe, on_fault, cfg): (pe,
    hold, the config to run with)."""
    if not isinstance(state, State):
        raise TypeError(f"{what} expects a ptojax State, got {type(state).__name__}")
    pe = check_pe(pe)
    if core and pe != 0:
        raise ValueError("core=True runs every PE; leave pe at 0")
    hold = check_on_fault(on_fault)
    cfg = check_config(state, cfg)      # sizes come from the trailing axes
    check_block(state.block)
    check_pool(state)
    return pe, hold, cfg


def _run(state: State, words: Iterable[int], pe: int, on_fault: str, cfg: MachineConfig | None,
         core: bool) -> RunResult:
    pe, hold, cfg = check_run(state, pe, on_fault, cfg, core, "run")
    if state.gm.ndim != 1:
        raise ValueError("pj.run takes one State; use pj.batch.run for a batch")
    w = as_words(words)
    # the families the words can reach, and generous bounds: a first call
    # compiles only what it uses (a few seconds), and few variants in all
    padded = np.zeros(bucket(len(w), low=16), np.uint32)
    padded[: len(w)] = w
    st, executed = stream_runner(cfg)(
        state, jnp.asarray(padded), jnp.int32(len(w)), jnp.int32(pe), jnp.bool_(hold),
        cfg.replace(cas_seed=0), bucket(int(commit_capable(w, bool(state.block.active))), low=4),
        possible_effects(w, open_block_ops(state)), jnp.int64(cfg.cas_seed & 0xFFFFFFFF), core)
    return RunResult.from_state(st, int(executed))
