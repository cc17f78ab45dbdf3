"""Text assembler / disassembler for the ptojax command slice (encoding.md section 7).

One command per line; `;` and `#` start comments (except the `#` of a tile
name such as ``T#1``); blank lines are ignored; mnemonics and names are
case-insensitive; numbers are decimal or ``0x`` hex.

==========================================  ===========================================
``BSTART.<OP> <DataType>``                  ``BSTART.TLOAD FP16``; OP is one of TLOAD,
                                            TSTORE, TSTORE.SPART, MGATHER.CAS, TMATMUL[MX]
                                            [.BIAS|.ACC], TGEMV[MX][.BIAS|.ACC]
``BSTOP``
``B.DATR {lay, dt, pad, cmode, rmode, sat, canon}``
                                            ``B.DATR {ND2M16, DTYPE_NONE, Max, EQ, Default,
                                            0, 0}``; trailing fields may be omitted (= 0,
                                            i.e. NORM/FP64/Zero/EQ/Default/0/0); braces
                                            optional; each value a name or its code
``B.DIM <gpr>, <uimm17>, -><LB0|LB1|LB2>``  ``B.DIM a0, 16, ->LB0``
``B.IOR [src0[, src1[, src2]]][, ->dst]``   ``B.IOR a0, a1``; omitted GPRs = zero
``B.IOT [src0[, src1]], mask=bbbb[, last][, -><T|U|M|N><SizeCode>]``
                                            ``B.IOT T#1, T#2, mask=1111, last, ->M<1>``;
                                            sources T#n/U#n/M#n/N#n (n 1..16) or a plain
                                            TileIndex 0..63; mask PE0 first; ``<last>``
                                            also accepted; the form follows from the
                                            operands
``B.IOS S<tid>, mask=bbbb``                 source binding (SizeCode 0)
``B.IOS mask=bbbb, ->S<tid><SizeCode>``     destination binding, SizeCode 1..12
``B.FPATR pq, relu, gn, rmax, gmax, rinit, maxabs, transA, transB``
                                            trailing values may be omitted (= 0)
``B.CATR {[trap][, atom][, aq][, rl][, far][, dr]}``
                                            the listed bits are set; ``B.CATR {}`` = all
                                            zero; ``atomic`` = atom, ``aqrl`` = aq + rl
``.word <u32>``                             a raw word
==========================================  ===========================================

`disassemble` prints the canonical spelling (full-length B.DATR/B.FPATR, names
rather than codes, minimal B.IOR) and prints every word that does not decode
without fault as ``.word 0x%08x``. B.IOT forms 9 and 11 leave bits [8:7]
undefined; a word of those forms with nonzero [8:7] is also printed as
``.word`` so that ``assemble(disassemble(w)) == w`` for every 32-bit word.
"""

from __future__ import annotations

import re
from typing import Iterable, Mapping, Optional, SupportsIndex

from .. import tables
from . import forms
from .decode import Command, check_word, decode
from .encode import (BSTOP, CATR_ENCODING, DATR_ENCODING, DIM_ENCODING, FPATR_ENCODING,
                     IOR_ENCODING, IOS_ENCODING, IOT_ENCODING, START_ENCODING, packer)

__all__ = ["AsmError", "assemble", "disassemble", "assemble_line", "format_command", "SYNTAX"]


class AsmError(ValueError):
    """Malformed assembly text. `lineno` is 1-based, `line` the offending text."""

    def __init__(self, lineno: int, line: str, message: str) -> None:
        self.lineno = lineno
        self.line = line
        self.detail = message
        super().__init__(f"line {lineno}: {line!r}: {message}")


class _Bad(Exception):
    key: str        # the SYNTAX key of the command, set where the command is known

    def __init__(self, detail: Optional[str] = None) -> None:
        self.detail = detail


# ---------------------------------------------------------------- form lookup

# BSTART.<name> -> encoding (the TSTORE.SPART variant has its own name)
_BSTART = {"BSTART." + op: e for op, e in START_ENCODING.items()}
_DIM_LB = {id(e.form): lb for lb, e in DIM_ENCODING.items()}

_FPATR_ORDER = ("PreQuantMode", "ReluMode", "GroupNCode", "RowMaxEn", "GroupMaxEn",
                "RowMaxInit", "MaxAbsEn", "TransA", "TransB")
