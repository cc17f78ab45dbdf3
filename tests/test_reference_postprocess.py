"""The reference model's B.FPATR element arithmetic (reference/postprocess.py)
on the vectors of the spec's own tests (tests/asl/block/attributes/B.FPATR/
block-exec-b-fpatr-*.asl at e599a3d), plus the parameter carriers, the
encodings' rounding corners and the reductions. Bundle-level post-processing
(ordered checks, D / RowMax / GroupMax publication) is in
test_reference_matmul.py, which also runs on the JAX executor."""

from fractions import Fraction

import pytest

from ptojax.reference import postprocess as pp

RNE = pp.Control("RNE", False)
RNE_SAT = pp.Control("RNE", True)
MASK64 = (1 << 64) - 1


def fp19(fp32_bits):
    """FP32ToFP19 of an exactly representable value (no rounding needed here)."""
    assert fp32_bits & 0x1FFF == 0
    return fp32_bits >> 13


def quant(fp32_scale, offset=0, width=0):
    """MatrixQuantParameter: FP19 scale in bits 31:13, the offset from bit 37."""
    word = fp19(fp32_scale) << 13
    if width:
        word |= (offset & ((1 << width) - 1)) << 37
    return word


ONE, TWO, HALF = 0x3F800000, 0x40000000, 0x3F000000


def post(word, mode, out=None, q=0, relu=0, relu_param=0, control=RNE, acc="FP32"):
    got, _ = pp.post_process(word, mode, relu, acc, q, relu_param, control)
    if out is not None:
        assert pp.output_type(mode, acc) == out
    return got


# ----------------------------------------------------------------- the spec's vectors


def test_quant_002():
    assert post(3, 3, "S8", quant(TWO, -1, 9), acc="S32") == 5
    assert post(70, 3, "S8", quant(TWO, 0, 9), acc="S32") == 0xFFFFFFFFFFFFFF8C    # 140 wraps
    assert post(70, 3, "S8", quant(TWO, 0, 9), control=RNE_SAT, acc="S32") == 127
    assert post(0xFFFFFFFFFFFFFFDF, 13, "S16", 0, acc="S32") == 0xFFFFFFFFFFFFFFEF   # -33 >> 1
    assert post(0x7FFFFFFF, 13, "S16", 0, control=RNE_SAT, acc="S32") == 0x7FFF


def test_activation_004():
    q = quant(ONE, 0, 9)
    assert post(0xC0000000, 24, "S8", q, relu=1) == 0                           # ReLU(-2)
    assert post(0xC0800000, 24, "S8", q, relu=2, relu_param=fp19(HALF)) == MASK64 - 1
    assert post(0xC0800000, 24, "S8", q, relu=3, relu_param=fp19(HALF)) == MASK64 - 1


def test_zero_affine_009():
    assert post(0, 24, "S8", quant(ONE, 5, 9)) == 5
    assert post(0x80000000, 24, "S8", quant(ONE, 5, 9)) == 5
    assert post(0, 24, "S8", quant(ONE, -5, 9)) == 0xFFFFFFFFFFFFFFFB
    assert post(0x80000000, 24, "S8", quant(ONE, 0, 9)) == 0


def test_formats_003():
    x = 0x3FC00000                                                             # 1.5
    assert post(x, 1, "FP16") == 0x3E00
    assert post(x, 16, "BF16") == 0x3FC0
    assert post(x, 26, "E4M3", quant(ONE)) == 0x3C
    assert post(x, 25, "HiF8", quant(ONE)) == 0x0C
    assert post(x, 27, "FP32", quant(HALF)) == 0x3F400000


def test_special_005():
    q9, q0 = quant(ONE, 0, 9), quant(ONE)
    for word in (0x7FC00000, 0x7F800000, 0xFF800000):       # NaN, +Inf, -Inf -> S8 minimum
        assert post(word, 24, "S8", q9) == 0xFFFFFFFFFFFFFF80
    assert post(0x7FC00000, 24, "S8", q9, control=RNE_SAT) == 0
    assert post(0x7F800000, 24, "S8", q9, control=RNE_SAT) == 127
    assert post(0x7FC00000, 26, "E4M3", q0) == 0x7F
    assert post(0x7FC00000, 32, "FP16", q0, control=RNE_SAT) == 0
    assert post(0x7F800001, 32, "FP16", q0, control=RNE_SAT) == 0
    assert post(0x7F800000, 32, "FP16", q0, control=RNE_SAT) == 0x7BFF
    assert post(0x7FC00000, 32, "FP16", q0) == 0x7E00
    assert post(0x7FC00000, 25, "HiF8", q0) == 0x80


