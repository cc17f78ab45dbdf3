"""Decoder, assembler and disassembler of the command slice (encoding.md sections 1, 4, 7, 8)."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ptojax.isa.asm as asm
from ptojax import tables
from ptojax.isa import AsmError, Command, assemble, decode, disassemble, forms

ILL = "Fault_IllegalInstruction"
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---------------------------------------------------------------- golden vectors (section 8)

# (word, mnemonic (name incl. variant), source form index, expected fields, fault, canonical text)
GOLDEN = [
    # 8.1 CUBE TLOAD ND2M16
    (0x20011181, "BSTART.TLOAD", 40, {"DataType": 4}, None, "BSTART.TLOAD FP16"),
    (0x09F01B23, "B.DATR", 1, {"Layout": 22, "DataType": 31, "PadValueOrByteId": 1, "CMode": 0,
                               "RMode": 0, "Sat": 0, "Canonicalize": 0}, None,
     "B.DATR {ND2M16, DTYPE_NONE, Max, EQ, Default, 0, 0}"),
    (0x00300043, "B.DIM", 3, {"RegSrc": 0, "uimm17": 3}, None, "B.DIM zero, 3, ->LB0"),
    (0x00201043, "B.DIM", 4, {"RegSrc": 0, "uimm17": 2}, None, "B.DIM zero, 2, ->LB1"),
    (0x0008E313, "B.IOT", 12, {"PEMode": 1, "DstTile": 2, "SizeCode": 1, "L": 1}, None,
     "B.IOT mask=1000, last, ->M<1>"),
    (0x00000001, "BSTOP", 51, {}, None, "BSTOP"),
    # 8.2 MGATHER.CAS
    (0xD8811181, "BSTART.MGATHER.CAS", 23, {"DataType": 27}, None, "BSTART.MGATHER.CAS U8"),
    (0x08001023, "B.DATR", 1, {"Layout": 0, "DataType": 0, "PadValueOrByteId": 1, "CMode": 0,
                               "RMode": 0, "Sat": 0, "Canonicalize": 0}, None,
     "B.DATR {NORM, FP64, Max, EQ, Default, 0, 0}"),
    (0x04004213, "B.IOT", 9, {"SrcTile0": 0, "SrcTile1": 1, "PEMode": 1, "L": 0}, None,
     "B.IOT T#1, T#2, mask=1000"),
    (0x0028D213, "B.IOT", 8, {"SrcTile0": 2, "SizeCode": 1, "DstTile": 0, "PEMode": 1, "L": 1}, None,
     "B.IOT T#3, mask=1000, last, ->T<1>"),
    (0x00010013, "B.IOR", 7, {"RegSrc0": 2, "RegSrc1": 0, "RegSrc2": 0, "RegDst": 0}, None, "B.IOR a0"),
    # 8.3 TMATMULMX
    (0x20431181, "BSTART.TMATMULMX", 44, {"DataType": 4}, None, "BSTART.TMATMULMX FP16"),
    (0x00002023, "B.FPATR", 73, {"PreQuantMode": 0, "ReluMode": 0, "GroupNCode": 0, "RowMaxEn": 0,
                                 "GroupMaxEn": 0, "RowMaxInit": 0, "MaxAbsEn": 0, "TransA": 0,
                                 "TransB": 0, "Func": 2, "Opc1": 2, "Opcode": 1, "W": 1}, None,
     "B.FPATR 0, 0, 0, 0, 0, 0, 0, 0, 0"),
    (0x0408CF13, "B.IOT", 10, {"SrcTile0": 0, "SrcTile1": 1, "PEMode": 7, "DstTile": 2,
                               "SizeCode": 1, "L": 1}, None, "B.IOT T#1, T#2, mask=1111, last, ->M<1>"),
    # 8.4 CUBE TSTORE
    (0x20111181, "BSTART.TSTORE", 50, {"DataType": 4}, None, "BSTART.TSTORE FP16"),
    (0x19F01CA3, "B.DATR", 1, {"Layout": 25, "DataType": 31, "PadValueOrByteId": 3, "CMode": 0,
                               "RMode": 0, "Sat": 0, "Canonicalize": 0}, None,
     "B.DATR {M162ND, DTYPE_NONE, Null, EQ, Default, 0, 0}"),
    (0x00085813, "B.IOT", 11, {"SrcTile0": 0, "PEMode": 4, "L": 1}, None, "B.IOT T#1, mask=0001, last"),
    # 8.5 single-word vectors
    (0xC8011181, "BSTART.TLOAD", 40, {"DataType": 25}, None, "BSTART.TLOAD U32"),
    (0x0008EE13, "B.IOT", 12, {"PEMode": 7, "DstTile": 0, "SizeCode": 1, "L": 1}, None,
     "B.IOT mask=1111, last, ->T<1>"),
    (0x00310013, "B.IOR", 7, {"RegSrc0": 2, "RegSrc1": 3, "RegSrc2": 0, "RegDst": 0}, None, "B.IOR a0, a1"),
    (0x007B8043, "B.DIM", 3, {"RegSrc": 23, "uimm17": 7}, None, "B.DIM x3, 7, ->LB0"),
    (0x007C0043, "B.DIM", 3, {"RegSrc": 24, "uimm17": 7}, ILL, None),
    (0x001B8043, "B.DIM", 3, {"RegSrc": 23, "uimm17": 1}, None, "B.DIM x3, 1, ->LB0"),
    (0x000DD213, "B.IOT", 8, {"SizeCode": 11}, ILL, None),
    (0x00901E13, "B.IOS", 52, {"SharedTID": 9, "SizeCode": 0, "PEMode": 7}, None, "B.IOS S9, mask=1111"),
    (0x01F01023, "B.DATR", 1, {"Layout": 0, "DataType": 31, "PadValueOrByteId": 0, "CMode": 0,
                               "RMode": 0, "Sat": 0, "Canonicalize": 0}, None,
     "B.DATR {NORM, DTYPE_NONE, Zero, EQ, Default, 0, 0}"),
    (0x00002223, "", None, {}, ILL, None),
    (0x00002423, "", None, {}, ILL, None),
    (0x20231181, "BSTART.TMATMUL.ACC", 42, {"DataType": 4}, None, "BSTART.TMATMUL.ACC FP16"),
    (0x0010D293, "B.IOT", 8, {"SrcTile0": 1, "DstTile": 1, "SizeCode": 1, "PEMode": 1, "L": 0}, None,
     "B.IOT T#2, mask=1000, ->U<1>"),
    (0x0C284213, "B.IOT", 9, {"SrcTile0": 2, "SrcTile1": 3, "PEMode": 1, "L": 1}, None,
     "B.IOT T#3, T#4, mask=1000, last"),
    # section 4.1: the TSTORE.SPART encoding variant (hand-encoded)
    (0x20E11181, "BSTART.TSTORE.SPART", 50, {"DataType": 4}, None, "BSTART.TSTORE.SPART FP16"),
]


@pytest.mark.parametrize("word,name,index,fields,fault,text", GOLDEN, ids=[f"{g[0]:#010x}" for g in GOLDEN])
def test_golden_decode(word, name, index, fields, fault, text):
    c = decode(word)
    assert isinstance(c, Command) and c.word == word
    assert c.fault == fault
    assert c.name == name and c.form_index == index
    assert isinstance(c.fields, dict)
    for k, v in fields.items():
        assert c.fields[k] == v, k
    if name == "":
        assert c.mnemonic == "" and c.form_id == "" and c.fields == {}
    else:
        assert set(c.fields) == {f.name for f in forms.FORMS_BY_ID[c.form_id].fields}
    expect_text = text if text is not None else f".word 0x{word:08x}"
    assert disassemble([word]) == expect_text
    assert assemble(expect_text) == [word]


def test_golden_program_round_trip():
    words = [g[0] for g in GOLDEN]
    text = disassemble(words)
    assert len(text.splitlines()) == len(words)
    assert assemble(text) == words


def test_variant_and_spec_spellings():
    assert decode(0x20E11181).variant == "TSTORE.SPART"
    assert decode(0x20E11181).mnemonic == "BSTART.TSTORE"
    assert decode(0x20111181).variant == ""
    # spellings quoted in encoding.md sections 7 and 8
    assert assemble("B.DIM zero,3,->LB0") == [0x00300043]
    assert assemble("B.DATR {NORM, DTYPE_NONE, Zero, EQ, default, 0, 0}") == [0x01F01023]
    assert assemble("B.IOT T#1, T#2, mask=1111, <last>, ->M<1>") == [0x0408CF13]
    assert assemble("B.IOS mask=1111, ->S255<0001>") == assemble("B.IOS mask=1111, ->S255<1>")
    assert assemble("B.IOT 0, 1, mask=1000") == [0x04004213]                 # plain TileIndex
    assert assemble("b.iot t#2, MASK=1000, ->u<1>") == [0x0010D293]          # case-insensitive


# ---------------------------------------------------------------- reserved values


def _bstart_word(dt):
    return 0x00011181 | dt << 27


@pytest.mark.parametrize("dt", range(32))
def test_bstart_datatype_reserved(dt):
    reserved = dt in (15, 21, 22, 23, 29, 30, 31)
    for match in (0x00011181, 0x00031181, 0x00E11181, 0x01631181):
        c = decode(match | dt << 27)
        assert c.mnemonic.startswith("BSTART.")
        assert (c.fault == ILL) == reserved
    if reserved:
        with pytest.raises(AsmError, match="line 1"):
            assemble(f"BSTART.TLOAD {dt}")
    else:
        assert assemble(f"BSTART.TLOAD {tables.DTYPE_BY_CODE[dt].name.lower()}") == [_bstart_word(dt)]


def _datr(layout=0, dt=0, pad=0, cmode=0, rmode=0, sat=0, canon=0):
    return (0x00001023 | layout << 7 | rmode << 15 | dt << 20 | canon << 25 | sat << 26
            | pad << 27 | cmode << 29)


def test_datr_reserved_values():
    for lay in range(32):
        assert (decode(_datr(layout=lay)).fault == ILL) == (lay not in tables.LAYOUT_CODES)
    for dt in range(32):
        reserved = dt in (15, 21, 22, 23, 29, 30)
        assert (decode(_datr(dt=dt)).fault == ILL) == reserved
    assert decode(_datr(layout=2)).fault == ILL
    assert decode(_datr(cmode=6)).fault == ILL and decode(_datr(cmode=7)).fault == ILL
    assert decode(_datr(cmode=5)).fault is None
    assert decode(_datr() | 1 << 18).fault == ILL and decode(_datr() | 1 << 18).mnemonic == ""
    for bad in ("B.DATR {2}", "B.DATR {NORM, FP64, Zero, 6}", "B.DATR {NORM, 21}", "B.DATR {NORM, 0, 4}"):
        with pytest.raises(AsmError):
            assemble(bad)


def test_gpr_24_reserved():
    assert decode(0x007C0043).fault == ILL                        # B.DIM RegSrc 24
    for sh in (7, 15, 20, 27):                                    # B.IOR RegDst/Src0/Src1/Src2
        for r in (24, 31):
            c = decode(0x00000013 | r << sh)
            assert c.mnemonic == "B.IOR" and c.fault == ILL
        assert decode(0x00000013 | 23 << sh).fault is None
    for bad in ("B.DIM r24, 0, ->LB0", "B.IOR a0, r24", "B.IOR ->r31", "B.IOR x4"):
        with pytest.raises(AsmError):
            assemble(bad)


def test_iot_ios_sizecode_reserved():
    for form_match, _base in ((0x00006013, 0), (0x00005013, 0), (0x00004013, 0)):
        for size in range(16):
            c = decode(form_match | size << 15 | 7 << 9)
            if size == 0:
                assert c.form_index in (9, 11, 12)
                assert (c.fault == ILL) == (c.form_index == 12)   # dst-only form needs a size
            else:
                assert c.form_index in (8, 10, 12)
                assert (c.fault == ILL) == (size > 10)
    assert decode(0x000DD213).fault == ILL                        # SizeCode 11, form 8
    for size in range(16):
        c = decode(0x00001013 | size << 15 | 7 << 9)
        assert c.mnemonic == "B.IOS" and (c.fault == ILL) == (size > 12)
    for bad in ("B.IOT mask=1111, ->T<11>", "B.IOT T#1, mask=1111, ->T<0>",
                "B.IOS mask=1111, ->S1<13>", "B.IOS mask=1111, ->S1<0>"):
        with pytest.raises(AsmError):
            assemble(bad)


def _fpatr(pq=0, relu=0, gn=0, rmax=0, gmax=0, rinit=0, maxabs=0, ta=0, tb=0):
    return (0x00002023 | ta << 7 | tb << 8 | maxabs << 15 | rinit << 16 | gmax << 17 | rmax << 18
            | gn << 19 | relu << 23 | pq << 26)


def test_fpatr_reserved():
    legal_pq = {0, 1, 2, 3, 4, 5, 12, 13, 16, 17, 18, 19, 20, 23, 24, 25, 26, 27, 28} | set(range(32, 40))
    for pq in range(64):
        assert (decode(_fpatr(pq=pq)).fault == ILL) == (pq not in legal_pq)
    for relu in range(8):
        assert (decode(_fpatr(relu=relu)).fault == ILL) == (relu > 3)
    for gn in range(16):
        assert (decode(_fpatr(gn=gn)).fault == ILL) == (gn > 9)
    for bit in (9, 10, 11, 12, 14):                                # Reserved, ElementWiseEn, Func
        c = decode(0x00002023 ^ 1 << bit)
        assert c.fault == ILL and c.mnemonic == ""
    assert decode(0x00002023 ^ 1 << 13).mnemonic == "B.CATR"       # Func 000 is another command
    assert decode(_fpatr(pq=39, relu=3, gn=9, rmax=1, gmax=1, rinit=1, maxabs=1, ta=1, tb=1)).fault is None
    for bad in ("B.FPATR 6", "B.FPATR 0, 4", "B.FPATR 0, 0, 10", "B.FPATR 0, 0, 0, 0, 0, 0, 0, 0, 2",
                "B.FPATR 0, 0, 0, 0, 0, 0, 0, 0, 0, 0"):
        with pytest.raises(AsmError):
            assemble(bad)


def test_no_form_matches():
    for w in (0, 0xFFFFFFFF, 0x00000003, 0x00003043, 0x00007013, 0x00003023, 0x00000181, 0x10000001):
        c = decode(w)
        assert c.fault == ILL and c.mnemonic == "" and c.variant == "" and c.form_index is None
        assert disassemble(w) == f".word 0x{w:08x}"


def test_decode_argument_checks():
    for bad in (-1, 1 << 32, 1 << 40):
        with pytest.raises(ValueError):
            decode(bad)
    for bad in (1.0, "1", None, True, [1]):
        with pytest.raises(TypeError):
            decode(bad)
    with pytest.raises(ValueError):
        disassemble([1, 1 << 32])
    with pytest.raises(TypeError):
        disassemble("BSTOP")
    with pytest.raises(TypeError):
        assemble(b"BSTOP")


def test_iot_undefined_bits_8_7():
    # forms 9 and 11 ignore [8:7]: decode ignores them, the text spells them as .word
    for base in (0x04004213, 0x00085813):
        for b in (1, 2, 3):
            w = base | b << 7
            c = decode(w)
            assert c.fault is None and c.form_index == decode(base).form_index
            assert c.free_bits == b << 7
            assert {k: v for k, v in c.fields.items()} == dict(decode(base).fields)
            assert disassemble(w) == f".word 0x{w:08x}"
            assert assemble(disassemble(w)) == [w]
        assert decode(base).free_bits == 0


def test_comments_blank_lines_and_case():
    text = """
    # a program
    bstart.tload fp16     ; start
    B.DATR {nd2m16, dtype_none, MAX}   # short form
    b.dim ZERO, 0x3, ->lb0
    B.DIM zero, 2, ->LB1
    B.IOT mask=1000, <LAST>, ->m<1>

    BSTOP
    """
    assert assemble(text) == [0x20011181, 0x09F01B23, 0x00300043, 0x00201043, 0x0008E313, 0x00000001]


def test_short_forms_and_ior_spellings():
    assert assemble("B.DATR {NORM}") == [0x00001023]
    assert assemble("B.DATR NORM, DTYPE_NONE") == [_datr(dt=31)]
    assert assemble("B.DATR {22, 31, 1}") == [0x09F01B23]
    assert assemble("B.FPATR 39, 3") == [_fpatr(pq=39, relu=3)]
    assert assemble("B.IOR") == [0x00000013]
    assert assemble("B.IOR zero, zero, zero, ->zero") == [0x00000013]
    assert assemble("B.IOR a0, a1, a2, ->s0") == [0x13 | 11 << 7 | 2 << 15 | 3 << 20 | 4 << 27]
    assert disassemble(assemble("B.IOR zero, zero, a2")) == "B.IOR zero, zero, a2"
    assert disassemble(assemble("B.IOR r11, ->r2")) == "B.IOR s0, ->a0"
    assert disassemble(assemble("B.IOR ->s8")) == "B.IOR ->s8"
    assert disassemble(0x13) == "B.IOR"
    assert assemble("B.CATR {}") == [0x00000023]
    assert disassemble(assemble("B.CATR {aqrl, atomic}")) == "B.CATR {atom, aq, rl}"
    assert assemble("B.CATR {trap, atom, aq, rl, far, dr}") == [0x00000023 | 0x1F << 15 | 1 << 26]


# ---------------------------------------------------------------- malformed text

MALFORMED = [
    ("B.DIM a0, ->LB0", "B.DIM <gpr>, <uimm17>, -><LB0|LB1|LB2>"),
    ("B.DIM a0, 131072, ->LB0", "131072"),
    ("B.DIM a0, 16, ->LB3", "LB3"),
    ("B.DIM q7, 16, ->LB0", "q7"),
    ("BSTART.TLOAD", "BSTART"),
    ("BSTART.TLOAD FP17", "FP17"),
    ("BSTART.TLOAD DTYPE_NONE", "DTYPE_NONE"),
    ("BSTART.TCOPY FP16", "TCOPY"),
    ("B.DATR {NORM, FP64, Zero, EQ, Default, 0, 0, 0}", "B.DATR"),
    ("B.DATR {NORM, FP64, Zero, EQ, Default, 2}", "Sat"),
    ("B.DATR {NORM, FP64", "brace"),
    ("B.IOT T#1, mask=0011", "0011"),
    ("B.IOT T#1, mask=111", "mask"),
    ("B.IOT T#1", "mask"),
    ("B.IOT T#1, T#2, T#3, mask=1111", "two"),
    ("B.IOT mask=1111", "B.IOT"),
    ("B.IOT T#0, mask=1111", "T#0"),
    ("B.IOT 64, mask=1111", "64"),
    ("B.IOT mask=1111, T#1", "after"),
    ("B.IOT mask=1111, ->X<1>", "->X<1>"),
    ("B.IOT mask=1111, last, last, ->T<1>", "last"),
    ("B.IOS mask=1111", "B.IOS"),
    ("B.IOS S7, mask=1111, ->S8<1>", "S"),
    ("B.IOS S256, mask=1111", "256"),
    ("B.IOR a0, a1, a2, a3", "B.IOR"),
    ("B.IOR ->a0, a1", "last"),
    ("B.FPATR", "B.FPATR"),
    ("B.FPATR x", "x"),
    ("B.CATR {trap, trap}", "twice"),
    ("B.CATR {sync}", "sync"),
    ("BSTOP 0", "BSTOP"),
    (".word", ".word"),
    (".word 0x1_0000_0000", ".word"),
    (".word -1", ".word"),
    ("HALT", "HALT"),
    ("B.DIM a0, 1,, ->LB0", "empty"),
    ("123", "command"),
]


@pytest.mark.parametrize("line,hint", MALFORMED)
def test_malformed_line_raises(line, hint):
    text = "BSTART.TLOAD FP16\n\n# comment\n" + line + "\nBSTOP\n"
    with pytest.raises(AsmError) as ei:
        assemble(text)
    e = ei.value
    assert isinstance(e, ValueError)
    assert e.lineno == 4 and e.line == line
    msg = str(e)
    assert msg.startswith(f"line 4: {line!r}: ")
    assert "expected" in msg
    assert hint.lower() in msg.lower()


def test_error_message_format_example():
    with pytest.raises(AsmError) as ei:
        assemble("BSTART.TLOAD FP16\nB.DATR {ND2M16}\nB.DIM a0, ->LB0\n")
    assert str(ei.value).startswith("line 3: 'B.DIM a0, ->LB0': ")
    assert "expected `B.DIM <gpr>, <uimm17>, -><LB0|LB1|LB2>`" in str(ei.value)


# ---------------------------------------------------------------- property tests

words32 = st.integers(0, 0xFFFFFFFF)


@st.composite
def near_form_words(draw):
    """A word that matches a random encoding's fixed bits (fields and free bits random)."""
    e = draw(st.sampled_from(forms.ENCODINGS))
    return e.match | (draw(words32) & ~e.mask & 0xFFFFFFFF)


