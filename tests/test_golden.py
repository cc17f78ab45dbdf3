"""pj.ops.matmul: golden products from the real bundle sequence.

Every call here fits the small size class (4096-Word tiles, 64 KiB of GM:
any M <= 32, K, N <= 64), so the module compiles once per profile, whatever
the operand shapes. Expected values come from numpy, exactly:
small integers keep every binary32 sum exact.
"""

import ml_dtypes
import numpy as np
import pytest

import ptojax as pj
from ptojax.ops import MatmulFault

rng = np.random.default_rng(7)


def ints(lo, hi, shape):
    return rng.integers(lo, hi, shape)


def test_fp16_matches_numpy_exactly():
    a, b = ints(-8, 9, (16, 32)).astype(np.float16), ints(-8, 9, (32, 16)).astype(np.float16)
    d = pj.ops.matmul(a, b, dtype="FP16")
    assert d.dtype == np.float32 and np.array_equal(d, a.astype(np.float32) @ b.astype(np.float32))


def test_mixed_types_bias_acc_and_layouts():
    a, b = ints(-100, 100, (5, 40)), ints(-100, 100, (40, 7))
    d = pj.ops.matmul(a, b, dtype="S8", bias=np.arange(7) - 3)
    assert d.dtype == np.int32 and np.array_equal(d, a @ b + np.arange(7) - 3)
    a16, b4 = ints(0, 60000, (20, 9)), ints(0, 16, (9, 3))
    d = pj.ops.matmul(a16, b4, dtype="U16", b_dtype="U4X2", layout="CUBE_M32")
    assert d.dtype == np.uint32 and np.array_equal(d, (a16 @ b4).astype(np.uint32))
    c = ints(-5, 5, (4, 6)).astype(np.float32)
    a, b = ints(-3, 4, (4, 33)).astype(ml_dtypes.bfloat16), ints(-3, 4, (33, 6)).astype(ml_dtypes.bfloat16)
    d = pj.ops.matmul(a, b, dtype="BF16", acc=c)
    assert np.array_equal(d, c + a.astype(np.float32) @ b.astype(np.float32))


def test_gemv_and_mx_scales():
    a, b = ints(-4, 5, (1, 64)).astype(ml_dtypes.float8_e4m3fn), ints(-4, 5, (64, 5)).astype(ml_dtypes.float8_e5m2)
    sa = np.array([[128, 126]], np.uint8)                         # 2, 1/2 per 32-element K block
    sb = np.full((2, 5), 129, np.uint8)                           # 4
    d = pj.ops.matmul(a, b, dtype="E4M3", b_dtype="E5M2", scales=(sa, sb), gemv=True)
    block = np.repeat([2.0, 0.5], 32)
    assert np.array_equal(d, ((a.astype(np.float64) * block) @ (b.astype(np.float64) * 4)).astype(np.float32))
    a, b = ints(-2, 3, (3, 4)).astype(np.float16), ints(-2, 3, (4, 2)).astype(np.float16)
    h = pj.ops.matmul(a, b, dtype="FP16", scales=(None, None))          # MX form without scales
    assert h.dtype == np.float32 and np.array_equal(h, a.astype(np.float32) @ b.astype(np.float32))


def test_shapes_reuse_one_compiled_program():
    from ptojax.machine import run_stream
    pj.ops.matmul(np.ones((1, 1), np.float16), np.ones((1, 1), np.float16), dtype="FP16")
    compiled = run_stream._cache_size()
    for m, k, n, layout in ((3, 5, 7, "CUBE_M16"), (32, 64, 64, "CUBE_M32"), (16, 64, 1, "CUBE_M16")):
        a, b = ints(-8, 9, (m, k)).astype(np.float16), ints(-8, 9, (k, n)).astype(np.float16)
        d = pj.ops.matmul(a, b, dtype="FP16", layout=layout)
        assert np.array_equal(d, a.astype(np.float32) @ b.astype(np.float32))
    assert run_stream._cache_size() == compiled


def test_too_large_for_any_class_is_a_clear_error():
    # 32 x 2048 S8 in CUBE_M32 is a legal 64 KiB tile, but 65536 payload Words
    with pytest.raises(ValueError, match="at most 32768 Words per tile"):
        pj.ops.matmul(np.ones((32, 2048), np.int64), np.ones((2048, 1), np.int64), dtype="S8",
                      layout="CUBE_M32")