_CATR_ORDER = ("trap", "atom", "aq", "rl", "far", "dr")
_CATR_FIELD = {"trap": "trap", "atom": "atom", "aq": "aq", "rl": "rl", "far": "far", "dr": "DR"}
_CATR_ALIAS = {"atomic": ("atom",), "aqrl": ("aq", "rl")}


def _legal(enc: forms.Encoding, name: str) -> Optional[frozenset[int]]:
    for f, legal in enc.form.constraints:
        if f == name:
            return legal
    return None


_DATR_LEGAL = {n: _legal(DATR_ENCODING, n) for n in ("Layout", "DataType", "CMode")}

SYNTAX = {
    "BSTART": "BSTART.<op> <DataType>",
    "BSTOP": "BSTOP",
    "B.DATR": "B.DATR {<layout>, <datatype>, <padvalue>, <cmode>, <rmode>, <sat 0|1>, <canonicalize 0|1>}",
    "B.DIM": "B.DIM <gpr>, <uimm17>, -><LB0|LB1|LB2>",
    "B.IOR": "B.IOR [<gpr>[, <gpr>[, <gpr>]]][, -><gpr>]",
    "B.IOT": "B.IOT [<tile>[, <tile>]], mask=<4 bits PE0..PE3>[, last][, -><T|U|M|N><SizeCode 1..10>]",
    "B.IOS": "B.IOS S<tid>, mask=<4 bits>` or `B.IOS mask=<4 bits>, ->S<tid><SizeCode 1..12>",
    "B.FPATR": ("B.FPATR <PreQuantMode>, <ReluMode>, <GroupNCode>, <RowMaxEn>, <GroupMaxEn>, "
                "<RowMaxInit>, <MaxAbsEn>, <TransA>, <TransB>"),
    "B.CATR": "B.CATR {[trap][, atom][, aq][, rl][, far][, dr]}",
    ".WORD": ".word <uint32>",
}
_ANY = ("a command: " + ", ".join(["BSTART.<op>", "BSTOP", "B.DATR", "B.DIM", "B.IOR", "B.IOT",
                                   "B.IOS", "B.FPATR", "B.CATR", ".word"]))


def _encode(enc: forms.Encoding, values: dict[str, int]) -> int:
    for name, v in values.items():
        width = enc.form.field(name).width
        if not 0 <= v < (1 << width):
            raise _Bad(f"{name} {v} out of range 0..{(1 << width) - 1}")
    word = packer(enc, tuple(values))(*values.values())
    cmd = decode(word)
    if (cmd.fault is not None or cmd.form_id != enc.form.form_id or cmd.variant != enc.variant
            or cmd.free_bits):
        raise _Bad("operands do not encode as this command")
    return word


# ---------------------------------------------------------------- operand parsing

_NUM_RE = re.compile(r"0[xX][0-9a-fA-F]+|[0-9]+")


def _num(tok: str) -> Optional[int]:
    if _NUM_RE.fullmatch(tok):
        return int(tok, 0) if tok[:2].lower() == "0x" else int(tok, 10)
    return None


def _uint(tok: str, what: str, hi: int) -> int:
    v = _num(tok)
    if v is None:
        raise _Bad(f"{what} {tok!r} is not a number")
    if v > hi:
        raise _Bad(f"{what} {v} out of range 0..{hi}")
    return v


def _gpr(tok: str, what: str = "GPR") -> int:
    s = tok.lower()
    if s in tables.GPR_NAMES:
        return tables.GPR_NAMES.index(s)
    m = re.fullmatch(r"r([0-9]+)", s)
    if m:
        v = int(m[1])
        if v < tables.NUM_GPRS:
            return v
        raise _Bad(f"{what} {tok} is reserved (GPR selectors 24..31 are illegal)")
    raise _Bad(f"{what} {tok!r} is not a GPR name (zero, sp, a0..a7, ra, s0..s8, x0..x3, r0..r23)")


def _enum(tok: str, what: str, names: Mapping[str, int], legal: Optional[frozenset[int]], hi: int) -> int:
    """A name (case-insensitive) or a code; codes outside `legal` are reserved."""
    code = names.get(tok.lower())
    if code is None:
        code = _num(tok)
        if code is None:
            raise _Bad(f"unknown {what} {tok!r}")
        if code > hi:
            raise _Bad(f"{what} {code} out of range 0..{hi}")
    if legal is not None and code not in legal:
        raise _Bad(f"{what} {code} is reserved")
    return code


