"""Block completion: route the open block to its operation family.

The zero-mask no-op and the CUBE-transport selection (S C.5: a B.DATR
Layout 21..26 selects the CUBE path whatever the BSTART) come first and live
in transport.complete; MGATHER.CAS and matrix-family blocks that pass them go
to their own modules. Each family's effects are gated by its own enable, so
composing them in sequence applies exactly one.
"""

from __future__ import annotations

import jax.numpy as jnp

from .. import tables
from . import matrix, mgather_cas, transport

OP = tables.OP_ID


def complete(state, blk, pe, cfg, enable, effects, cas_seed=0):
    code = blk.datr[0]
    cube = blk.datr_present & (code >= 21) & (code <= 26)
    zero_mask = blk.zero_seen & (blk.iot_count == 0) & (blk.ios_count == 0)
    routed = ~cube & ~zero_mask
    cas = (blk.op == OP["MGATHER.CAS"]) & routed
    mat = (blk.op >= matrix.FIRST) & (blk.op <= matrix.LAST) & routed
    fault, addr, state = transport.complete(state, blk, pe, cfg, enable & ~cas & ~mat, effects)
    if "MGATHER.CAS" in effects:
        f, a, state = mgather_cas.complete(state, blk, pe, cfg, enable & cas, cas_seed)
        fault, addr = jnp.where(cas, f, fault), jnp.where(cas, a, addr)
    if "MATMUL" in effects:
        f, a, state = matrix.complete(state, blk, pe, cfg, enable & mat)
        fault, addr = jnp.where(mat, f, fault), jnp.where(mat, a, addr)
    return fault, addr, state
