"""pj.golden.gemm: products of any size from the real tiled bundle sequence.

The tile shape (tile_n, tile_k) decides the States' sizes, so the calls here
compile five programs: portable at the default tiles, ieee at the default
tiles and with tile_k=32, and core=True (cooperative TMATMULs on the Core,
its own program) portable and ieee at one tile shape, CORE_TILES (whatever
the matrix sizes, operand types or epilogue). Expected values are independent of ptojax: exact
integer products, a plain-Python binary32 replay of the documented chunk
order, and matmul's one bundle where one bundle holds the product.
"""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ptojax as pj
from ptojax.golden import MatmulFault

rng = np.random.default_rng(37)


def replay_fp32(a, b, *, bias=None, acc=None, tile_k=64, scale_a=None, scale_b=None):
    """Binary32 replay of the ieee profile's accumulation in gemm's order: each
    product rounded once, added in ascending K with one rounding an add, from
    +0 (or acc); Bias added once, after the first K chunk."""
    A, B = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if scale_a is not None:
        A = A * np.repeat(2.0 ** (scale_a.astype(np.float64) - 127), 32, axis=1)[:, : A.shape[1]]
    if scale_b is not None:
        B = B * np.repeat(2.0 ** (scale_b.astype(np.float64) - 127), 32, axis=0)[: B.shape[0]]
    out = np.zeros((A.shape[0], B.shape[1]), np.float32) if acc is None else np.asarray(acc, np.float32)
    first_chunk_end = min(tile_k, A.shape[1]) - 1
    for k in range(A.shape[1]):
        p = (A[:, k:k + 1] * B[k:k + 1, :]).astype(np.float32)
        out = (out.astype(np.float64) + p.astype(np.float64)).astype(np.float32)
        if bias is not None and k == first_chunk_end:
            out = (out.astype(np.float64) + np.asarray(bias, np.float64)[None, :]).astype(np.float32)
    return out


def same_bits(x, y):
    x, y = np.asarray(x), np.asarray(y)
    return x.shape == y.shape and x.dtype == y.dtype and np.array_equal(
        x.view(f"u{x.dtype.itemsize}"), y.view(f"u{y.dtype.itemsize}"))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 70), st.integers(1, 150), st.integers(1, 140), st.integers(0, 2**32 - 1))
def test_s8_portable_is_the_exact_integer_product(m, k, n, seed):
    # ragged edges in every dimension; S32 accumulators wrap mod 2^32
    r = np.random.default_rng(seed)
    a, b = r.integers(-128, 128, (m, k)), r.integers(-128, 128, (k, n))
    d = pj.golden.gemm(a, b, dtype="S8", profile="portable")
    assert d.dtype == np.int32
    assert np.array_equal(d, (a @ b).astype(np.int32))


def test_integer_accumulators_wrap_like_the_accumulator():
    a = np.full((3, 200), 60000, np.int64)
    b = np.full((200, 5), 60000, np.int64)
    d = pj.golden.gemm(a, b, dtype="U16", profile="portable", tile_k=64)
    assert d.dtype == np.uint32 and np.array_equal(d, ((a @ b) % 2**32).astype(np.uint32))


@pytest.mark.parametrize("m,k,n,tile_k", [(5, 7, 3, 64), (40, 130, 90, 32), (33, 200, 17, 64)])
def test_fp16_ieee_equals_the_binary32_replay(m, k, n, tile_k):
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    bias = rng.standard_normal(n).astype(np.float32)
    d = pj.golden.gemm(a, b, dtype="FP16", bias=bias, tile_k=tile_k)
    assert same_bits(d, replay_fp32(a, b, bias=bias, tile_k=tile_k))