def test_ieee_rounding_is_sequential_binary32():
    # 1 + 2^-24 + 2^-24: binary32 rounds each add (ties to even), so the sum stays 1.0
    a = np.array([[1.0, 1.0, 1.0]], np.float32)
    b = np.array([[1.0], [2.0 ** -24], [2.0 ** -24]], np.float32)
    assert pj.ops.matmul(a, b, dtype="FP32")[0, 0] == np.float32(1.0)
    b2 = np.array([[2.0 ** -24], [2.0 ** -24], [1.0]], np.float32)
    assert pj.ops.matmul(a, b2, dtype="FP32")[0, 0] == np.float32(1.0 + 2.0 ** -23)


def test_portable_profile_is_raw_words():
    d = pj.ops.matmul(np.array([[6]], np.uint16), np.array([[7]], np.uint16), dtype="FP16",
                      profile="portable")
    assert d.view(np.uint32)[0, 0] == 42                    # matrix.md C.1: FP16 6 x FP16 7 = 42


def test_faults_are_raised_with_the_fault():
    with pytest.raises(MatmulFault) as e:      # FP16 x S8: cross-class pair
        pj.ops.matmul(np.ones((2, 2), np.float16), np.ones((2, 2), np.int64), dtype="FP16", b_dtype="S8")
    assert e.value.fault == "Fault_TileLegality" and e.value.bundle == "TMATMUL"


@pytest.mark.parametrize("call, err", [
    (lambda: pj.ops.matmul(np.ones((2, 3)), np.ones((2, 3)), dtype="FP16"), ValueError),
    (lambda: pj.ops.matmul(np.ones((2, 2)), np.ones((2, 2)), dtype="FP99"), ValueError),
    (lambda: pj.ops.matmul(np.array([[0.1]]), np.ones((1, 1)), dtype="FP16"), ValueError),
    (lambda: pj.ops.matmul(np.ones((17, 2)), np.ones((2, 2)), dtype="FP16"), ValueError),
    (lambda: pj.ops.matmul(np.ones((2, 2)), np.ones((2, 2)), dtype="S8"), TypeError),
    (lambda: pj.ops.matmul(np.ones((2, 2), int), np.ones((2, 2), int), dtype="S8", acc=np.zeros((2, 2), int),
                           bias=np.zeros(2, int)), ValueError),
    (lambda: pj.ops.matmul(np.ones((2, 2)), np.ones((2, 2)), dtype="E4M3", scales=(None, None)), ValueError),
    (lambda: pj.ops.matmul(np.ones((2, 2)), np.ones((2, 2)), dtype="FP16", profile="fast"), ValueError),
])
def test_misuse_is_a_clear_error(call, err):
    with pytest.raises(err):
        call()


def test_bundles_agree_with_the_reference(monkeypatch):
    """pj.ops.matmul's own bundle sequences (TLOADs, the TMATMUL forms, TSTORE)
    run on pj.reference.run too: the same fault, executed count and final GM."""
    from ptojax.golden import bundle as golden
    from ptojax.state import write_gpr, write_memory

    seen = []
    real = golden._run

    def checked(template, cfg, gm, gprs, words):
        got = real(template, cfg, gm, gprs, words)
        s = write_memory(template, 0, np.frombuffer(bytes(gm), np.uint8))
        for reg, value in gprs.items():
            s = write_gpr(s, reg, int(value))
        want = pj.reference.run(s, [int(w) for w in words], cfg=cfg)
        assert got[0] == want.fault and got[2] == want.executed
        assert np.array_equal(got[3], np.asarray(want.state.gm))
        seen.append(len(words))
        return got

    monkeypatch.setattr(golden, "_run", checked)
    a, b = ints(-8, 9, (5, 40)).astype(np.float16), ints(-8, 9, (40, 7)).astype(np.float16)
    bias = ints(-8, 9, 7).astype(np.float32)
    d = pj.ops.matmul(a, b, dtype="FP16", bias=bias)
    assert np.array_equal(d, a.astype(np.float32) @ b.astype(np.float32) + bias)
    assert seen


# ----------------------------------------------------------------- the B.FPATR epilogue


