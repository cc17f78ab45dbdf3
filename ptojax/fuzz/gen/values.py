"""Value tables and draw helpers every generator family shares: the dtype
and CUBE layout tables (tables.DATATYPES, encoding.md B.1), weighted picks,
row and element sizes, SizeCodes, raw element values and their GM bytes."""

from __future__ import annotations

import functools
from typing import Optional

import numpy as np

from ... import tables
from ...isa.encode import (DATR_ENCODING, DIM_ENCODING, IOR_ENCODING, IOS_ENCODING, IOT_ENCODING,
                           START_ENCODING)

MASK64 = (1 << 64) - 1

DTYPES = tuple(d.code for d in tables.DATATYPES)                      # the 25 assigned codes
CUBE_DTYPES = tuple(d.code for d in tables.DATATYPES if d.cube_class)  # 20 with a CELL class
BITS = {d.code: d.bits for d in tables.DATATYPES}
RESERVED_START_DTYPES = (15, 21, 22, 23, 29, 30, 31)
RESERVED_DATR_DTYPES = tables.RESERVED_DTYPE_CODES
RESERVED_LAYOUTS = tables.RESERVED_LAYOUT_CODES
RELAYOUT_CODES = (1, 3, 4, 6, 8, 9, 17, 18, 20, 27, 28, 30)
RELAYOUT_TO = tables.ORDINARY_CODE_LAYOUT       # code -> the layout it gives a new tile
FRACTAL_CODES = tuple(c for c in RELAYOUT_CODES if RELAYOUT_TO[c] in ("ZN", "NZ"))
LOAD_CODES = (21, 22, 23)                 # ND2M32, ND2M16, ND2N8
STORE_CODES = (24, 25, 26)                # M322ND, M162ND, N82ND
CODE_LAYOUT = {21: "M32", 22: "M16", 23: "N8", 24: "M32", 25: "M16", 26: "N8"}
STORE_OF: dict[Optional[int], int] = {21: 24, 22: 25, 23: 26}   # looked up with a code or None
PEMODE_MASK = tables.PEMODE_MASK
# B.1: (layout, element bits) -> (cell rows, cell columns)
CELL = {("N8", 32): (4, 8), ("N8", 16): (8, 8), ("N8", 8): (16, 8), ("N8", 4): (32, 8),
        ("M32", 32): (32, 1), ("M32", 16): (32, 2), ("M32", 8): (32, 4), ("M32", 4): (32, 8),
        ("M16", 32): (16, 2), ("M16", 16): (16, 4), ("M16", 8): (16, 8), ("M16", 4): (16, 16)}
INT_DTYPES = tuple(d.code for d in tables.DATATYPES if d.is_integer)        # 10, S4X2/U4X2 too
NONINT_DTYPES = tuple(d.code for d in tables.DATATYPES if not d.is_integer)
PACKED_DTYPES = tuple(d for d in DTYPES if BITS[d] == 4)
SIGNED = {d.code: d.signed for d in tables.DATATYPES}
DT_CODE = {d.name: d.code for d in tables.DATATYPES}

# the faults the aims tables name most
TL, TA, UN = "Fault_TileLegality", "Fault_TileAllocation", "Fault_Unimplemented"


def _choice(rng, n: int, p=None) -> int:
    """int(rng.choice(n, p=p)), the same draw from the same stream, at a quarter
    of its cost (the generator makes tens of these a case): Generator.choice
    takes one integers(0, n) without p, else one random() against the
    normalized cumulative p."""
    if p is None:
        return int(rng.integers(0, n))
    cdf = np.cumsum(p)
    cdf /= cdf[-1]
    return int(np.searchsorted(cdf, rng.random(), side="right"))


def pick_one(rng, seq, p=None):
    return seq[_choice(rng, len(seq), p)]


@functools.lru_cache(maxsize=4096)
def _cdf(items: tuple) -> tuple:
    """(keys, cdf) of a weights table, as Generator.choice normalizes it."""
    w = np.array([v for _, v in items], float)
    cdf = np.cumsum(w / w.sum())
    cdf /= cdf[-1]
    return tuple(k for k, _ in items), cdf


def weighted_key(rng, table: dict) -> str:
    keys, cdf = _cdf(tuple(table.items()))
    return keys[int(np.searchsorted(cdf, rng.random(), side="right"))]


def rowbytes(vc: int, bits: int) -> int:
    return (vc * bits + 7) // 8


def elem_bytes(bits: int) -> int:
    return max(1, bits // 8)


def size_for_bytes(nbytes: int) -> int:
    code = 1
    while (128 << (code - 1)) < nbytes and code < 15:
        code += 1
    return code


def rand_bits(rng, bits: int) -> int:
    return int(rng.integers(0, 1 << bits, dtype=np.uint64)) if bits < 64 else \
        int(rng.integers(0, 1 << 63)) * 2 + int(rng.integers(0, 2))


def rand_value(rng, bits: int) -> int:
    """A raw element value; sometimes 0, all-ones, the sign bit, 1, max positive."""
    if rng.random() < 0.2:
        return pick_one(rng, [0, (1 << bits) - 1, 1 << (bits - 1), 1, (1 << (bits - 1)) - 1])
    return rand_bits(rng, bits)


def encode_elements(dt: int, row: list) -> bytes:
    bits = BITS[dt]
    if bits == 4:
        nib = [v & 0xF for v in row] + [0] * (len(row) % 2)
        return bytes(nib[i] | nib[i + 1] << 4 for i in range(0, len(nib), 2))
    n = bits // 8
    return b"".join((v & ((1 << bits) - 1)).to_bytes(n, "little") for v in row)


def pow2(v: int) -> bool:
    return v > 0 and not v & (v - 1)


# the fields the mutators rewrite, from the catalog (every B.IOT form places
# PEMode, L, SizeCode and SrcTile0 alike, B.IOS its PEMode and SizeCode there
# too, every BSTART its DataType)
_IOT = IOT_ENCODING[(1, True)].form
PEMODE, LAST, SRC_TILE0 = _IOT.field("PEMode"), _IOT.field("L"), _IOT.field("SrcTile0")
SIZE_CODE, DST_TILE = _IOT.field("SizeCode"), _IOT.field("DstTile")
_DATR = DATR_ENCODING.form
DATR_FIELDS = {"layout": _DATR.field("Layout"), "dtype": _DATR.field("DataType"),
               "pad": _DATR.field("PadValueOrByteId"), "cmode": _DATR.field("CMode"),
               "rmode": _DATR.field("RMode"), "sat": _DATR.field("Sat"),
               "canon": _DATR.field("Canonicalize")}
_IOR = IOR_ENCODING.form
REG_DST, REG_SRC0, REG_SRC1, REG_SRC2 = (_IOR.field(n) for n in ("RegDst", "RegSrc0", "RegSrc1",
                                                                 "RegSrc2"))
START_DTYPE = START_ENCODING["TLOAD"].form.field("DataType")
DIM_REG_SRC = DIM_ENCODING[0].form.field("RegSrc")
assert IOS_ENCODING.form.field("PEMode") == PEMODE and IOS_ENCODING.form.field("SizeCode") == SIZE_CODE
