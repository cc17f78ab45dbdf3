"""Block completion: route the open block to its operation family.

The zero-mask no-op and the CUBE-transport selection (S C.5: a B.DATR
Layout 21..26 selects the CUBE path whatever the BSTART) come first and live
in transport.complete; Shared TLSU blocks, MGATHER.CAS and matrix-family
blocks that pass them go to their own modules. Each family's effects are
gated by its own enable, so composing them in sequence applies exactly one.

The operation modules see one PE's view: `state.tiles` is that PE's Local
register file (projected here from the Core's [4, ...] files and written
back after), while GPRs, GM and the Shared registers are the Core's.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .. import tables
from ..state import pe_tiles, with_pe_tiles
from . import matrix, mgather_cas, shared_tlsu, transport

OP = tables.OP_ID


def is_shared_tlsu(blk):
    """A TLOAD/TSTORE/TSTORE.SPART block on the Shared path (shared-decisions 3):
    one with a B.IOS, and TSTORE.SPART always; CUBE codes stay on the CUBE path."""
    code = blk.datr[0]
    cube = blk.datr_present & (code >= 21) & (code <= 26)
    tlsu = (blk.op == OP["TLOAD"]) | (blk.op == OP["TSTORE"]) | (blk.op == OP["TSTORE.SPART"])
    return tlsu & ~cube & ((blk.ios_count > 0) | (blk.op == OP["TSTORE.SPART"]))


def complete(state, blk, pe, cfg, enable, effects, cas_seed=0):
    """Complete `blk` as PE `pe`: (fault, fault address, new Core state)."""
    view = state.replace(tiles=pe_tiles(state.tiles, pe))
    code = blk.datr[0]
    cube = blk.datr_present & (code >= 21) & (code <= 26)
    zero_mask = blk.zero_seen & (blk.iot_count == 0) & (blk.ios_count == 0)
    routed = ~cube & ~zero_mask
    cas = (blk.op == OP["MGATHER.CAS"]) & routed
    mat = (blk.op >= matrix.FIRST) & (blk.op <= matrix.LAST) & routed
    shr = is_shared_tlsu(blk) & routed
    fault, addr, view = transport.complete(view, blk, pe, cfg, enable & ~cas & ~mat & ~shr, effects)
    if "SHARED" in effects:
        f, a, view = shared_tlsu.complete(view, blk, cfg, enable & shr)
        fault, addr = jnp.where(shr, f, fault), jnp.where(shr, a, addr)
    if "MGATHER.CAS" in effects:
        f, a, view = mgather_cas.complete(view, blk, pe, cfg, enable & cas, cas_seed)
        fault, addr = jnp.where(cas, f, fault), jnp.where(cas, a, addr)
    if "MATMUL" in effects:
        f, a, view = matrix.complete(view, blk, pe, cfg, enable & mat)
        fault, addr = jnp.where(mat, f, fault), jnp.where(mat, a, addr)
    return fault, addr, view.replace(tiles=with_pe_tiles(state.tiles, pe, view.tiles))


def block_mask(blk):
    """The block's common PE mask (0 when no binding was recorded)."""
    return jnp.where(blk.iot_count > 0, blk.iot[0, 3], jnp.where(blk.ios_count > 0, blk.ios[0, 2], 0))


def complete_core(state, blk, cfg, enable, effects, cas_seed=0):
    """Complete `blk` as a collective of the Core's PEs (shared-decisions 2).

    Each participating PE (the mask's bits, PE0 alone for a 0000 mask; a
    Shared TLSU block once, as the lowest PE of its mask) completes on the
    state its predecessors left, in PE order. The first faulting PE's fault
    is the collective's, and then no PE's effects are kept.
    """
    mask = block_mask(blk)
    in_mask = lambda pe: ((mask >> (3 - pe)) & 1) == 1
    lowest = jnp.where(mask == 0, 0, jax.lax.clz(jnp.maximum(mask, 1).astype(jnp.int32)) - 28)
    once = is_shared_tlsu(blk) | (mask == 0)

    def one(carry, pe):
        s, fault, addr = carry
        takes_part = jnp.where(once, pe == lowest, in_mask(pe))
        go = takes_part & (fault == 0)
        f, a, s2 = complete(s, blk, pe, cfg, enable & go, effects, cas_seed)
        f = jnp.where(go, f, 0)
        return (s2, jnp.where(fault == 0, f, fault), jnp.where(fault == 0, a, addr)), None

    (new, fault, addr), _ = jax.lax.scan(
        one, (state, jnp.int32(0), jnp.uint64(0)), jnp.arange(tables.NUM_PES, dtype=jnp.int32))
    new = jax.tree_util.tree_map(lambda n, o: jnp.where(fault == 0, n, o), new, state)
    return fault, addr, new