_DTYPE_NAMES = {d.name.lower(): d.code for d in tables.DATATYPES}
_DTYPE_NAMES_NONE = dict(_DTYPE_NAMES, dtype_none=tables.DTYPE_NONE)
_LAYOUT_NAMES = {n.lower(): c for n, c in tables.LAYOUT_CODE_BY_NAME.items()}
_PAD_NAMES = {n.lower(): i for i, n in enumerate(tables.PADVALUES)}
_CMODE_NAMES = {n.lower(): i for i, n in enumerate(tables.CMODES)}
_RMODE_NAMES = {n.lower(): i for i, n in enumerate(tables.RMODES)}
_HAND = {h.lower(): i for i, h in enumerate(tables.HANDS)}

_MASK_RE = re.compile(r"mask=([01]{4})", re.I)
_TILE_RE = re.compile(r"([TUMN])#([0-9]+)", re.I)
_IOT_DST_RE = re.compile(r"->([TUMN])<([0-9a-fA-FxX]+)>", re.I)
_IOS_SRC_RE = re.compile(r"S([0-9a-fA-FxX]+)", re.I)
_IOS_DST_RE = re.compile(r"->S([0-9a-fA-FxX]+)<([0-9a-fA-FxX]+)>", re.I)


def _pemode(tok: str) -> int:
    m = _MASK_RE.fullmatch(tok)
    if not m:
        raise _Bad(f"{tok!r} is not mask=<4 binary digits>")
    bits = int(m[1], 2)
    if bits not in tables.PEMODE_MASK:
        enc = ", ".join(tables.mask_str(x) for x in tables.PEMODE_MASK)
        raise _Bad(f"mask {m[1]} is not encodable (encodable: {enc})")
    return tables.PEMODE_MASK.index(bits)


def _tile(tok: str) -> int:
    m = _TILE_RE.fullmatch(tok)
    if m:
        n = int(m[2])
        if not 1 <= n <= tables.HAND_SLOTS:
            raise _Bad(f"tile {tok} out of range ({m[1].upper()}#1..{m[1].upper()}#16)")
        return _HAND[m[1].lower()] * tables.HAND_SLOTS + n - 1
    v = _num(tok)
    if v is None:
        raise _Bad(f"{tok!r} is not a tile (T#n, U#n, M#n, N#n or a TileIndex 0..63)")
    if v >= tables.LOCAL_TILES:
        raise _Bad(f"TileIndex {v} out of range 0..63")
    return v


def _is_last(tok: str) -> bool:
    return tok.lower() in ("last", "<last>")


def _braced(rest: str, required: bool = False) -> str:
    r = rest.strip()
    if r.startswith("{") or r.endswith("}"):
        if not (r.startswith("{") and r.endswith("}")):
            raise _Bad("unbalanced braces")
        return r[1:-1]
    if required:
        raise _Bad("missing braces")
    return r


def _tight(tok: str) -> str:
    """Strip an operand and drop the blanks around = < > # and after ->."""
    tok = re.sub(r"\s*([=<>#])\s*", r"\1", tok.strip())
    return re.sub(r"->\s+", "->", tok)


def _split(rest: str) -> list[str]:
    if not rest.strip():
        return []
    toks = [_tight(t) for t in rest.split(",")]
    if any(not t for t in toks):
        raise _Bad("empty operand")
    return toks


# ---------------------------------------------------------------- per-command assemblers


def _asm_bstart(mn: str, ops: list[str]) -> int:
    enc = _BSTART.get(mn)
    if enc is None:
        raise _Bad(f"unknown BSTART operation {mn!r} (known: {', '.join(sorted(_BSTART))})")
    if len(ops) != 1:
        raise _Bad("one DataType operand")
    if ops[0].lower() == "dtype_none":
        # only BSTART.TMOV's catalog form takes it (keep the source's type)
        if not enc.form.constraint_ok({"DataType": 31}):
            raise _Bad(f"DTYPE_NONE is not a {mn} DataType")
        return _encode(enc, {"DataType": 31})
    dt = _enum(ops[0], "DataType", _DTYPE_NAMES, _legal(enc, "DataType"), 31)
    return _encode(enc, {"DataType": dt})


def _asm_bstop(ops: list[str]) -> int:
    if ops:
        raise _Bad("no operands")
    return BSTOP


