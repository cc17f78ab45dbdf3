"""Decode of 32-bit command words as array code (traceable, vmappable).

The priority-ordered encodings of `forms.ENCODINGS` are unrolled at trace
time: every encoding's match and constraint is a boolean, the first match
wins. Field positions come from the catalog records, never retyped.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike
from numpy.typing import NDArray

from .. import tables
from ..indexing import row
from .forms import ENCODINGS, Encoding, Field

KINDS = ("NONE", "BSTOP", "BSTART", "B.DATR", "B.DIM", "B.IOR", "B.IOT", "B.IOS", "B.FPATR", "B.CATR")
K = {k: i for i, k in enumerate(KINDS)}


def _kind(mn: str) -> str:
    return "BSTART" if mn.startswith("BSTART.") else mn


def _op_of(e: Encoding) -> int:
    if e.variant:
        return tables.OP_ID[e.variant]
    return tables.OP_ID[e.form.mnemonic[len("BSTART."):]]


def _fields_by_mnemonic() -> dict[tuple[str, str], Field]:
    """One Field per (mnemonic, field name); asserts the forms agree on positions."""
    out: dict[tuple[str, str], Field] = {}
    for e in ENCODINGS:
        for f in e.form.fields:
            key = (e.form.mnemonic, f.name)
            assert out.setdefault(key, f).pieces == f.pieces, key
    return out


_FIELDS = _fields_by_mnemonic()


def _pieces(fields: Sequence[Field]) -> NDArray[np.uint32]:
    """[n, P, 3] (instruction lsb, value lsb, width) of each field's pieces, zero-padded."""
    P = max([len(f.pieces) for f in fields] + [1])
    out = np.zeros((len(fields), P, 3), np.uint32)
    for i, f in enumerate(fields):
        for j, piece in enumerate(f.pieces):
            out[i, j] = piece
    return out


def _extract_all(w: jax.Array, pieces: NDArray[np.uint32]) -> jax.Array:
    """Values (int32[n]) of n fields of word w: one vector operation per step,
    not a chain of scalar shifts per field."""
    ilsb, vlsb, width = (jnp.asarray(pieces[..., k]) for k in range(3))
    mask = (jnp.uint32(1) << width) - jnp.uint32(1)
    return jnp.sum(((w >> ilsb) & mask) << vlsb, axis=-1, dtype=jnp.uint32).astype(jnp.int32)


# Static per-encoding tables, in priority order, plus a final "no match" row.
_N = len(ENCODINGS)
_KIND = np.array([K[_kind(e.form.mnemonic)] for e in ENCODINGS] + [K["NONE"]], np.int32)
_OP = np.array([_op_of(e) if _kind(e.form.mnemonic) == "BSTART" else -1 for e in ENCODINGS] + [-1], np.int32)
_DIM = np.array([int(e.form.mnemonic == "B.DIM") * ((e.match >> 12) & 7) for e in ENCODINGS] + [0], np.int32)
_HAS = {name: np.array([any(f.name == name for f in e.form.fields) for e in ENCODINGS] + [False])
        for name in ("DstTile", "SrcTile0", "SrcTile1")}


# the raw fields decode returns, by (output name, mnemonic, catalog field name)
_OUT = (("dtype", "BSTART.TLOAD", "DataType"), ("dim_reg", "B.DIM", "RegSrc"),
        ("dim_imm", "B.DIM", "uimm17"),
        *((f"ior{i}", "B.IOR", n) for i, n in enumerate(("RegDst", "RegSrc0", "RegSrc1", "RegSrc2"))),
        *((f"datr{i}", "B.DATR", n) for i, n in enumerate(
            ("Layout", "DataType", "PadValueOrByteId", "CMode", "RMode", "Sat", "Canonicalize"))),
        ("src0", "B.IOT", "SrcTile0"), ("src1", "B.IOT", "SrcTile1"), ("last", "B.IOT", "L"),
        ("size_code", "B.IOT", "SizeCode"), ("pemode", "B.IOT", "PEMode"),
        ("dst_hand", "B.IOT", "DstTile"), ("ios_sid", "B.IOS", "SharedTID"),
        ("ios_size", "B.IOS", "SizeCode"), ("ios_pemode", "B.IOS", "PEMode"),
        *((f"fp_{n}", "B.FPATR", n) for n in ("RowMaxInit", "RowMaxEn", "GroupMaxEn", "GroupNCode",
                                                "MaxAbsEn")),
        ("catr_dr", "B.CATR", "DR"), ("catr_trap", "B.CATR", "trap"))
