"""Instruction words from their fields (encoding.md 4): the encoders the
case generator, the executor's start-word constants and the tests share.

The reference model keeps its own decoder (reference/decode.py) and never
uses these: its independence is its value.
"""

from __future__ import annotations


BSTOP = 0x00000001
START = {"TLOAD": 0x00011181, "TSTORE": 0x00111181, "TSTORE.SPART": 0x00E11181,
         "MGATHER.CAS": 0x00811181, "TMATMUL": 0x00031181, "TMATMUL.BIAS": 0x00131181,
         "TMATMUL.ACC": 0x00231181, "TMATMULMX": 0x00431181, "TGEMV": 0x01031181,
         "TGEMVMX.ACC": 0x01631181}


def bstart(op: str, dt: int) -> int:
    return START[op] | (dt & 0x1F) << 27


def datr(layout=0, dtype=31, pad=3, cmode=0, rmode=0, sat=0, canon=0) -> int:
    return (0x1023 | (layout & 0x1F) << 7 | (rmode & 7) << 15 | (dtype & 0x1F) << 20
            | (canon & 1) << 25 | (sat & 1) << 26 | (pad & 3) << 27 | (cmode & 7) << 29)


def dim(n: int, imm: int, reg: int = 0) -> int:
    return (0x43 | (imm & 0xFFF) << 20 | ((imm >> 12) & 0x1F) << 7 | (n & 7) << 12
            | (reg & 0x1F) << 15)


def ior(src0=0, src1=0, src2=0, dst=0) -> int:
    return 0x13 | (dst & 0x1F) << 7 | (src0 & 0x1F) << 15 | (src1 & 0x1F) << 20 | (src2 & 0x1F) << 27


def iot_dst(hand, size=1, pemode=1, last=1) -> int:
    return 0x6013 | (pemode & 7) << 9 | (hand & 3) << 7 | (size & 0xF) << 15 | (last & 1) << 19


def iot_src(src, pemode=1, last=1) -> int:
    return 0x5013 | (src & 0x3F) << 20 | (pemode & 7) << 9 | (last & 1) << 19


def iot_src_dst(src, hand, size=1, pemode=1, last=1) -> int:
    return (0x5013 | (src & 0x3F) << 20 | (hand & 3) << 7 | (size & 0xF) << 15
            | (pemode & 7) << 9 | (last & 1) << 19)


def iot_src2(s0, s1, pemode=1, last=1) -> int:
    return 0x4013 | (s0 & 0x3F) << 20 | (s1 & 0x3F) << 26 | (pemode & 7) << 9 | (last & 1) << 19


def ios(sid, pemode=1, size=0) -> int:
    return 0x1013 | (pemode & 7) << 9 | (size & 0xF) << 15 | (sid & 0xFF) << 20


def catr(trap=0, dr=0, atom=0, aq=0, rl=0, far=0) -> int:
    return 0x23 | rl << 15 | aq << 16 | atom << 17 | far << 18 | trap << 19 | dr << 26


FPATR0 = 0x00002023
