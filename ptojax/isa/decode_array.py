"""Decode of 32-bit command words as array code (traceable, vmappable).

The priority-ordered encodings of `forms.ENCODINGS` are unrolled at trace
time: every encoding's match and constraint is a boolean, the first match
wins. Field positions come from the catalog records, never retyped.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from .. import tables
from .forms import ENCODINGS, Field

KINDS = ("NONE", "BSTOP", "BSTART", "B.DATR", "B.DIM", "B.IOR", "B.IOT", "B.IOS", "B.FPATR", "B.CATR")
K = {k: i for i, k in enumerate(KINDS)}


def _kind(mn: str) -> str:
    return "BSTART" if mn.startswith("BSTART.") else mn


def _op_of(e) -> int:
    if e.variant:
        return tables.OP_ID[e.variant]
    return tables.OP_ID[e.form.mnemonic[len("BSTART."):]]


def _fields_by_mnemonic():
    """One Field per (mnemonic, field name); asserts the forms agree on positions."""
    out: dict[tuple[str, str], Field] = {}
    for e in ENCODINGS:
        for f in e.form.fields:
            key = (e.form.mnemonic, f.name)
            assert out.setdefault(key, f).pieces == f.pieces, key
    return out


_FIELDS = _fields_by_mnemonic()


def _extract(w, f: Field):
    v = jnp.zeros((), jnp.uint32)
    for ilsb, vlsb, width in f.pieces:
        v = v | (((w >> ilsb) & ((1 << width) - 1)) << vlsb)
    return v.astype(jnp.int32)


def field(w, mnemonic: str, name: str):
    return _extract(w, _FIELDS[(mnemonic, name)])


def _legal(value, legal) -> jnp.ndarray:
    bits = 0
    for v in legal:
        bits |= 1 << v
    return ((jnp.uint64(bits) >> value.astype(jnp.uint64)) & 1) == 1


# Static per-encoding tables, in priority order, plus a final "no match" row.
_N = len(ENCODINGS)
_KIND = np.array([K[_kind(e.form.mnemonic)] for e in ENCODINGS] + [K["NONE"]], np.int32)
_OP = np.array([_op_of(e) if _kind(e.form.mnemonic) == "BSTART" else -1 for e in ENCODINGS] + [-1], np.int32)
_DIM = np.array([int(e.form.mnemonic == "B.DIM") * ((e.match >> 12) & 7) for e in ENCODINGS] + [0], np.int32)
_HAS = {name: np.array([any(f.name == name for f in e.form.fields) for e in ENCODINGS] + [False])
        for name in ("DstTile", "SrcTile0", "SrcTile1")}


def decode(w):
    """Decode one uint32 word -> dict of int32/bool scalars.

    kind (index into KINDS), illegal (Fault_IllegalInstruction at decode), op
    (BSTART operation id), and the raw fields of every in-slice command.
    """
    w = jnp.asarray(w, jnp.uint32)
    hits = jnp.stack([(w & jnp.uint32(e.mask)) == jnp.uint32(e.match) for e in ENCODINGS]
                     + [jnp.ones((), bool)])
    idx = jnp.argmax(hits)
    cons = []
    for e in ENCODINGS:
        ok = jnp.ones((), bool)
        for fname, legal in e.form.constraints:
            ok = ok & _legal(_extract(w, e.form.field(fname)), legal)
        cons.append(ok)
    cons_ok = jnp.stack(cons + [jnp.zeros((), bool)])[idx]
    kind = jnp.asarray(_KIND)[idx]
    d = dict(
        kind=kind, illegal=~cons_ok, op=jnp.asarray(_OP)[idx],
        dtype=field(w, "BSTART.TLOAD", "DataType"),
        dim_target=jnp.asarray(_DIM)[idx],
        dim_reg=field(w, "B.DIM", "RegSrc"), dim_imm=field(w, "B.DIM", "uimm17"),
        ior=jnp.stack([field(w, "B.IOR", n) for n in ("RegDst", "RegSrc0", "RegSrc1", "RegSrc2")]),
        datr=jnp.stack([field(w, "B.DATR", n) for n in (
            "Layout", "DataType", "PadValueOrByteId", "CMode", "RMode", "Sat", "Canonicalize")]),
        iot_dst=jnp.asarray(_HAS["DstTile"])[idx], iot_src0=jnp.asarray(_HAS["SrcTile0"])[idx],
        iot_src1=jnp.asarray(_HAS["SrcTile1"])[idx],
        src0=field(w, "B.IOT", "SrcTile0"), src1=field(w, "B.IOT", "SrcTile1"),
        last=field(w, "B.IOT", "L"), size_code=field(w, "B.IOT", "SizeCode"),
        pemode=field(w, "B.IOT", "PEMode"), dst_hand=field(w, "B.IOT", "DstTile"),
        ios_sid=field(w, "B.IOS", "SharedTID"), ios_size=field(w, "B.IOS", "SizeCode"),
        ios_pemode=field(w, "B.IOS", "PEMode"),
        fp=dict((n, field(w, "B.FPATR", n)) for n in (
            "RowMaxInit", "RowMaxEn", "GroupMaxEn", "GroupNCode", "MaxAbsEn")),
        catr_dr=field(w, "B.CATR", "DR"), catr_trap=field(w, "B.CATR", "trap"),
    )
    return d
