"""ptojax.isa.encode: every encoder against pj.asm.assemble of the same command
text over a sweep of field values, and against the hand-typed formulas it
replaced (the generator's and the tests' own) for a few values."""

import itertools
import random

import pytest

import ptojax as pj
from ptojax import tables
from ptojax.isa import encode as E

HANDS = tables.HANDS
MASK = [tables.mask_str(m) for m in tables.PEMODE_MASK]       # PEMode -> mask text


def legal(enc, field):
    """The values of `field` the catalog allows in `enc` (every value when unconstrained)."""
    for name, values in enc.form.constraints:
        if name == field:
            return sorted(values)
    return list(range(1 << enc.form.field(field).width))


def sample(rng, n, *ranges):
    """n random tuples, one value from each range, plus the all-first and all-last ones."""
    out = [tuple(r[0] for r in ranges), tuple(r[-1] for r in ranges)]
    return out + [tuple(rng.choice(r) for r in ranges) for _ in range(n)]


def word(text):
    (w,) = pj.asm.assemble(text)
    return w


def iot_text(srcs, pemode, last, dst=None):
    ops = [str(s) for s in srcs] + [f"mask={MASK[pemode]}"] + (["last"] if last else [])
    if dst is not None:
        ops.append(f"->{HANDS[dst[0]]}<{dst[1]}>")
    return "B.IOT " + ", ".join(ops)


@pytest.fixture
def rng():
    return random.Random(20240611)


def test_words():
    assert E.BSTOP == word("BSTOP")
    assert E.FPATR0 == word("B.FPATR 0")
    assert E.START == {op: word(f"BSTART.{op} FP64") for op, _, _ in tables.OPS}


@pytest.mark.parametrize("op", [op for op, _, _ in tables.OPS])
def test_bstart(op):
    for dt in legal(E.START_ENCODING[op], "DataType"):
        assert E.bstart(op, dt) == word(f"BSTART.{op} {dt}"), (op, dt)


def test_datr(rng):
    enc = E.DATR_ENCODING
    ranges = [legal(enc, "Layout"), legal(enc, "DataType"), range(4), legal(enc, "CMode"), range(8),
              range(2), range(2)]
    for v in sample(rng, 600, *ranges):
        assert E.datr(*v) == word("B.DATR {" + ", ".join(map(str, v)) + "}"), v


def test_dim(rng):
    for n, imm, reg in sample(rng, 600, range(3), range(1 << 17), range(tables.NUM_GPRS)):
        assert E.dim(n, imm, reg) == word(f"B.DIM r{reg}, {imm}, ->LB{n}"), (n, imm, reg)
    assert [E.dim(n, 0x1ABCD) for n in range(3)] == [word(f"B.DIM zero, {0x1ABCD}, ->LB{n}")
                                                      for n in range(3)]


def test_ior(rng):
    gprs = range(tables.NUM_GPRS)
    for v in sample(rng, 600, gprs, gprs, gprs, gprs):
        assert E.ior(*v) == word(f"B.IOR r{v[0]}, r{v[1]}, r{v[2]}, ->r{v[3]}"), v


def test_iot_dst():
    for hand, size, pemode, last in itertools.product(range(4), range(1, 11), range(8), range(2)):
        assert E.iot_dst(hand, size, pemode, last) == word(iot_text([], pemode, last, (hand, size)))


def test_iot_src():
    for src, pemode, last in itertools.product(range(64), range(8), range(2)):
        assert E.iot_src(src, pemode, last) == word(iot_text([src], pemode, last))


def test_iot_src_dst(rng):
    for src, hand, size, pemode, last in sample(rng, 600, range(64), range(4), range(1, 11), range(8),
                                                range(2)):
        assert E.iot_src_dst(src, hand, size, pemode, last) == word(
            iot_text([src], pemode, last, (hand, size)))


def test_iot_src2(rng):
    for s0, s1, pemode, last in sample(rng, 600, range(64), range(64), range(8), range(2)):
        assert E.iot_src2(s0, s1, pemode, last) == word(iot_text([s0, s1], pemode, last))


def test_iot_src2_dst(rng):
    for s0, s1, hand, size, pemode, last in sample(rng, 600, range(64), range(64), range(4),
                                                   range(1, 11), range(8), range(2)):
        assert E.iot_src2_dst(s0, s1, hand, size, pemode, last) == word(
            iot_text([s0, s1], pemode, last, (hand, size)))


def test_ios(rng):
    for sid, pemode, size in sample(rng, 600, range(256), range(8), range(13)):
        text = (f"B.IOS S{sid}, mask={MASK[pemode]}" if size == 0 else
                f"B.IOS mask={MASK[pemode]}, ->S{sid}<{size}>")
        assert E.ios(sid, pemode, size) == word(text), (sid, pemode, size)