ALL_MODES = [  # (mode, source, output, parameter, expected) of all-modes-007
    (0, ONE, "FP32", 0, ONE), (1, ONE, "FP16", 0, 0x3C00), (2, 1, "S8", 9, 1), (3, 1, "S8", 9, 1),
    (4, 1, "FP16", 0, 0x3C00), (5, 1, "FP16", 0, 0x3C00), (12, 2, "S16", None, 1),
    (13, 2, "S16", None, 1), (16, ONE, "BF16", 0, 0x3F80), (17, 1, "S4X2", 5, 1),
    (18, 1, "S4X2", 5, 1), (19, 1, "S16", 17, 1), (20, 1, "S16", 17, 1), (23, ONE, "S8", 9, 1),
    (24, ONE, "S8", 9, 1), (25, ONE, "HiF8", 0, 0x08), (26, ONE, "E4M3", 0, 0x38),
    (27, ONE, "FP32", 0, ONE), (28, ONE, "HiF8", 0, 0x08), (32, ONE, "FP16", 0, 0x3C00),
    (33, ONE, "FP16", 0, 0x3C00), (34, ONE, "BF16", 0, 0x3F80), (35, 1, "BF16", 0, 0x3F80),
    (36, ONE, "BF16", 0, 0x3F80), (37, ONE, "E4M3", 0, 0x38), (38, ONE, "FP32", 0, ONE),
    (39, 1, "BF16", 0, 0x3F80)]


@pytest.mark.parametrize("mode, source, out, width, expected", ALL_MODES)
def test_all_modes_007(mode, source, out, width, expected):
    q = 0 if width is None else quant(ONE, 0, width)
    if mode in (1, 16):
        q = 1                                    # a mode without parameters: Zeros + 1, unread
    acc = "S32" if mode in pp.S32_MODES else "FP32"
    assert post(source, mode, out, q, acc=acc) == expected


def test_rounding_008():
    one = lambda w: quant(ONE, 1, w)
    assert post(300, 3, "S8", one(9), acc="S32") == 0          # S9 saturates 255, +1 wraps
    assert post(20, 17, "S4X2", one(5), acc="S32") == 0        # S5 saturates 15, +1 wraps
    assert post(70000, 19, "S16", one(17), acc="S32") == 0     # S17 saturates 65535, +1 wraps
    assert post(0x7FFFFFFF, 13, "S16", 0, acc="S32") == 0x7FFF


# ----------------------------------------------------------------- parameters


@pytest.mark.parametrize("mode, word, legal", [
    (3, quant(ONE, -1, 9), True), (3, quant(ONE) | 1, False),        # bits 12:0 reserved
    (3, quant(ONE) | 1 << 32, False), (3, quant(ONE) | 1 << 46, False),
    (17, quant(ONE, 3, 5), True), (17, quant(ONE) | 1 << 42, False),
    (19, quant(ONE, -7, 17), True), (19, quant(ONE) | 1 << 54, False),
    (13, 15 << 32, True), (13, 1 << 36, False), (13, 1, False),
    (24, quant(0x80000000 | ONE), False),                            # negative scale
    (24, 0, False),                                                  # zero scale
    (24, 0x7F800000 >> 13 << 13, False),                             # infinite scale
    (24, 1 << 13, False),                                            # subnormal scale
    (27, quant(ONE), True), (27, quant(ONE) | 1 << 40, False)])
def test_quant_parameter_word(mode, word, legal):
    assert pp.quant_parameter_legal(mode, word) == legal


@pytest.mark.parametrize("word, legal", [(0, True), (fp19(HALF), True), (1, False),
                                         (fp19(HALF) | 1 << 18, False), (1 << 19, False),
                                         (0x7F800000 >> 13, False)])
def test_relu_parameter_word(word, legal):
    assert pp.relu_parameter_legal(word) == legal


# ----------------------------------------------------------------- rounding and encodings


@pytest.mark.parametrize("rounding, values", [
    ("RNE", {Fraction(5, 2): 2, Fraction(7, 2): 4, Fraction(-5, 2): -2}),
    ("RNA", {Fraction(5, 2): 3, Fraction(-5, 2): -3}),
    ("RTO", {Fraction(5, 2): 3, Fraction(3, 2): 1, Fraction(-5, 2): -3, Fraction(4): 4}),
    ("RHB", {Fraction(5, 2): 3, Fraction(-5, 2): -2}),
    ("RTZ", {Fraction(-5, 2): -2}), ("RTP", {Fraction(-5, 2): -2}), ("RTM", {Fraction(5, 2): 2})])