@SETTINGS
@given(st.one_of(words32, near_form_words()))
def test_any_word_round_trips(w):
    c = decode(w)
    assert c.fault in (None, ILL)
    text = disassemble([w])
    assert "\n" not in text
    assert assemble(text) == [w]
    if c.fault is None and not c.free_bits:
        assert not text.startswith(".word")


@SETTINGS
@given(st.lists(st.one_of(words32, near_form_words()), max_size=12))
def test_word_lists_round_trip(ws):
    assert assemble(disassemble(ws)) == ws


def _case(draw, s):
    return draw(st.sampled_from([s, s.lower(), s.upper()]))


def _num_text(draw, v):
    return draw(st.sampled_from([str(v), hex(v)]))


_BSTART_NAMES = sorted(asm._BSTART)
_OK_DT = [d.code for d in tables.DATATYPES]
_OK_LAYOUT = sorted(tables.LAYOUT_CODES)
_OK_PQ = [0, 1, 2, 3, 4, 5, 12, 13, 16, 17, 18, 19, 20, 23, 24, 25, 26, 27, 28] + list(range(32, 40))


@st.composite
def command_text(draw):
    """(text, expected mnemonic name, expected fields) of one random valid command."""
    kind = draw(st.sampled_from(["BSTART", "BSTOP", "B.DATR", "B.DIM", "B.IOR", "B.IOT", "B.IOS",
                                 "B.FPATR", "B.CATR"]))
    if kind == "BSTART":
        name = draw(st.sampled_from(_BSTART_NAMES))
        dt = draw(st.sampled_from(_OK_DT))
        spell = _case(draw, tables.DTYPE_BY_CODE[dt].name) if draw(st.booleans()) else _num_text(draw, dt)
        return f"{_case(draw, name)} {spell}", name, {"DataType": dt}
    if kind == "BSTOP":
        return _case(draw, "BSTOP"), "BSTOP", {}
    if kind == "B.DATR":
        v = [draw(st.sampled_from(_OK_LAYOUT)), draw(st.sampled_from(_OK_DT + [31])),
             draw(st.integers(0, 3)), draw(st.integers(0, 5)), draw(st.integers(0, 7)),
             draw(st.integers(0, 1)), draw(st.integers(0, 1))]
        n = draw(st.integers(1, 7))
        v[n:] = [0] * (7 - n)
        names = [tables.LAYOUT_CODES, {**{d.code: d.name for d in tables.DATATYPES}, 31: "DTYPE_NONE"},
                 dict(enumerate(tables.PADVALUES)), dict(enumerate(tables.CMODES)),
                 dict(enumerate(tables.RMODES))]
        parts = [(_case(draw, names[i][x]) if i < 5 and draw(st.booleans()) else _num_text(draw, x))
                 for i, x in enumerate(v[:n])]
        body = ", ".join(parts)
        text = f"B.DATR {{{body}}}" if draw(st.booleans()) else f"b.datr {body}"
        keys = ("Layout", "DataType", "PadValueOrByteId", "CMode", "RMode", "Sat", "Canonicalize")
        return text, "B.DATR", dict(zip(keys, v))
    if kind == "B.DIM":
        r, imm, lb = draw(st.integers(0, 23)), draw(st.integers(0, (1 << 17) - 1)), draw(st.integers(0, 2))
        reg = _case(draw, tables.GPR_NAMES[r]) if draw(st.booleans()) else f"r{r}"
        return f"B.DIM {reg}, {_num_text(draw, imm)}, ->LB{lb}", f"B.DIM{lb}", {"RegSrc": r, "uimm17": imm}
    if kind == "B.IOR":
        n = draw(st.integers(0, 3))
        srcs = [draw(st.integers(0, 23)) for _ in range(n)]
        dst = draw(st.integers(0, 23)) if draw(st.booleans()) else 0
        ops = [tables.GPR_NAMES[s] for s in srcs] + ([f"->{tables.GPR_NAMES[dst]}"] if dst or draw(st.booleans()) else [])
        full = srcs + [0] * (3 - n)
        return ("B.IOR " + ", ".join(ops)).strip(), "B.IOR", {
            "RegSrc0": full[0], "RegSrc1": full[1], "RegSrc2": full[2], "RegDst": dst}
    if kind == "B.IOT":
        nsrc = draw(st.integers(0, 2))
        has_dst = True if nsrc == 0 else draw(st.booleans())
        srcs = [draw(st.integers(0, 63)) for _ in range(nsrc)]
        pe, last = draw(st.integers(0, 7)), draw(st.integers(0, 1))
        ops = [tables.tile_name(s) if draw(st.booleans()) else str(s) for s in srcs]
        ops.append("mask=" + tables.mask_str(tables.PEMODE_MASK[pe]))
        if last:
            ops.append(draw(st.sampled_from(["last", "<last>", "LAST"])))
        fields = {"PEMode": pe, "L": last}
        fields.update({f"SrcTile{i}": s for i, s in enumerate(srcs)})
        if has_dst:
            hand, size = draw(st.integers(0, 3)), draw(st.integers(1, 10))
            ops.append(f"->{_case(draw, tables.HANDS[hand])}<{size}>")
            fields.update(DstTile=hand, SizeCode=size)
        return "B.IOT " + ", ".join(ops), f"B.IOT{nsrc}{int(has_dst)}", fields
    if kind == "B.IOS":
        tid, pe = draw(st.integers(0, 255)), draw(st.integers(0, 7))
        mask = "mask=" + tables.mask_str(tables.PEMODE_MASK[pe])
        if draw(st.booleans()):
            return f"B.IOS S{tid}, {mask}", "B.IOS", {"SharedTID": tid, "SizeCode": 0, "PEMode": pe}
        size = draw(st.integers(1, 12))
        return f"B.IOS {mask}, ->S{tid}<{size}>", "B.IOS", {"SharedTID": tid, "SizeCode": size, "PEMode": pe}
    if kind == "B.FPATR":
        v = [draw(st.sampled_from(_OK_PQ)), draw(st.integers(0, 3)), draw(st.integers(0, 9))]
        v += [draw(st.integers(0, 1)) for _ in range(6)]
        n = draw(st.integers(1, 9))
        v[n:] = [0] * (9 - n)
        return "B.FPATR " + ", ".join(_num_text(draw, x) for x in v[:n]), "B.FPATR", dict(zip(asm._FPATR_ORDER, v))
    bits = {n: draw(st.integers(0, 1)) for n in ("trap", "atom", "aq", "rl", "far", "dr")}
    names = [n for n, b in bits.items() if b]
    names = draw(st.permutations(names))
    return "B.CATR {" + ", ".join(names) + "}", "B.CATR", {
        "trap": bits["trap"], "atom": bits["atom"], "aq": bits["aq"], "rl": bits["rl"],
        "far": bits["far"], "DR": bits["dr"]}