_OUT_PIECES = _pieces([_FIELDS[(mn, name)] for _, mn, name in _OUT])
_OUT_INDEX = {o: i for i, (o, _, _) in enumerate(_OUT)}
# every (encoding, constrained field) pair: the field's pieces, its legal values as a
# 64-bit set, and which encoding it belongs to
_CONS = [(i, e.form.field(name), legal) for i, e in enumerate(ENCODINGS)
         for name, legal in e.form.constraints]
_CONS_PIECES = _pieces([f for _, f, _ in _CONS])
_CONS_LEGAL = np.array([sum(1 << v for v in legal) for _, _, legal in _CONS], np.uint64)
_CONS_OWNER = np.zeros((_N + 1, len(_CONS)), bool)
for _k, (_i, _field, _legal) in enumerate(_CONS):
    _CONS_OWNER[_i, _k] = True
_MASKS = np.array([e.mask for e in ENCODINGS] + [0], np.uint32)
_MATCHES = np.array([e.match for e in ENCODINGS] + [0], np.uint32)


def decode(w: ArrayLike) -> dict[str, Any]:
    """Decode one uint32 word -> dict of int32/bool scalars.

    kind (index into KINDS), illegal (Fault_IllegalInstruction at decode), op
    (BSTART operation id), and the raw fields of every in-slice command. The
    encodings are tried as one vector compare against the priority-ordered
    mask/match table (the last row always matches: "no encoding").
    """
    w = jnp.asarray(w, jnp.uint32)
    idx = jnp.argmax((w & jnp.asarray(_MASKS)) == jnp.asarray(_MATCHES))
    values = _extract_all(w, _CONS_PIECES).astype(jnp.uint64)
    legal = (values < 64) & (((jnp.asarray(_CONS_LEGAL) >> jnp.minimum(values, 63)) & 1) == 1)
    cons_ok = jnp.all(~row(_CONS_OWNER, idx) | legal) & (idx < _N)
    f = _extract_all(w, _OUT_PIECES)
    get = lambda name: f[_OUT_INDEX[name]]
    # jax.Array values, but "fp" is a dict of them (the B.FPATR fields)
    return dict(
        kind=row(_KIND, idx), illegal=~cons_ok, op=row(_OP, idx),
        dtype=get("dtype"), dim_target=row(_DIM, idx),
        dim_reg=get("dim_reg"), dim_imm=get("dim_imm"),
        ior=f[_OUT_INDEX["ior0"]:_OUT_INDEX["ior3"] + 1],
        datr=f[_OUT_INDEX["datr0"]:_OUT_INDEX["datr6"] + 1],
        iot_dst=row(_HAS["DstTile"], idx), iot_src0=row(_HAS["SrcTile0"], idx),
        iot_src1=row(_HAS["SrcTile1"], idx),
        src0=get("src0"), src1=get("src1"), last=get("last"), size_code=get("size_code"),
        pemode=get("pemode"), dst_hand=get("dst_hand"), ios_sid=get("ios_sid"),
        ios_size=get("ios_size"), ios_pemode=get("ios_pemode"),
        fp={n: get(f"fp_{n}") for n in ("RowMaxInit", "RowMaxEn", "GroupMaxEn", "GroupNCode",
                                         "MaxAbsEn")},
        catr_dr=get("catr_dr"), catr_trap=get("catr_trap"),
    )