def test_to_integer(rounding, values):
    for v, want in values.items():
        assert pp.to_integer(v, rounding) == want


def test_fp16_overflow_subnormal_and_carry():
    c = RNE
    assert pp.encode_float(Fraction(65520), "FP16", c)[0] == 0x7C00          # rounds past max
    assert pp.encode_float(Fraction(65520), "FP16", RNE_SAT)[0] == 0x7BFF
    assert pp.encode_float(Fraction(1 << 16), "FP16", pp.Control("RTZ", False))[0] == 0x7C00
    assert pp.encode_float(Fraction(1, 1 << 24), "FP16", c)[0] == 0x0001       # smallest subnormal
    assert pp.encode_float(Fraction(-1, 1 << 26), "FP16", c)[0] == 0x8000      # underflow keeps -
    assert pp.encode_float(Fraction(2047, 1024), "FP16", c)[0] == 0x3FFF
    assert pp.encode_float(Fraction(4095, 2048), "FP16", c)[0] == 0x4000       # carry
    assert pp.encode_float(Fraction(-3, 1 << 25), "FP16", pp.Control("RHB", False))[0] == 0x8001


def test_fp8_search_rules():
    # E4M3 between 1.0 (0x38) and 1.125 (0x39): the midpoint
    mid = Fraction(17, 16)
    assert pp.encode_fp8(mid, "E4M3", RNE)[0] == 0x38
    assert pp.encode_fp8(mid, "E4M3", pp.Control("RNA", False))[0] == 0x39
    assert pp.encode_fp8(mid, "E4M3", pp.Control("RHB", False))[0] == 0x39
    assert pp.encode_fp8(-mid, "E4M3", pp.Control("RHB", False))[0] == 0xB8
    assert pp.encode_fp8(Fraction(1001, 1000), "E4M3", pp.Control("RTP", False))[0] == 0x39
    assert pp.encode_fp8(Fraction(1001, 1000), "E4M3", pp.Control("RTO", False))[0] == 0x39
    assert pp.encode_fp8(Fraction(449), "E4M3", RNE)[0] == 0x7F
    assert pp.encode_fp8(Fraction(-449), "E4M3", RNE_SAT)[0] == 0xFE
    assert pp.encode_fp8(Fraction(40000), "HiF8", RNE)[0] == 0x6F
    assert pp.encode_fp8(Fraction(-40000), "HiF8", RNE)[0] == 0xEF


# ----------------------------------------------------------------- reductions


def test_maximum_fp32_specials():
    nan, qnan2 = 0x7FC00000, 0xFFC00001
    assert pp.maximum(nan, qnan2, "FP32")[0] == 0x7FC00000
    assert pp.maximum(nan | 1 << 40, ONE | 1 << 33, "FP32")[0] == ONE | 1 << 33   # the other Word
    assert pp.maximum(0x80000000 | 1 << 35, 0x80000000, "FP32")[0] == 0x80000000 | 1 << 35
    assert pp.maximum(0x80000000, 0, "FP32")[0] == 0
    assert pp.maximum(0xBF800000, ONE, "FP32")[0] == ONE
    assert pp.maximum(ONE | 1 << 40, ONE, "FP32")[0] == ONE | 1 << 40           # tie: left


def test_maximum_integers_normalize():
    assert pp.maximum(0xFFFFFFFF, 5 | 1 << 40, "S32")[0] == 5
    assert pp.maximum(0xFFFFFFFF, 5, "U32")[0] == 0xFFFFFFFF
    assert pp.absolute(0x80000000, "S32")[0] == 0x7FFFFFFF
    assert pp.absolute(0xFFFFFFFB, "S32")[0] == 5
    assert pp.absolute(0xBF800000 | 1 << 40, "FP32")[0] == ONE


def test_row_and_group_max():
    rows = [[1 << 40 | 3, 7, 5], [0xFFFFFFFF, 0xFFFFFFFE, 0xFFFFFFFD]]
    assert pp.row_max(rows, None, False, "S32")[0] == [7, MASK64]
    assert pp.row_max(rows, None, True, "S32")[0] == [7, 3]
    assert pp.row_max(rows, [9, 0], False, "S32")[0] == [9, 0]          # RowMaxIn 0 > -1
    assert pp.row_max([[1 << 40 | 3]], None, False, "S32")[0] == [1 << 40 | 3]   # one column: raw
    assert pp.group_max(rows, 1, False, "S32")[0] == [[7], [MASK64]]