def _asm_datr(rest: str) -> int:
    ops = _split(_braced(rest))
    if not 1 <= len(ops) <= 7:
        raise _Bad(f"1 to 7 fields, got {len(ops)}")
    ops = ops + ["0"] * (7 - len(ops))
    v = {
        "Layout": _enum(ops[0], "Layout", _LAYOUT_NAMES, _DATR_LEGAL["Layout"], 31),
        "DataType": _enum(ops[1], "DataType", _DTYPE_NAMES_NONE, _DATR_LEGAL["DataType"], 31),
        "PadValueOrByteId": _enum(ops[2], "PadValue", _PAD_NAMES, None, 3),
        "CMode": _enum(ops[3], "CMode", _CMODE_NAMES, _DATR_LEGAL["CMode"], 7),
        "RMode": _enum(ops[4], "RMode", _RMODE_NAMES, None, 7),
        "Sat": _uint(ops[5], "Sat", 1),
        "Canonicalize": _uint(ops[6], "Canonicalize", 1),
    }
    return _encode(DATR_ENCODING, v)


def _asm_dim(ops: list[str]) -> int:
    if len(ops) != 3:
        raise _Bad(f"3 operands, got {len(ops)}")
    reg = _gpr(ops[0])
    imm = _uint(ops[1], "uimm17", (1 << 17) - 1)
    m = re.fullmatch(r"->LB([0-9]+)", ops[2], re.I)
    if not m or int(m[1]) not in DIM_ENCODING:
        raise _Bad(f"destination {ops[2]!r} is not ->LB0, ->LB1 or ->LB2")
    return _encode(DIM_ENCODING[int(m[1])], {"RegSrc": reg, "uimm17": imm})


def _asm_ior(ops: list[str]) -> int:
    dst = 0
    if ops and ops[-1].startswith("->"):
        dst = _gpr(ops[-1][2:], "RegDst")
        ops = ops[:-1]
    if len(ops) > 3:
        raise _Bad("at most 3 source GPRs and one ->destination")
    srcs = []
    for i, t in enumerate(ops):
        if t.startswith("->"):
            raise _Bad("the ->destination must be the last operand")
        srcs.append(_gpr(t, f"RegSrc{i}"))
    srcs += [0] * (3 - len(srcs))
    return _encode(IOR_ENCODING, {"RegSrc0": srcs[0], "RegSrc1": srcs[1], "RegSrc2": srcs[2], "RegDst": dst})


def _asm_iot(ops: list[str]) -> int:
    srcs: list[int]
    pe: Optional[int]
    dst: Optional[tuple[int, int]]
    srcs, pe, last, dst = [], None, 0, None
    for t in ops:
        if t.lower().startswith("mask="):
            if pe is not None:
                raise _Bad("mask given twice")
            pe = _pemode(t)
        elif _is_last(t):
            if last:
                raise _Bad("last given twice")
            last = 1
        elif t.startswith("->"):
            if dst is not None:
                raise _Bad("two destinations")
            m = _IOT_DST_RE.fullmatch(t)
            if not m:
                raise _Bad(f"destination {t!r} is not -><T|U|M|N><SizeCode>")
            size = _uint(m[2], "SizeCode", 15)
            if not 1 <= size <= 10:
                raise _Bad(f"B.IOT destination SizeCode {size} out of range 1..10")
            dst = (_HAND[m[1].lower()], size)
        else:
            if pe is not None or last or dst is not None:
                raise _Bad(f"source {t!r} after mask/last/destination")
            srcs.append(_tile(t))
    if pe is None:
        raise _Bad("missing mask=")
    if len(srcs) > 2:
        raise _Bad("at most two source tiles")
    key = (len(srcs), dst is not None)
    if key not in IOT_ENCODING:
        raise _Bad("a binding needs a source tile or a destination")
    v = {"PEMode": pe, "L": last}
    for i, s in enumerate(srcs):
        v[f"SrcTile{i}"] = s
    if dst is not None:
        v["DstTile"], v["SizeCode"] = dst
    return _encode(IOT_ENCODING[key], v)