def test_fpatr(rng):
    enc = E.FPATR_ENCODING
    names = ("PreQuantMode", "ReluMode", "GroupNCode", "RowMaxEn", "GroupMaxEn", "RowMaxInit",
             "MaxAbsEn", "TransA", "TransB")
    for v in sample(rng, 600, *(legal(enc, n) for n in names)):
        assert E.fpatr(*v) == word("B.FPATR " + ", ".join(map(str, v))), v


def test_catr():
    for trap, dr, atom, aq, rl, far in itertools.product(range(2), repeat=6):
        bits = [n for n, on in (("trap", trap), ("atom", atom), ("aq", aq), ("rl", rl),
                                ("far", far), ("dr", dr)) if on]
        assert E.catr(trap, dr, atom, aq, rl, far) == word("B.CATR {" + ", ".join(bits) + "}")


# the formulas the encoders replaced (the case generator's, tests/test_reference_*.py's)
OLD_FORMULAS = [
    (E.bstart("TLOAD", 4), 0x00011181 | 4 << 27),
    (E.bstart("TSTORE.SPART", 26), 0x00E11181 | 26 << 27),
    (E.bstart("TGEMVMX.ACC", 4), 0x01631181 | 4 << 27),
    (E.datr(22, 31, 1), 0x1023 | 22 << 7 | 31 << 20 | 1 << 27),
    (E.datr(25, 5, 3, 4, 6, 1, 1), 0x1023 | 25 << 7 | 6 << 15 | 5 << 20 | 1 << 25 | 1 << 26 | 3 << 27
     | 4 << 29),
    (E.dim(0, 3), 0x43 | 3 << 20),
    (E.dim(2, 0x1ABCD, 23), 0x43 | 0xBCD << 20 | 0x1A << 7 | 2 << 12 | 23 << 15),
    (E.ior(2, 3, 4, 5), 0x13 | 5 << 7 | 2 << 15 | 3 << 20 | 4 << 27),
    (E.iot_dst(2, 1, 1), 0x6013 | 1 << 9 | 2 << 7 | 1 << 15 | 1 << 19),
    (E.iot_src(63, 4, 0), 0x5013 | 63 << 20 | 4 << 9),
    (E.iot_src_dst(5, 2, 9, 6, 1), 0x5013 | 5 << 20 | 2 << 7 | 9 << 15 | 6 << 9 | 1 << 19),
    (E.iot_src2(7, 63, 7, 1), 0x4013 | 7 << 20 | 63 << 26 | 7 << 9 | 1 << 19),
    (E.iot_src2_dst(0, 1, 2, 1, 7, 1), 0x4013 | 1 << 26 | 2 << 7 | 1 << 15 | 7 << 9 | 1 << 19),
    (E.ios(200, 6, 12), 0x1013 | 6 << 9 | 12 << 15 | 200 << 20),
    (E.fpatr(39, 3, 9, 1, 1, 1, 1, 1, 1), 0x2023 | 1 << 7 | 1 << 8 | 1 << 15 | 1 << 16 | 1 << 17
     | 1 << 18 | 9 << 19 | 3 << 23 | 39 << 26),
    (E.catr(trap=1, dr=1, atom=1, aq=1, rl=1, far=1), 0x23 | 1 << 15 | 1 << 16 | 1 << 17 | 1 << 18
     | 1 << 19 | 1 << 26),
    (E.FPATR0, 0x00002023), (E.BSTOP, 0x00000001),
]


@pytest.mark.parametrize("got, want", OLD_FORMULAS)
def test_old_formulas(got, want):
    assert got == want


@pytest.mark.parametrize("function", [2, 9, 10, 11, 12])
def test_tmov_words_decode(function):
    # BSTART.TMOV (TLSU Function 2) and its Shared forms (9..12): one catalog form
    tload = E.bstart("TLOAD", tables.DTYPE_BY_NAME["U16"].code)
    w = (tload & ~(0x1F << 20)) | (function << 20)
    assert pj.asm.decode(w).fault is None
    assert pj.asm.decode(w).form_id == "bstart_tmov_32_211446509efb"


def test_field_replace_writes_only_its_bits():
    # the mutators rewrite fields through Field.replace (fuzz/gen/values.py)
    from ptojax.isa.forms import ENCODINGS
    rng = random.Random(5)
    for e in ENCODINGS:
        for f in e.form.fields:
            mask = f.insert((1 << f.width) - 1)
            for _ in range(8):
                w, v = rng.getrandbits(32), rng.getrandbits(40)
                out = f.replace(w, v)
                assert f.extract(out) == v & ((1 << f.width) - 1)
                assert out & ~mask == w & ~mask
