"""Block completion: route the open block to its operation family.

The families are the records of ptojax/families.py, each module's `FAMILY`
(ops/family.py). The zero-mask no-op and the CUBE-transport selection (S C.5:
a B.DATR Layout 21..26 selects the CUBE path whatever the BSTART) come first
and live in the default family, transport; a block they pass goes to the
routed family whose `selects` takes it. Each family's effects are gated by
its own enable, so composing them in sequence applies exactly one.

The operation modules see one PE's view: `state.tiles` is that PE's Local
register file (a storage.PeFile: its descriptors projected here and written
back after, its payload rows read and written in the Core's arrays), while
GPRs, GM and the Shared registers are the Core's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import jax
import jax.numpy as jnp

from .. import families, tables
from ..state import TILE_COLUMN as COL, MachineConfig, State
from ..storage import LocalFile, PeFile, local_desc, pe_file, with_pe_file
from . import header, matrix, mgather_cas, shared_transport, tmov, transport
from .common import CUBE_TILE_LAYOUT, DT_BITS, aux_slots, div, size_code_bytes, slot_of, take
from .family import Completion, Context, Family
from .lowering import branch, lane_classes, trip_count, under_batch
from .shared_transport import RowWrite, apply_row_write, merge_row_writes
from .header import Header

# the default family, then the routed ones in ptojax/families.py's order
DEFAULT = transport.FAMILY
ROUTED = (shared_transport.FAMILY, mgather_cas.FAMILY, matrix.FAMILY, tmov.FAMILY)
assert (DEFAULT.spec, *(f.spec for f in ROUTED)) == families.FAMILIES
# the effect groups whose operations can write a Local register file (a
# TSTORE, Local or Shared, and a Shared TLOAD only read it; TMOV writes one
# for Functions 2, 11 and 12)
LOCAL_WRITERS = frozenset({"TLOAD", "MGATHER.CAS", "MATMUL", "TMOV"})
# the families whose blocks can name a tile past tile_words (the model's packed
# tiles: state.max_tile_words): an ordinary TLOAD/TSTORE and TMOV. The others
# bound every tile they read or write by tile_words (a matrix Bias or scale
# tile, MGATHER.CAS's tiles, the Shared registers), so they run at most there.
PACKED_EFFECTS = frozenset({"TLOAD", "TSTORE", "TMOV"})
WITHIN_TILE_WORDS = (shared_transport.FAMILY, mgather_cas.FAMILY, matrix.FAMILY)
# a completion's (fault, fault address, new Core state)
_Outcome = tuple[jax.Array, jax.Array, State]
# a routed family's `selects` (Family.selects: only the default family has none)
_Selects = Callable[[Header], jax.Array]


def _tile_words(capacity: jax.Array, bits: jax.Array, W: jax.Array | int) -> jax.Array:
    """The Words a tile of `capacity` bytes of `bits`-bit elements can have (at
    most W); W for an unknown width, which no legal block has."""
    return jnp.where(bits > 0, jnp.minimum(div(capacity * 8, bits), W), W)


def lanes_needed(desc: jax.Array, h: Header, cfg: MachineConfig) -> jax.Array:
    """The most Words of any tile the block with header `h` names on a PE with
    descriptors `desc`: its destinations, at the narrowest element type the
    header gives (a matrix accumulator is no narrower than its inputs), and its
    allocated sources; a CUBE tile has at most tile_words, a non-CUBE one up to
    max_tile_words (the model's packed tiles). A legal block touches no lane
    past that; an illegal one touches none, so its fault is the same at any
    lane count."""
    W, top = cfg.tile_words, cfg.max_tile_words
    edt = jnp.where(h.datr_present & (h.datr_dtype != tables.DTYPE_NONE), h.datr_dtype, h.dtype)
    bits = jnp.minimum(take(DT_BITS, h.dtype), take(DT_BITS, edt))
    bits = jnp.where(take(DT_BITS, edt) == 0, take(DT_BITS, h.dtype), bits)
    tsize = size_code_bytes(h.size_code)
    dst = jnp.where(h.bound & h.has_dst, _tile_words(tsize, bits, jnp.where(h.cube, W, top)), 0)
    slot, exists = slot_of(h.sources, cfg.hand_slots)
    d = desc[slot]
    cube = jnp.isin(d[:, COL["layout"]], jnp.asarray(CUBE_TILE_LAYOUT))
    src = jnp.where(h.source_ok & exists & (d[:, COL["allocated"]] != 0),
                    _tile_words(d[:, COL["capacity"]], take(DT_BITS, d[:, COL["dtype"]]),
                                jnp.where(cube, W, top)), 0)
    need = jnp.maximum(jnp.max(dst), jnp.max(src))
    routed = ~h.cube & ~h.zero_mask
    within = jnp.any(jnp.stack([cast(_Selects, f.selects)(h) & routed for f in WITHIN_TILE_WORDS]))
    return jnp.where(within, jnp.minimum(need, W), need)


def complete(state: State, h: Header, pe: jax.Array, cfg: MachineConfig, enable: jax.Array,
             effects: frozenset[str], cas_seed: jax.Array | int = 0, uniform: bool = False) -> _Outcome:
    """Complete the block with header `h` as PE `pe`: (fault, fault address, new Core state).

    Under pj.batch.run, at the least lane count of lane_classes that holds its
    tiles, the batch's largest (trip_count), so the branch is one for all of a
    batch's States. pj.run's one State runs every block at tile_words: a pass
    at the machine's size costs one State little (a 16x16 TLOAD call takes
    3-5 ms at asl, 1.3 on tiny), and its program, compiled for each new
    stream, stays one copy; where the model's packed tiles go past
    tile_words (asl: max_tile_words), a second class runs the blocks that
    name one.

    Each lane class is one lax.cond that applies its block's writes itself,
    at its own window (storage.PoolWrite, shared_transport.RowWrite): the
    families inside it read the Core's large arrays (the Local pools, the
    Shared Words) as operands only, since XLA copied them whole into and out
    of every conditional that passed them through, each block; and a switch's
    branches would each return a write as large as the largest class's.

    With `uniform` (the caller's static promise that the blocks' tiles are
    about the machine's size, as a tiled product's are) a batch runs as
    pj.run does: one class each copy of the completion is traced for, a
    quarter of the compile."""
    W = cfg.tile_words
    top = cfg.max_tile_words if effects & PACKED_EFFECTS else W
    classes = tuple(L for L in lane_classes(W) if L <= top) if under_batch() and not uniform \
        else tuple(sorted({W, top}))

    def at(lanes: int) -> Callable[[State], _Outcome]:
        def run(state: State) -> _Outcome:
            f, a, view, rw = _complete(state, h, pe, enable, cas_seed, cfg=cfg, effects=effects,
                                       lanes=lanes)
            # the Core's tiles are a storage.LocalFile while a stream runs, the view's a PeFile
            tiles = with_pe_file(cast(LocalFile, state.tiles), cast(PeFile, view.tiles)) \
                if effects & LOCAL_WRITERS else state.tiles
            shared = apply_row_write(view.shared, rw) if rw is not None else view.shared
            return jnp.asarray(f, jnp.int32), jnp.asarray(a, jnp.uint64), \
                view.replace(tiles=tiles, shared=shared)
        return run

    if len(classes) == 1:
        return at(classes[0])(state)
    need = lanes_needed(local_desc(cast(LocalFile, state.tiles), pe), h, cfg)
    k = trip_count(jnp.sum(need > jnp.asarray(classes[:-1])))
    out = (jnp.int32(0), jnp.uint64(0), state)
    for i, L in enumerate(classes):
        # one cond per class, its writes applied inside: a switch's branches
        # would all return a write the size of the largest class's window
        out = jax.lax.cond(k == i, branch(lambda o, run=at(L): run(o[2])), lambda o: o, out)
    return out


_Big = tuple[jax.Array, jax.Array, jax.Array, jax.Array]


def _split(state: State) -> tuple[State, _Big]:
    """(the State without its large arrays, those arrays): what a conditional
    may carry, and what its branches read from outside (_join)."""
    big = (state.tiles.words, state.tiles.defined, state.shared.words, state.shared.defined)
    light = state.replace(tiles=state.tiles.replace(words=None, defined=None),
                          shared=state.shared.replace(words=None, defined=None))
    return light, big


def _join(light: State, big: _Big) -> State:
    words, defined, shared_words, shared_defined = big
    return light.replace(tiles=light.tiles.replace(words=words, defined=defined),
                         shared=light.shared.replace(words=shared_words, defined=shared_defined))


def _complete(state: State, h: Header, pe: jax.Array, enable: jax.Array, cas_seed: jax.Array | int, *,
              cfg: MachineConfig, effects: frozenset[str],
              lanes: int) -> tuple[jax.Array, jax.Array, State, RowWrite | None]:
    """complete, over `lanes` lanes, writes held: (fault, fault address, the
    view (tiles: the PeFile with its PoolWrite), the RowWrite or None)."""
    s64 = state.tiles.words.dtype == jnp.uint64
    view = state.replace(tiles=pe_file(cast(LocalFile, state.tiles), pe, lanes,
                                       aux_slots(lanes, s64) if "MATMUL" in effects else 0))
    ctx = Context(effects, cas_seed)
    routed = ~h.cube & ~h.zero_mask
    chosen = [cast(_Selects, f.selects)(h) & routed for f in ROUTED]
    fault, addr, view, rw = _family(DEFAULT, enable & ~jnp.any(jnp.stack(chosen)), view, h, pe,
                                    cfg, ctx)
    # a family is traced only where the program's words can reach it, and for
    # pj.run's one State (whose class is its own block's) past tile_words only
    # where its blocks can name a tile that large; a batch's class is its
    # largest block's, which other blocks of every family share
    past = lanes > cfg.tile_words and not under_batch()
    for family, mine in zip(ROUTED, chosen):
        if family.effect not in effects or (past and family in WITHIN_TILE_WORDS):
            continue
        f, a, view, w = _family(family, enable & mine, view, h, pe, cfg, ctx)
        fault, addr = jnp.where(mine, f, fault), jnp.where(mine, a, addr)
        rw = merge_row_writes(rw, w)
    return fault, addr, view, rw


def _family(family: Family, enable: jax.Array, view: State, h: Header, pe: jax.Array, cfg: MachineConfig,
            ctx: Context) -> Completion:
    """family.complete, run only when `enable` holds for some State (under
    pj.batch.run: for some State of the batch, trip_count). Otherwise it would
    change nothing, and its fault is not read (a completion's fault counts only
    where it is enabled), so a block pays for the families the batch's blocks
    at this commit have, not for every family the stream may have (a
    campaign's filler row names them all); it then returns family.idle's write."""
    light, big = _split(view)
    idle = family.idle(view) if family.idle else None

    def run(light: State) -> tuple[jax.Array, jax.Array, State, RowWrite | None]:
        c = family.complete(_join(light, big), h, pe, cfg, enable, ctx)
        assert all(x is y for x, y in zip(_split(c.state)[1], big)), "a family wrote a large array"
        return jnp.asarray(c.fault, jnp.int32), jnp.asarray(c.address, jnp.uint64), \
            _split(c.state)[0], c.write

    skip = lambda light: (jnp.int32(0), jnp.uint64(0), light, idle)
    with jax.named_scope(family.name):      # the kernels' phase in profiles (benchmarks/profile.py)
        f, a, light, write = jax.lax.cond(trip_count(enable.astype(jnp.int32)) > 0, branch(run), skip,
                                          light)
    return Completion(f, a, _join(light, big), write)


def complete_core(state: State, h: Header, cfg: MachineConfig, enable: jax.Array, effects: frozenset[str],
                  cas_seed: jax.Array | int = 0, uniform: bool = False) -> _Outcome:
    """Complete the block with header `h` as a collective of the Core's PEs (shared-decisions 2).

    Each participating PE (the mask's bits, PE0 alone for a 0000 mask; a
    Shared TLSU block once, as the lowest PE of its mask) completes on the
    state its predecessors left, in PE order. The first faulting PE's fault
    is the collective's, and then no PE's effects are kept. `uniform`: as
    complete's, for every PE.
    """
    mask = header.block_mask(h)
    in_mask: Callable[[jax.Array], jax.Array] = lambda pe: ((mask >> (3 - pe)) & 1) == 1
    lowest = jnp.where(mask == 0, 0, jax.lax.clz(jnp.maximum(mask, 1).astype(jnp.int32)) - 28)
    once = shared_transport.selects(h) | header.shared_tlsu_block(h) | (mask == 0)

    def one(carry: tuple[State, jax.Array, jax.Array, jax.Array],
            pe: jax.Array) -> tuple[tuple[State, jax.Array, jax.Array, jax.Array], None]:
        s, fault, addr, wrote = carry
        takes_part = jnp.where(once, pe == lowest, in_mask(pe))
        go = takes_part & (fault == 0)
        f, a, s2 = complete(s, h, pe, cfg, enable & go, effects, cas_seed, uniform)
        f = jnp.where(go, f, 0)
        wrote = wrote | (go & enable & (f == 0))
        return (s2, jnp.where(fault == 0, f, fault), jnp.where(fault == 0, a, addr), wrote), None

    (new, fault, addr, wrote), _ = jax.lax.scan(
        one, (state, jnp.int32(0), jnp.uint64(0), jnp.bool_(False)),
        jnp.arange(tables.NUM_PES, dtype=jnp.int32))
    # a faulting PE's completion changes nothing, so only a fault after an earlier
    # PE's writes has something to undo; a batch with none skips the whole-State select
    undo = (fault != 0) & wrote
    new = jax.lax.cond(trip_count(undo.astype(jnp.int32)) > 0,
                       lambda: jax.tree_util.tree_map(lambda n, o: jnp.where(undo, o, n), new, state),
                       lambda: new)
    return fault, addr, new