def _asm_ios(ops: list[str]) -> int:
    pe: Optional[int]
    tid: Optional[int]
    size: Optional[int]
    pe, tid, size = None, None, None
    for t in ops:
        if t.lower().startswith("mask="):
            if pe is not None:
                raise _Bad("mask given twice")
            pe = _pemode(t)
            continue
        if tid is not None:
            raise _Bad(f"unexpected operand {t!r} (one SharedTID only)")
        m = _IOS_DST_RE.fullmatch(t)
        if m:
            tid = _uint(m[1], "SharedTID", 255)
            size = _uint(m[2], "SizeCode", 15)
            if not 1 <= size <= 12:
                raise _Bad(f"B.IOS destination SizeCode {size} out of range 1..12")
            continue
        m = _IOS_SRC_RE.fullmatch(t)
        if m:
            tid, size = _uint(m[1], "SharedTID", 255), 0
            continue
        raise _Bad(f"operand {t!r} is not S<tid>, ->S<tid><SizeCode> or mask=")
    if pe is None:
        raise _Bad("missing mask=")
    if tid is None:
        raise _Bad("missing S<tid> source or ->S<tid><SizeCode> destination")
    assert size is not None         # set with tid
    return _encode(IOS_ENCODING, {"SharedTID": tid, "SizeCode": size, "PEMode": pe})


def _asm_fpatr(ops: list[str]) -> int:
    if not 1 <= len(ops) <= 9:
        raise _Bad(f"1 to 9 values, got {len(ops)}")
    ops = ops + ["0"] * (9 - len(ops))
    v: dict[str, int] = {}
    for name, t in zip(_FPATR_ORDER, ops):
        f = FPATR_ENCODING.form.field(name)
        x = _uint(t, name, (1 << f.width) - 1)
        legal = _legal(FPATR_ENCODING, name)
        if legal is not None and x not in legal:
            raise _Bad(f"{name} {x} is reserved (legal: {', '.join(map(str, sorted(legal)))})")
        v[name] = x
    return _encode(FPATR_ENCODING, v)


def _asm_catr(rest: str) -> int:
    ops = _split(_braced(rest))
    set_: set[str] = set()
    for t in ops:
        names = _CATR_ALIAS.get(t.lower(), (t.lower(),))
        for n in names:
            if n not in _CATR_FIELD:
                raise _Bad(f"unknown B.CATR bit {t!r} (trap, atom, aq, rl, far, dr)")
            if n in set_:
                raise _Bad(f"B.CATR bit {n} given twice")
            set_.add(n)
    return _encode(CATR_ENCODING, {_CATR_FIELD[n]: int(n in set_) for n in _CATR_ORDER})


def _asm_word(ops: list[str]) -> int:
    if len(ops) != 1:
        raise _Bad("one value")
    return _uint(ops[0], ".word value", 0xFFFFFFFF)


_LINE_RE = re.compile(r"\s*(\.?[A-Za-z][\w.]*)(.*)$", re.S)


def _strip_comment(line: str) -> str:
    """Drop a `;` or `#` comment; a `#` between a hand letter and a digit (T#1) is kept."""
    for i, ch in enumerate(line):
        if ch == ";" or (ch == "#" and not (i > 0 and line[i - 1] in "TUMNtumn"
                                            and line[i + 1:i + 2].isdigit())):
            return line[:i]
    return line


def _assemble_code(code: str) -> tuple[str, int]:
    """(syntax key, word) of one comment-free, non-blank line. Raises _Bad."""
    m = _LINE_RE.match(code)
    if not m:
        raise _Bad(None)
    mn, rest = m[1].upper(), m[2]
    if mn.startswith("BSTART."):
        key = "BSTART"
    elif mn in SYNTAX:
        key = mn
    else:
        raise _Bad(f"unknown mnemonic {m[1]!r}")
    try:
        if key == "B.DATR":
            return key, _asm_datr(rest)
        if key == "B.CATR":
            return key, _asm_catr(rest)
        ops = _split(rest)
        return key, {
            "BSTART": lambda: _asm_bstart(mn, ops),
            "BSTOP": lambda: _asm_bstop(ops),
            "B.DIM": lambda: _asm_dim(ops),
            "B.IOR": lambda: _asm_ior(ops),
            "B.IOT": lambda: _asm_iot(ops),
            "B.IOS": lambda: _asm_ios(ops),
            "B.FPATR": lambda: _asm_fpatr(ops),
            ".WORD": lambda: _asm_word(ops),
        }[key]()
    except _Bad as e:
        e.key = key
        raise


