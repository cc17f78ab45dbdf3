"""Instruction words from their fields (encoding.md 4): the encoders the
case generator, the assembler and the tests share.

Every encoder is built from the command-form catalog (isa/forms.py): the
encoding it packs into and where its fields go are looked up once, here at
import (a `packer`), because the case generator calls these millions of times.

The reference model keeps its own decoder (reference/decode.py) and never
uses these: its independence is its value.
"""

from __future__ import annotations

from typing import Callable, Sequence

from . import forms

_BY_INDEX = {i: forms.FORMS_BY_ID[fid] for fid, i in forms.CATALOG["source_form_index"].items()}


def encoding(index: int, variant: str = "") -> forms.Encoding:
    """The catalog encoding of a form by its source form index (encoding.md's numbering)."""
    form = _BY_INDEX[index]
    for e in forms.ENCODINGS:
        if e.form is form and e.variant == variant:
            return e
    raise LookupError(form.form_id)


def packer(enc: forms.Encoding, names: Sequence[str]) -> Callable[..., int]:
    """A function of the named fields' values, in `names` order, returning
    `enc`'s word with them in place (values are cut to their field widths)."""
    match = enc.match
    plan = tuple(p for i, name in enumerate(names) for p in enc.form.field(name).plan(i))
    return lambda *values: forms.pack(match, plan, values)


# ----------------------------------------------------------------- the encodings by command

# BSTART operation name (the TSTORE.SPART variant has its own) -> encoding
START_ENCODING = {e.variant or e.form.mnemonic[len("BSTART."):]: e for e in forms.ENCODINGS
                  if e.form.mnemonic.startswith("BSTART.")}
BSTOP_ENCODING = encoding(51)
DATR_ENCODING = encoding(1)
DIM_ENCODING = {0: encoding(3), 1: encoding(4), 2: encoding(2)}          # ->LB0, LB1, LB2
IOR_ENCODING = encoding(7)
# (number of source tiles, has a destination) -> B.IOT encoding
IOT_ENCODING = {(2, False): encoding(9), (2, True): encoding(10), (1, False): encoding(11),
                (1, True): encoding(8), (0, True): encoding(12)}
IOS_ENCODING = encoding(52)
FPATR_ENCODING = encoding(73)
CATR_ENCODING = encoding(0)

# ----------------------------------------------------------------- words

BSTOP = BSTOP_ENCODING.match
FPATR0 = FPATR_ENCODING.match            # B.FPATR with every field zero
START = {op: e.match for op, e in START_ENCODING.items()}    # BSTART.<op>, DataType 0

_BSTART = {op: packer(e, ("DataType",)) for op, e in START_ENCODING.items()}
_DATR = packer(DATR_ENCODING, ("Layout", "DataType", "PadValueOrByteId", "CMode", "RMode", "Sat",
                               "Canonicalize"))
_DIM = {n: packer(e, ("uimm17", "RegSrc")) for n, e in DIM_ENCODING.items()}
_IOR = packer(IOR_ENCODING, ("RegSrc0", "RegSrc1", "RegSrc2", "RegDst"))
_IOT_DST = packer(IOT_ENCODING[0, True], ("DstTile", "SizeCode", "PEMode", "L"))
_IOT_SRC = packer(IOT_ENCODING[1, False], ("SrcTile0", "PEMode", "L"))
_IOT_SRC_DST = packer(IOT_ENCODING[1, True], ("SrcTile0", "DstTile", "SizeCode", "PEMode", "L"))
_IOT_SRC2 = packer(IOT_ENCODING[2, False], ("SrcTile0", "SrcTile1", "PEMode", "L"))
_IOT_SRC2_DST = packer(IOT_ENCODING[2, True], ("SrcTile0", "SrcTile1", "DstTile", "SizeCode",
                                               "PEMode", "L"))
_IOS = packer(IOS_ENCODING, ("SharedTID", "PEMode", "SizeCode"))
_FPATR = packer(FPATR_ENCODING, ("PreQuantMode", "ReluMode", "GroupNCode", "RowMaxEn",
                                 "GroupMaxEn", "RowMaxInit", "MaxAbsEn", "TransA", "TransB"))
_CATR = packer(CATR_ENCODING, ("trap", "DR", "atom", "aq", "rl", "far"))


def bstart(op: str, dt: int) -> int:
    return _BSTART[op](dt)


def datr(layout: int = 0, dtype: int = 31, pad: int = 3, cmode: int = 0, rmode: int = 0, sat: int = 0,
         canon: int = 0) -> int:
    return _DATR(layout, dtype, pad, cmode, rmode, sat, canon)


def dim(n: int, imm: int, reg: int = 0) -> int:
    """B.DIM ->LB<n> of uimm17 `imm` (+ GPR `reg`)."""
    return _DIM[n](imm, reg)


def ior(src0: int = 0, src1: int = 0, src2: int = 0, dst: int = 0) -> int:
    return _IOR(src0, src1, src2, dst)


def iot_dst(hand: int, size: int = 1, pemode: int = 1, last: int = 1) -> int:
    return _IOT_DST(hand, size, pemode, last)


def iot_src(src: int, pemode: int = 1, last: int = 1) -> int:
    return _IOT_SRC(src, pemode, last)


def iot_src_dst(src: int, hand: int, size: int = 1, pemode: int = 1, last: int = 1) -> int:
    return _IOT_SRC_DST(src, hand, size, pemode, last)


def iot_src2(s0: int, s1: int, pemode: int = 1, last: int = 1) -> int:
    return _IOT_SRC2(s0, s1, pemode, last)


def iot_src2_dst(s0: int, s1: int, hand: int, size: int = 1, pemode: int = 1, last: int = 1) -> int:
    return _IOT_SRC2_DST(s0, s1, hand, size, pemode, last)


def ios(sid: int, pemode: int = 1, size: int = 0) -> int:
    return _IOS(sid, pemode, size)


def fpatr(pre: int = 0, relu: int = 0, group_n: int = 0, row_max: int = 0, group_max: int = 0,
          row_max_init: int = 0, max_abs: int = 0, trans_a: int = 0, trans_b: int = 0) -> int:
    return _FPATR(pre, relu, group_n, row_max, group_max, row_max_init, max_abs, trans_a, trans_b)


def catr(trap: int = 0, dr: int = 0, atom: int = 0, aq: int = 0, rl: int = 0, far: int = 0) -> int:
    return _CATR(trap, dr, atom, aq, rl, far)