@pytest.mark.parametrize("kw, slots", [
    (dict(), 1),
    (dict(core=True), 1),
    (dict(bias=np.ones(24, np.float32), row_max=True, row_max_init=np.zeros(40)), 2),
    (dict(row_max=True, group_max=8, pre_quant=1), 4),
])
def test_chunk_states_hold_the_fewest_slots_a_hand(monkeypatch, kw, slots):
    """A chunk's fresh States were a third of a GEMM's time, so their pools hold only the
    tiles a hand takes: one for a plain product (A in T, B in N, C in U, D in M), two
    with Bias and RowMaxIn (U) and D and RowMax (M), four with D, RowMax and GroupMax
    (M)."""
    from ptojax.golden import tiling
    seen = []
    monkeypatch.setattr(tiling._Runner, "run", lambda self, flags: seen.append(self.cfg.hand_slots))
    dtype = "FP16" if "row_max" in kw else "S8"
    a = np.ones((40, 30), np.float16 if dtype == "FP16" else np.int8)
    pj.golden.gemm(a, np.ones((30, 24), a.dtype), dtype=dtype,
                   profile="portable" if dtype == "S8" else "ieee", **kw)
    assert seen == [slots]


def test_tile_k_moves_the_bias_and_tile_m_changes_nothing():
    # a large bias and a long tail of tiny products: adding the bias after the
    # first chunk loses the tail's low bits, so tile_k is visible; tile_m never (nor
    # tile_n: test_epilogue_vectors_follow_their_tiles)
    a = np.concatenate([np.ones((4, 1)), np.full((4, 95), 2.0**-12)], axis=1).astype(np.float16)
    b = np.ones((96, 8), np.float16)
    bias = np.full(8, 2.0**12, np.float32)
    d32 = pj.golden.gemm(a, b, dtype="FP16", bias=bias, tile_k=32)
    d64 = pj.golden.gemm(a, b, dtype="FP16", bias=bias, tile_k=64)
    assert same_bits(d32, replay_fp32(a, b, bias=bias, tile_k=32))
    assert same_bits(d64, replay_fp32(a, b, bias=bias, tile_k=64))
    assert not np.array_equal(d32, d64)
    assert same_bits(pj.golden.gemm(a, b, dtype="FP16", bias=bias, tile_k=32, tile_m=3), d32)


def test_large_fp16_stays_within_fp32_accumulation_error():
    a = rng.standard_normal((150, 300)).astype(np.float16)
    b = rng.standard_normal((300, 130)).astype(np.float16)
    d = pj.golden.gemm(a, b, dtype="FP16")
    exact = a.astype(np.float64) @ b.astype(np.float64)
    bound = 300 * 2.0**-24 * (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)))
    assert np.all(np.abs(d - exact) <= bound)