A8, B8 = np.array([[1, 2], [3, 4]], np.int8), np.array([[5, -6], [7, -8]], np.int8)   # -> [[19,-22],[43,-50]]


def _reference_epilogue(acc, mode, relu=0, quant=0, alpha=0, rnd="RNE", sat=False, acc_type="S32"):
    """The reference model's element conversion (independent of the executor)."""
    from ptojax.reference import postprocess as rp
    ctl = rp.Control(rnd, sat)
    return [[rp.post_process(int(v) & ((1 << 64) - 1), mode, relu, acc_type, quant, alpha, ctl)[0]
             for v in row] for row in np.asarray(acc)]


def test_epilogue_relu_quant_shift_match_the_reference():
    plain = pj.ops.matmul(A8, B8, dtype="S8")
    assert np.array_equal(plain, [[19, -22], [43, -50]])
    d = pj.ops.matmul(A8, B8, dtype="S8", relu="relu")
    assert d.dtype == np.int32 and np.array_equal(d, np.maximum(plain, 0))
    # mode 3 (S32 -> S8): x * 0.5 rounded to even, + 1
    d = pj.ops.matmul(A8, B8, dtype="S8", pre_quant=3, quant_scale=0.5, quant_offset=1)
    q = (0x3F000000 >> 13) << 13 | 1 << 37
    assert d.dtype == np.int8 and np.array_equal(d, [[11, -10], [23, -24]])
    assert d.tolist() == [[((w & 0xFF) ^ 0x80) - 0x80 for w in row]           # S8 Words
                          for row in _reference_epilogue(plain, 3, quant=q)]
    # mode 13: arithmetic shift by 2, S16
    d = pj.ops.matmul(A8, B8, dtype="S8", pre_quant=13, shift=2)
    assert d.dtype == np.int16 and np.array_equal(d, plain >> 2)
    # PReLU per column (the negative side takes the alpha, not the scale)
    d = pj.ops.matmul(A8, B8, dtype="S8", relu=[0.5, 0.25])
    assert np.array_equal(d, [[19, -6], [43, -12]])


def test_epilogue_float_outputs():
    x = np.array([[1.5, 2.0]], np.float16)
    y = np.array([[1.0, 2.0], [-3.0, 1.0]], np.float16)                  # -> [[-4.5, 5.0]]
    d = pj.ops.matmul(x, y, dtype="FP16", pre_quant=1)
    assert d.dtype == np.float16 and np.array_equal(d, [[-4.5, 5.0]])
    d = pj.ops.matmul(x, y, dtype="FP16", pre_quant=16)
    assert d.dtype == ml_dtypes.bfloat16 and np.array_equal(d.astype(np.float32), [[-4.5, 5.0]])
    d = pj.ops.matmul(x, y, dtype="FP16", pre_quant=26, quant_scale=1.0)
    assert d.dtype == ml_dtypes.float8_e4m3fn and np.array_equal(d.astype(np.float32), [[-4.5, 5.0]])
    d = pj.ops.matmul(x, y, dtype="FP16", pre_quant=38, quant_scale=[1.0, 0.5], relu=0.25)
    assert d.dtype == np.float32 and np.array_equal(d, [[-1.125, 2.5]])
    d = pj.ops.matmul(x, y, dtype="FP16", pre_quant=25, quant_scale=1.0)        # HiF8: raw codes
    assert d.dtype == np.uint8
    assert d.tolist() == [[int(w) for w in row] for row in _reference_epilogue(
        [[0xC0900000, 0x40A00000]], 25, quant=(0x3F800000 >> 13) << 13, acc_type="FP32")]


def test_epilogue_reductions():
    r = pj.ops.matmul(A8, B8, dtype="S8", row_max=True, group_max=8, max_abs=True)
    assert isinstance(r, pj.ops.MatmulResult)
    assert np.array_equal(r.d, [[19, -22], [43, -50]])
    assert np.array_equal(r.row_max, [22, 50]) and np.array_equal(r.group_max, [[22], [50]])
    r = pj.ops.matmul(A8, B8, dtype="S8", row_max=True, row_max_init=[30, -100])
    assert np.array_equal(r.row_max, [30, 43]) and r.group_max is None
    r = pj.ops.matmul(A8, B8, dtype="S8", pre_quant=3, quant_scale=1.0, group_max=8)
    assert r.d.dtype == np.int8 and np.array_equal(r.group_max, [[19], [43]])   # raw accumulators


