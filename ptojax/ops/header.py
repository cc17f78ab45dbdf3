"""The open block's header, decoded once into named fields (encoding.md 3-4).

`Block` (ptojax.state) is the header as the model latches it: raw B.DATR
fields in a vector, B.IOT bindings as rows of a table, raw B.FPATR/B.CATR
words. Completion reads it through `Header`, built once per completion by
`decode`, so an operation family says `h.pad` or `h.src0[0]`, never
`blk.datr[2]` or `blk.iot[0, 6]`, and derived facts (binding counts, the
source stream, the CUBE selection) are computed in one place.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .. import tables
from ..state import Block
from .common import take


class Header(NamedTuple):
    op: jax.Array               # operation id of the BSTART (tables.OPS)
    dtype: jax.Array            # BSTART DataType
    # B.DATR
    datr_present: jax.Array
    layout: jax.Array           # Layout (conversion) code
    datr_dtype: jax.Array       # DataType (DTYPE_NONE when absent)
    pad: jax.Array              # PadValueOrByteId
    cmode: jax.Array
    rmode: jax.Array
    sat: jax.Array
    canonicalize: jax.Array
    conversion_attrs: jax.Array  # any of CMode/RMode/Sat/Canonicalize nonzero
    cube: jax.Array             # a CUBE conversion code (21..26): the CUBE transport path
    # B.DIM: LB0..LB2 and whether each was given
    lb: jax.Array               # int32[3]
    lb_present: jax.Array       # bool[3]
    # B.IOR
    ior_present: jax.Array
    reg_dst: jax.Array
    reg_src0: jax.Array         # base register of transport and CAS
    reg_src1: jax.Array         # stride register
    reg_src2: jax.Array
    ior_surplus: jax.Array      # RegDst or RegSrc2 named: no in-slice operation reads them
    # B.IOT bindings, one entry per table row (recorded rows: `bound`)
    iot_count: jax.Array
    iot_closed: jax.Array       # an L=1 binding was recorded
    bound: jax.Array            # bool[MAX_IOT]
    has_dst: jax.Array          # bool[MAX_IOT]
    dst_hand: jax.Array         # int32[MAX_IOT]
    size_code: jax.Array        # int32[MAX_IOT]
    pe_mask: jax.Array          # int32[MAX_IOT]
    has_src0: jax.Array         # bool[MAX_IOT]
    has_src1: jax.Array
    src0: jax.Array             # int32[MAX_IOT] source TileIndex
    src1: jax.Array
    n_dst: jax.Array            # destinations among the recorded bindings
    n_src: jax.Array            # sources among them
    mask: jax.Array             # the first binding's PE mask (the block's, once checked)
    sources: jax.Array          # int32[2 * MAX_IOT]: source TileIndex stream, in order
    source_ok: jax.Array        # bool[2 * MAX_IOT]: which stream entries exist
    # B.IOS bindings
    ios_count: jax.Array
    ios_bound: jax.Array        # bool[MAX_IOS]
    shared_id: jax.Array        # int32[MAX_IOS]
    shared_size: jax.Array      # int32[MAX_IOS]
    shared_mask: jax.Array      # the first B.IOS's PE mask
    shared_masks: jax.Array     # int32[MAX_IOS]: every B.IOS's PE mask
    zero_mask: jax.Array        # a PEMode-000 binding and no participating one: a no-op
    # B.FPATR
    fpatr_present: jax.Array
    trans_a: jax.Array
    trans_b: jax.Array
    max_abs: jax.Array
    row_max_init: jax.Array
    group_max: jax.Array
    row_max: jax.Array
    group_n: jax.Array          # GroupNCode
    relu: jax.Array
    pre_quant_mode: jax.Array
    # B.CATR
    catr_present: jax.Array
    catr_dr: jax.Array
    catr_trap: jax.Array


def _bit(word: jax.Array, n: int) -> jax.Array:
    return ((word >> n) & 1).astype(jnp.int32)


def decode(blk: Block) -> Header:
    """Named fields of a Block (one block, traced)."""
    d, iot = blk.datr, blk.iot
    bound = jnp.arange(iot.shape[0]) < blk.iot_count
    has_dst, has_src0, has_src1 = iot[:, 0] == 1, iot[:, 4] == 1, iot[:, 5] == 1
    src_ok = jnp.stack([bound & has_src0, bound & has_src1], axis=1).reshape(-1)
    ior = blk.ior
    fp, catr = blk.fpatr, blk.catr
    return Header(
        op=blk.op, dtype=blk.dtype,
        datr_present=blk.datr_present, layout=d[0], datr_dtype=d[1], pad=d[2], cmode=d[3],
        rmode=d[4], sat=d[5], canonicalize=d[6],
        conversion_attrs=(d[3] != 0) | (d[4] != 0) | (d[5] != 0) | (d[6] != 0),
        cube=blk.datr_present & (d[0] >= 21) & (d[0] <= 26),
        lb=blk.lb, lb_present=blk.lb_present,
        ior_present=blk.ior_present, reg_dst=ior[0], reg_src0=ior[1], reg_src1=ior[2],
        reg_src2=ior[3], ior_surplus=blk.ior_present & ((ior[0] != 0) | (ior[3] != 0)),
        iot_count=blk.iot_count, iot_closed=blk.iot_closed, bound=bound,
        has_dst=has_dst, dst_hand=iot[:, 1], size_code=iot[:, 2], pe_mask=iot[:, 3],
        has_src0=has_src0, has_src1=has_src1, src0=iot[:, 6], src1=iot[:, 7],
        n_dst=jnp.sum(bound & has_dst), n_src=jnp.sum(src_ok), mask=iot[0, 3],
        sources=jnp.stack([iot[:, 6], iot[:, 7]], axis=1).reshape(-1), source_ok=src_ok,
        ios_count=blk.ios_count, ios_bound=jnp.arange(blk.ios.shape[0]) < blk.ios_count,
        shared_id=blk.ios[:, 0], shared_size=blk.ios[:, 1], shared_mask=blk.ios[0, 2], shared_masks=blk.ios[:, 2],
        zero_mask=blk.zero_seen & (blk.iot_count == 0) & (blk.ios_count == 0),
        fpatr_present=blk.fpatr_present, trans_a=_bit(fp, 7), trans_b=_bit(fp, 8),
        max_abs=_bit(fp, 15), row_max_init=_bit(fp, 16), group_max=_bit(fp, 17),
        row_max=_bit(fp, 18), group_n=((fp >> 19) & 15).astype(jnp.int32),
        relu=((fp >> 23) & 7).astype(jnp.int32),
        pre_quant_mode=((fp >> 26) & 63).astype(jnp.int32),
        catr_present=blk.catr_present, catr_dr=blk.catr_present & (_bit(catr, 26) == 1),
        catr_trap=blk.catr_present & (_bit(catr, 19) == 1))


def block_mask(h: Header) -> jax.Array:
    """The block's common PE mask (0 when no binding was recorded)."""
    return jnp.where(h.iot_count > 0, h.mask, jnp.where(h.ios_count > 0, h.shared_mask, 0))


_TLSU = np.array([engine == "TLSU" for _, engine, _ in tables.OPS])


def is_tlsu_op(h: Header) -> jax.Array:
    """The block's operation runs on the TLSU (transport, MGATHER.CAS, TMOV)."""
    return take(_TLSU, h.op)


def shared_tlsu_block(h: Header) -> jax.Array:
    """A TLSU block with a B.IOS: one collective action of the Core, run once."""
    return is_tlsu_op(h) & (h.ios_count > 0)


def is_tlsu(h: Header) -> jax.Array:
    return (h.op == tables.OP_ID["TLOAD"]) | (h.op == tables.OP_ID["TSTORE"]) \
        | (h.op == tables.OP_ID["TSTORE.SPART"])