def test_acc_and_bf16():
    a = rng.standard_normal((20, 100)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((100, 70)).astype(ml_dtypes.bfloat16)
    c = rng.standard_normal((20, 70)).astype(np.float32)
    d = pj.golden.gemm(a, b, dtype="BF16", acc=c)
    assert same_bits(d, replay_fp32(a.astype(np.float64), b.astype(np.float64), acc=c))


def test_mx_scales_over_several_chunks():
    a = rng.integers(-4, 5, (18, 96)).astype(ml_dtypes.float8_e4m3fn)
    b = rng.integers(-4, 5, (96, 9)).astype(ml_dtypes.float8_e5m2)
    sa = rng.integers(120, 135, (18, 3)).astype(np.uint8)
    sb = rng.integers(120, 135, (3, 9)).astype(np.uint8)
    d = pj.golden.gemm(a, b, dtype="E4M3", b_dtype="E5M2", scales=(sa, sb), tile_k=32)
    want = replay_fp32(a.astype(np.float64), b.astype(np.float64), scale_a=sa, scale_b=sb)
    assert same_bits(d, want)
    with pytest.raises(ValueError, match="multiple of 32"):
        pj.golden.gemm(a, b, dtype="E4M3", b_dtype="E5M2", scales=(sa, sb), tile_k=48)


@pytest.mark.parametrize("kw", [
    dict(dtype="S8", pre_quant=3, quant_scale=0.5, quant_offset=3, profile="portable"),
    dict(dtype="S8", pre_quant=13, shift=4, relu="relu", profile="portable"),
    dict(dtype="FP16", pre_quant=1, relu=0.25),
    dict(dtype="FP16", relu=np.linspace(0, 1, 32).astype(np.float16).astype(np.float32)),
    dict(dtype="FP16", row_max=True, row_max_init=np.arange(16) - 8.0, group_max=8, max_abs=True),
])
def test_one_tile_and_one_chunk_agree_with_matmul(kw):
    # when one bundle holds the product, gemm runs matmul's sequence: the same bits and flags
    dt = kw["dtype"]
    lo, hi = (-128, 128) if dt == "S8" else (-8, 9)
    a, b = rng.integers(lo, hi, (16, 48)), rng.integers(lo, hi, (48, 32))
    if dt == "FP16":
        a, b = a.astype(np.float16), b.astype(np.float16)
    kw = dict(kw, flags=True)
    g = pj.golden.gemm(a, b, tile_n=64, **kw)
    m = pj.golden.matmul(a, b, **kw)
    assert same_bits(g.d, m.d) and g.flags == m.flags
    for x, y in ((g.row_max, m.row_max), (g.group_max, m.group_max)):
        assert (x is None and y is None) or same_bits(x, y)


def test_epilogue_vectors_follow_their_tiles():
    # PReLU alphas are cut to each N tile: every (16-row, 64-column) block of D is
    # matmul's one bundle on that block with its alphas
    a, b = rng.integers(-128, 128, (32, 48)), rng.integers(-128, 128, (48, 100))
    alphas = np.where(np.arange(100) % 3, 0.5, 0.0)
    kw = dict(dtype="S8", profile="portable")
    d = pj.golden.gemm(a, b, relu=alphas, tile_m=16, **kw)
    for i in (0, 16):
        for j in (0, 64):
            block = pj.golden.matmul(a[i:i + 16], b[:, j:j + 64], relu=alphas[j:j + 64], **kw)
            assert same_bits(d[i:i + 16, j:j + 64], block)


def test_row_max_chains_over_n_tiles_and_group_max_over_groups():
    # N = 160: tiles of 64, 64 and 32 columns, each a whole number of 16-column groups
    a, b = rng.integers(-128, 128, (35, 64)), rng.integers(-128, 128, (64, 160))
    init = rng.integers(-1000, 1000, 35)
    r = pj.golden.gemm(a, b, dtype="S8", profile="portable", row_max=True, row_max_init=init,
                       group_max=16)
    acc = a @ b
    assert np.array_equal(r.d, acc.astype(np.int32))
    assert np.array_equal(r.row_max, np.maximum(init, acc.max(axis=1)).astype(np.int32))
    assert np.array_equal(r.group_max, acc.reshape(35, 10, 16).max(axis=2).astype(np.int32))
    r = pj.golden.gemm(a, b, dtype="S8", profile="portable", row_max=True, max_abs=True)
    assert np.array_equal(r.row_max, np.abs(acc).max(axis=1).astype(np.int32))


def test_a_fault_names_the_tile_and_the_bundle():
    # GroupMaxOut's shape rule: the ragged last N tile has 24 columns, 3 groups of 8,
    # and a RowMajor tile of 3 S32 columns fits no capacity: Fault_TileAllocation
    a, b = np.ones((4, 8), np.int8), np.ones((8, 88), np.int8)
    with pytest.raises(MatmulFault, match=r"TMATMUL of tile rows 0\.\.3, columns 64\.\.87") as e:
        pj.golden.gemm(a, b, dtype="S8", profile="portable", group_max=8, tile_n=64)
    assert e.value.fault == "Fault_TileAllocation"


@pytest.mark.parametrize("kw,err,match", [
    (dict(tile_m=17, layout="CUBE_M16"), ValueError, "tile_m must be at most 16"),
    (dict(tile_m=33, layout="CUBE_M32"), ValueError, "tile_m must be at most 32"),
    (dict(tile_n=0), ValueError, "tile_n must be a positive integer"),
    (dict(tile_k=2.5), ValueError, "tile_k must be a positive integer"),
    (dict(tile_n=512, tile_k=512), ValueError, "lower tile_n or tile_k"),
    (dict(layout="ND"), ValueError, "layout must be"),
    (dict(group_max=16, tile_n=40), ValueError, "multiple of it"),
    (dict(gemv=True), TypeError, "gemv"),
    (dict(flags=1), TypeError, "flags must be True or False"),
    (dict(core=1), TypeError, "core must be True or False"),
    (dict(core=True, tile_m=129), ValueError, r"tile_m must be at most 128 \(group_M\)"),
    (dict(core=True, tile_n=48), ValueError, "tile_n must be a power of two under core=True"),
    (dict(core=True, tile_k=24), ValueError, "tile_k must be a power of two under core=True"),
    (dict(core=True, layout="CUBE_M32"), ValueError, "layout does not apply under core=True"),
    (dict(core=True, group_max=64), ValueError, "every power-of-two piece"),
])
def test_misuse_is_a_clear_error_before_any_work(kw, err, match):
    a, b = np.ones((20, 100), np.int8), np.ones((100, 100), np.int8)
    with pytest.raises(err, match=match):
        pj.golden.gemm(a, b, dtype="S8", profile="portable", **kw)


def test_the_programs_are_shared_by_every_matrix_size():
    from ptojax.batch.execute import _run_donated
    pj.golden.gemm(np.ones((1, 1), np.int8), np.ones((1, 1), np.int8), dtype="S8", profile="portable")
    compiled = _run_donated._cache_size()
    for m, k, n in ((70, 150, 140), (16, 64, 64), (3, 200, 5)):
        a, b = np.ones((m, k), np.int8), np.ones((k, n), np.int8)
        assert np.array_equal(pj.golden.gemm(a, b, dtype="S8", profile="portable"), np.full((m, n), k))
    assert _run_donated._cache_size() == compiled


# ----------------------------------------------------------------- core=True (ADR 0100)

# one tile shape for every core=True call: group_M = 40 gives valid_M = [16, 16, 8, 0]
# (PE2 partial, PE3 idle) and a ragged last group of M % 40 rows
CORE_TILES = dict(core=True, tile_m=40, tile_n=64, tile_k=32)


@pytest.mark.parametrize("m,k,n", [(50, 100, 130), (7, 33, 5), (81, 64, 64)])
def test_core_integer_products_are_exact(m, k, n):
    # S8: the exact product; U16: the U32 accumulator wraps mod 2^32. Ragged everywhere:
    # groups of 40 and m % 40 rows (1 for 81: PE0 alone), N and K past the whole tiles
    # as powers of two (130 = 64 + 64 + 2, 100 = 3 x 32 + 4, 33 = 32 + 1)
    from ptojax.batch.execute import _run_donated
    r = np.random.default_rng(m * k * n)
    a, b = r.integers(-128, 128, (m, k)), r.integers(-128, 128, (k, n))
    d = pj.golden.gemm(a, b, dtype="S8", profile="portable", **CORE_TILES)
    assert d.dtype == np.int32 and np.array_equal(d, (a @ b).astype(np.int32))
    compiled = _run_donated._cache_size()         # every size and type runs the same program
    a, b = r.integers(40000, 65536, (m, k)), r.integers(40000, 65536, (k, n))
    d = pj.golden.gemm(a, b, dtype="U16", profile="portable", **CORE_TILES)
    assert d.dtype == np.uint32 and np.array_equal(d, ((a @ b) % 2**32).astype(np.uint32))
    assert _run_donated._cache_size() == compiled


def _fp(t, shape):
    return rng.standard_normal(shape).astype(t)


@pytest.mark.parametrize("kind", ["fp16_bias", "bf16_acc", "mx"])
def test_core_ieee_equals_the_tiled_product_bit_for_bit(kind):
    # the same K chunks (tile_k = 32 divides K): per row the arithmetic is the same, so the
    # cooperative product equals the CUBE_M32 tiles' bit for bit, whatever the rows and columns
    m, k, n = 50, 96, 100
    kw = dict(tile_k=32)
    if kind == "fp16_bias":
        a, b = _fp(np.float16, (m, k)), _fp(np.float16, (k, n))
        kw.update(dtype="FP16", bias=_fp(np.float32, n))
    elif kind == "bf16_acc":
        a, b = _fp(ml_dtypes.bfloat16, (m, k)), _fp(ml_dtypes.bfloat16, (k, n))
        kw.update(dtype="BF16", acc=_fp(np.float32, (m, n)))
    else:
        a = rng.integers(-4, 5, (m, k)).astype(ml_dtypes.float8_e4m3fn)
        b = rng.integers(-4, 5, (k, n)).astype(ml_dtypes.float8_e5m2)
        scales = (rng.integers(120, 135, (m, 3)).astype(np.uint8), rng.integers(120, 135, (3, n)).astype(np.uint8))
        kw.update(dtype="E4M3", b_dtype="E5M2", scales=scales)
    d = pj.golden.gemm(a, b, **dict(kw, **CORE_TILES))
    assert same_bits(d, pj.golden.gemm(a, b, **kw))


def test_core_epilogue_and_reductions_follow_the_fragments():
    # every post-process source on the PEs: RowMaxIn cut to each fragment, the vector quant
    # and PReLU parameters whole on each; RowMax chained over the column tiles (64, 16),
    # GroupMax over 16-column groups; K = 100 in chunks of 32, 32, 32, 4. The same results
    # and flags as the CUBE_M32 tiles
    a, b = rng.integers(-128, 128, (45, 100)), rng.integers(-128, 128, (100, 80))
    kw = dict(dtype="S8", profile="portable", pre_quant=2, quant_scale=np.full(80, 0.25),
              quant_offset=np.arange(80) % 7 - 3, relu=np.where(np.arange(80) % 3, 0.5, 0.0),
              row_max=True, row_max_init=rng.integers(-1000, 1000, 45), group_max=16, max_abs=True,
              flags=True)
    c, t = pj.golden.gemm(a, b, **dict(kw, **CORE_TILES)), pj.golden.gemm(a, b, **kw)
    assert c.d.dtype == np.int8 and same_bits(c.d, t.d) and c.flags == t.flags and c.flags
    assert same_bits(c.row_max, t.row_max) and same_bits(c.group_max, t.group_max)


def test_core_a_fault_names_the_cooperative_bundle():
    # S8 x FP16 is no matrix type pair: the Shared TLOADs take both, the cooperative bundle
    # refuses them (Fault_TileLegality), named with its tile and chunk
    a, b = np.ones((4, 8), np.int8), np.ones((8, 8), np.float16)
    with pytest.raises(MatmulFault, match=r"^cooperative TMATMUL of tile rows 0\.\.3, columns 0\.\.7, "
                                          r"K chunk 0\.\.7 raised Fault_TileLegality") as e:
        pj.golden.gemm(a, b, dtype="S8", b_dtype="FP16", profile="portable", **CORE_TILES)
    assert e.value.fault == "Fault_TileLegality"


def test_core_k_pieces_move_the_bias_as_chunks_do():
    # K = 24 < tile_k = 32 runs as pieces of 16 and 8: Bias is added after the first
    # piece, as tile_k = 16 would add it, not after all of K (a large Bias, a tail of tiny
    # products: test_tile_k_moves_the_bias_and_tile_m_changes_nothing)
    a = np.concatenate([np.ones((4, 1)), np.full((4, 23), 2.0**-12)], axis=1).astype(np.float16)
    b = np.ones((24, 8), np.float16)
    bias = np.full(8, 2.0**12, np.float32)
    d = pj.golden.gemm(a, b, dtype="FP16", bias=bias, **CORE_TILES)
    assert same_bits(d, replay_fp32(a, b, bias=bias, tile_k=16))
    assert not np.array_equal(d, replay_fp32(a, b, bias=bias, tile_k=32))