def test_every_source_and_output_at_once():
    # MX with both scales, ACC, RowMaxIn, the vector quant and PReLU parameters, RowMax and
    # GroupMax: eight TLOADs and three TSTOREs, more B.IOR registers than there are GPRs
    # unless equal values share one (a bare StopIteration before they did)
    m, k, n = 4, 32, 16
    a = ints(-4, 5, (m, k)).astype(ml_dtypes.float8_e4m3fn)
    b = ints(-4, 5, (k, n)).astype(ml_dtypes.float8_e5m2)
    c = ints(-8, 9, (m, n)).astype(np.float32)
    r = pj.golden.matmul(a, b, dtype="E4M3", b_dtype="E5M2", acc=c,
                         scales=(np.full((m, 1), 127, np.uint8), np.full((1, n), 127, np.uint8)),
                         pre_quant=23, quant_scale=np.full(n, 0.5), relu=np.full(n, 0.5), row_max=True,
                         row_max_init=np.zeros(m), group_max=8)
    acc = c + a.astype(np.float32) @ b.astype(np.float32)
    assert np.array_equal(r.row_max, np.maximum(acc.max(axis=1), 0))
    assert np.array_equal(r.group_max, acc.reshape(m, 2, 8).max(axis=2))


def test_epilogue_numeric_flags():
    # flags=True: D with the flags the bundle raised; 0.5 x odd values is inexact (NX),
    # 43 x 4 = 172 past S8 saturates (OF NX); the raw product alone raises none
    r = pj.ops.matmul(A8, B8, dtype="S8", flags=True)
    assert isinstance(r, pj.ops.MatmulResult) and r.flags == [] and r.row_max is None
    assert pj.ops.matmul(A8, B8, dtype="S8", pre_quant=3, quant_scale=0.5, flags=True).flags == ["NX"]
    r = pj.ops.matmul(A8, B8, dtype="S8", pre_quant=3, quant_scale=4.0, saturate=True, flags=True)
    assert r.flags == ["OF", "NX"] and r.d.tolist() == [[76, -88], [127, -128]]
    assert pj.ops.matmul(A8, B8, dtype="S8", row_max=True).flags == []
    with pytest.raises(TypeError, match="flags must be True or False"):
        pj.ops.matmul(A8, B8, dtype="S8", flags="yes")


@pytest.mark.parametrize("kw, err", [
    (dict(pre_quant=7), ValueError), (dict(pre_quant=1), ValueError),         # FP32 mode, S32 acc
    (dict(pre_quant=3), ValueError), (dict(pre_quant=3, quant_scale=0.1), ValueError),
    (dict(pre_quant=3, quant_scale=1.0, quant_offset=300), ValueError),
    (dict(pre_quant=3, quant_scale=[1.0, 2.0]), ValueError),                   # scalar mode
    (dict(pre_quant=18, quant_scale=[1.0, 2.0, 3.0]), ValueError),
    (dict(pre_quant=13, shift=0), ValueError), (dict(pre_quant=13, quant_scale=1.0), ValueError),
    (dict(relu="gelu"), ValueError), (dict(relu=-0.5), ValueError), (dict(relu=object()), TypeError),
    (dict(group_max=7), ValueError), (dict(max_abs=True), ValueError),
    (dict(row_max_init=[1, 2]), ValueError), (dict(row_max=True, row_max_init=[1]), ValueError),
    (dict(rounding="RTN"), ValueError), (dict(shift=2), ValueError)])
def test_epilogue_misuse_is_a_clear_error(kw, err):
    with pytest.raises(err):
        pj.ops.matmul(A8, B8, dtype="S8", **kw)


def test_golden_is_the_home_and_ops_the_alias():
    # pj.golden.matmul is the golden-result helper's home; pj.ops keeps the first name
    assert pj.golden.matmul is pj.ops.matmul
    assert pj.golden.MatmulFault is MatmulFault and pj.golden.MatmulResult is pj.ops.MatmulResult
    assert set(pj.golden.__all__) == {"matmul", "gemm", "MatmulFault", "MatmulResult"}
    assert pj.golden.gemm is pj.ops.gemm