def _shape_name(c: Command) -> str:
    if c.mnemonic == "B.DIM":
        return f"B.DIM{(c.word >> 12) & 7}"
    if c.mnemonic == "B.IOT":
        return {8: "B.IOT11", 9: "B.IOT20", 10: "B.IOT21", 11: "B.IOT10", 12: "B.IOT01"}[c.form_index]
    return c.name


@SETTINGS
@given(st.lists(command_text(), min_size=1, max_size=8))
def test_random_command_texts_round_trip(cmds):
    text = "\n".join(t for t, _, _ in cmds)
    words = assemble(text)
    assert len(words) == len(cmds)
    for w, (t, name, fields) in zip(words, cmds):
        c = decode(w)
        assert c.fault is None and c.free_bits == 0, t
        assert _shape_name(c) == name, t
        for k, v in fields.items():
            assert c.fields[k] == v, (t, k)
    canon = disassemble(words)
    assert assemble(canon) == words
    assert disassemble(assemble(canon)) == canon


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(command_text(), max_size=6), st.integers(0, 6),
       st.sampled_from([m[0] for m in MALFORMED]), st.sampled_from(["", "   ", "\t"]))
def test_malformed_line_is_named(cmds, pos, bad, indent):
    lines = [t for t, _, _ in cmds]
    pos = min(pos, len(lines))
    lines.insert(pos, indent + bad)
    with pytest.raises(AsmError) as ei:
        assemble("\n".join(lines))
    assert ei.value.lineno == pos + 1
    assert str(ei.value).startswith(f"line {pos + 1}: {bad!r}: ")


def test_package_exports():
    import ptojax.isa as isa
    assert isa.asm is asm and isa.assemble is asm.assemble and isa.disassemble is asm.disassemble
    assert isa.AsmError is asm.AsmError and issubclass(AsmError, ValueError)
    assert isa.forms is forms and callable(isa.decode)
    assert re.fullmatch(r"\.word 0x[0-9a-f]{8}", disassemble(0xFFFFFFFF))