def assemble_line(line: str, lineno: int = 1) -> Optional[int]:
    """The word of one line, or None for a blank/comment line. Raises AsmError."""
    code = _strip_comment(line)
    if not code.strip():
        return None
    try:
        return _assemble_code(code)[1]
    except _Bad as e:
        key = getattr(e, "key", None)
        expected = f"expected `{SYNTAX[key]}`" if key else f"expected {_ANY}"
        msg = f"{e.detail}; {expected}" if e.detail else expected
        raise AsmError(lineno, line.strip(), msg) from None


def assemble(text: str) -> list[int]:
    """Assemble program text (one command per line) into 32-bit words."""
    if not isinstance(text, str):
        raise TypeError(f"assemble() takes program text (str), got {type(text).__name__}")
    words = []
    for n, line in enumerate(text.splitlines(), 1):
        w = assemble_line(line, n)
        if w is not None:
            words.append(w)
    return words


# ---------------------------------------------------------------- disassembly


def _dtype_name(code: int) -> str:
    if code == tables.DTYPE_NONE:
        return "DTYPE_NONE"
    return tables.DTYPE_BY_CODE[code].name


def _iot_text(f: Mapping[str, int], srcs: int, dst: bool) -> str:
    ops = [tables.tile_name(f[f"SrcTile{i}"]) for i in range(srcs)]
    ops.append("mask=" + tables.mask_str(tables.PEMODE_MASK[f["PEMode"]]))
    if f["L"]:
        ops.append("last")
    if dst:
        ops.append(f"->{tables.HANDS[f['DstTile']]}<{f['SizeCode']}>")
    return "B.IOT " + ", ".join(ops)


_IOT_SHAPE = {e.form.form_id: k for k, e in IOT_ENCODING.items()}


def format_command(cmd: Command) -> str:
    """Canonical text of a decoded command (`.word` when it does not decode exactly)."""
    if cmd.fault is not None or cmd.free_bits:
        return f".word 0x{cmd.word:08x}"
    f, mn = cmd.fields, cmd.mnemonic
    if mn.startswith("BSTART."):
        return f"{cmd.name} {_dtype_name(f['DataType'])}"
    if mn == "BSTOP":
        return "BSTOP"
    if mn == "B.DATR":
        return ("B.DATR {" + ", ".join([
            tables.LAYOUT_CODES[f["Layout"]], _dtype_name(f["DataType"]),
            tables.PADVALUES[f["PadValueOrByteId"]], tables.CMODES[f["CMode"]],
            tables.RMODES[f["RMode"]], str(f["Sat"]), str(f["Canonicalize"])]) + "}")
    if mn == "B.DIM":
        lb = _DIM_LB[id(cmd.form)]
        return f"B.DIM {tables.GPR_NAMES[f['RegSrc']]}, {f['uimm17']}, ->LB{lb}"
    if mn == "B.IOR":
        srcs = [f["RegSrc0"], f["RegSrc1"], f["RegSrc2"]]
        while srcs and srcs[-1] == 0:
            srcs.pop()
        ops = [tables.GPR_NAMES[s] for s in srcs]
        if f["RegDst"]:
            ops.append("->" + tables.GPR_NAMES[f["RegDst"]])
        return ("B.IOR " + ", ".join(ops)) if ops else "B.IOR"
    if mn == "B.IOT":
        return _iot_text(f, *_IOT_SHAPE[cmd.form_id])
    if mn == "B.IOS":
        mask = "mask=" + tables.mask_str(tables.PEMODE_MASK[f["PEMode"]])
        if f["SizeCode"] == 0:
            return f"B.IOS S{f['SharedTID']}, {mask}"
        return f"B.IOS {mask}, ->S{f['SharedTID']}<{f['SizeCode']}>"
    if mn == "B.FPATR":
        return "B.FPATR " + ", ".join(str(f[n]) for n in _FPATR_ORDER)
    if mn == "B.CATR":
        return "B.CATR {" + ", ".join(n for n in _CATR_ORDER if f[_CATR_FIELD[n]]) + "}"
    return f".word 0x{cmd.word:08x}"   # a form this printer does not know


def disassemble(words: SupportsIndex | Iterable[SupportsIndex]) -> str:
    """Canonical text of a word or a sequence of words, one command per line."""
    if isinstance(words, (str, bytes)):
        raise TypeError("disassemble() takes command words (ints), not text")
    seq = list(words) if isinstance(words, Iterable) else [words]
    return "\n".join(format_command(decode(check_word(w))) for w in seq)
