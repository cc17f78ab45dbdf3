"""The matrix family's product: D's elements as one loop over K.

The product runs on a grid of D's elements (not its lanes), K_CHUNK
consecutive k an iteration, ascending, so the `ieee` profile's binary32
accumulation order is the documented one (docs/numerics.md). `portable`
multiplies and accumulates the raw 64-bit carriers mod 2^64; `ieee` decodes
each element to its exact value, rounds each product once to binary32 and
adds in binary32 (integers: mod 2^32). matrix.py decodes the block, checks
it and installs D; this module is the arithmetic between.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import NamedTuple, cast

import jax
import jax.numpy as jnp
import numpy as np
from numpy.typing import NDArray

from .. import tables
from ..indexing import row
from ..state import MachineConfig, State
from ..storage import PeFile
from . import binary32
from .common import CELL_C, CELL_R, DT_BITS, DT_SIGNED, U64, lane_count, log2, payload, take, tile_coords
from .lowering import branch, trip_count, under_batch
from .matrix_records import Block, DGeometry, Local, Shared


DT = {d.name: d.code for d in tables.DATATYPES}

# an operand table: (Local rows, Shared record rows, or None where no State has Shared operands)
_Table = tuple[jax.Array, jax.Array | None]
_Scales = Callable[[jax.Array], tuple[jax.Array, jax.Array]]     # k -> (sA, sB) Words per lane
_Operands = Callable[..., tuple[jax.Array, jax.Array]]           # (a_table, b_table, k[, rows]) -> (A, B)


# ---------------------------------------------------------------- element values


@functools.lru_cache(maxsize=None)
def _val8() -> NDArray[np.float64]:
    """[dtype code, raw code] -> exact value of the <= 8-bit float formats."""
    from .. import numerics          # imported only when the ieee profile is traced
    out = np.zeros((32, 256), np.float64)
    for n in ("HiF8", "E4M3", "E5M2", "E3M2", "E2M3", "E2M1X2", "E1M2X2", "E8M0"):
        t = numerics.value_table(n)
        out[DT[n], : len(t)] = t
    return out


def _float_value(dtype: jax.Array, word: jax.Array) -> jax.Array:
    """Exact value (float64) of a floating element from its carrier word."""
    lo32 = word & U64(0xFFFFFFFF)
    f32 = binary32.decode(lo32, 8, 23)
    tf32 = binary32.decode(lo32 & U64(0xFFFFE000), 8, 23)     # bits below the 10-bit mantissa ignored
    hf32 = binary32.decode(lo32 & U64(0xFFFFF000), 8, 23)     # below the 11-bit mantissa
    f16 = binary32.decode(word & U64(0xFFFF), 5, 10)
    bf16 = binary32.decode((word & U64(0xFFFF)) << U64(16), 8, 23)
    bits = take(DT_BITS, dtype)
    code = (word & jnp.where(bits == 4, U64(0xF), U64(0xFF))).astype(jnp.int32)
    small = row(_val8(), dtype)[code]
    return jnp.select([dtype == DT["FP32"], dtype == DT["TF32"], dtype == DT["HF32"],
                       dtype == DT["FP16"], dtype == DT["BF16"]], [f32, tf32, hf32, f16, bf16], small)


def _int_value(dtype: jax.Array, word: jax.Array) -> jax.Array:
    """Integer element as a wrapped uint64 (signed types sign-extended from their width)."""
    bits = take(DT_BITS, dtype)
    shift = (64 - bits).astype(U64)
    signed = take(DT_SIGNED, dtype) | (dtype == DT["S4X2"])
    as_signed = ((word << shift).astype(jnp.int64) >> shift.astype(jnp.int64)).astype(U64)
    as_unsigned = (word << shift) >> shift
    return jnp.where(signed, as_signed, as_unsigned)


# The product runs on a grid of D's elements, not on D's lanes: A[i][k] depends on
# the row only and B[k][n] on the column only, so each k reads 32 row operands and
# W/16 column ones (not two per lane) and multiplies them elementwise over the grid;
# the grid is mapped to D's lanes once, after the loop. D is CUBE_M16 (16 rows of
# at most W/16 columns) or CUBE_M32 (32 rows of at most W/32): the grid is 16 rows
# of W/16 columns, an M32 D's rows 16-31 folded into the right half of its columns.
_GRID_ROWS = 16
# The K loop takes K_CHUNK consecutive k per iteration: the operands of a chunk lie
# in one or two cache lines of a State's rows, so a batch too large for the cache
# reads each line once instead of once per k, and the loop runs K / K_CHUNK times.
K_CHUNK = 8


class _Grid(NamedTuple):
    """The grid of W elements: each grid column's D column and half of the rows."""
    upper: jax.Array                # [W/16] the column holds D rows 16-31 (CUBE_M32 only)
    col: jax.Array                  # [W/16] its D column

    def rows(self, v: jax.Array) -> jax.Array:
        """A value of each of D's 32 rows, [..., 32], as the grid's [..., 16, W/16]."""
        return jnp.where(self.upper, v[..., 16:, None], v[..., :16, None])

    def of_lanes(self, r: jax.Array, c: jax.Array) -> tuple[jax.Array, jax.Array]:
        """The grid position of D element (r, c)."""
        half = self.upper.shape[0] // 2
        return r & 15, jnp.clip(c + (r >> 4) * half, 0, self.upper.shape[0] - 1)


def _grid(W: int, m32: jax.Array) -> _Grid:
    j = jnp.arange(max(W // 16, 2))
    half = j.shape[0] // 2
    upper = m32 & (j >= half)
    return _Grid(upper, jnp.where(upper, j - half, j))


def _element_map(state: State, cfg: MachineConfig, blk: Block, loc: Local, shr: Shared, dg: DGeometry
                 ) -> tuple[jax.Array, jax.Array, jax.Array, _Grid, jax.Array, _Scales, _Operands]:
    """D's lanes (row and column of each payload slot, lane_ok) and the grid's operand
    reads for the product's loop over K: (r, c, lane_ok, the grid, the Local operand rows,
    scales(k), operands(a_table, b_table, k, rows)), where scales and operands give
    (one value per D row [32], one per grid column [W/16]), each k of `k` [n, 1] a row
    of them ([n, 32], [n, W/16])."""
    W = lane_count(cast(PeFile, state.tiles))      # the view's tiles: a storage.PeFile (dispatch._complete)
    Mi, N = blk.Mi, blk.N
    left_shared, shared_on = blk.left_shared, blk.shared_on
    trans_a, trans_b = shr.trans_a, shr.trans_b
    r, c = tile_coords(True, dg.lay, dg.cr, dg.cc, dg.b4, 0, W)
    lane_ok = (r < Mi) & (c < N) & (jnp.arange(W) < dg.g["cell_count"] * dg.cr * dg.cc)
    # operands are read from a Local tile row or a Shared record row (no table of
    # either is copied: a Shared record may be much longer than W)
    WS = cfg.shared_words
    assert WS is not None               # MachineConfig.__post_init__ sets it

    def fetch(local: jax.Array, shared: jax.Array | None, slot: jax.Array | int, i: jax.Array | int,
              use_shared: jax.Array, idx: jax.Array) -> jax.Array:
        lv = local[slot, jnp.clip(idx, 0, W - 1)]
        if shared is None:                  # no State of the batch has Shared operands
            return lv
        sv = shared[i, jnp.clip(idx, 0, WS - 1)]
        return jnp.where(use_shared, sv, lv)

    a_cr, a_cc, b_cr, a_cols, b_cols = loc.a_cr, loc.a_cc, loc.b_cr, shr.a_cols, shr.b_cols
    la_cr, la_cc, lb_cr = log2(a_cr), log2(a_cc), log2(b_cr)
    a_b4_m16 = (take(DT_BITS, blk.a_type) == 4) & (loc.a_lay == 0)
    b_krep = jnp.maximum(loc.b_k_repeat, 1)
    grid = _grid(W, dg.lay == 1)
    gi, gn = jnp.arange(32), grid.col
    # slot of A[i][k] = a_base[i] + a_step(k); of B[k][n] = b_base[n] + b_step(k).
    # Shared A row = this PE's first row + i (stored transposed: column); Shared B likewise
    sh_row = blk.row0 + gi
    a_base = jnp.where(left_shared, jnp.where(trans_a, sh_row, sh_row * a_cols), gi << la_cc)
    b_base = jnp.where(shared_on, jnp.where(trans_b, gn * b_cols, gn),
                       (((gn >> 3) * b_krep) << (lb_cr + 3)) + ((gn & 7) << lb_cr))

    def a_step(k: jax.Array) -> jax.Array:
        q = k & (a_cc - 1)
        q = jnp.where(a_b4_m16, q ^ (12 * (((q >> 2) ^ (q >> 3)) & 1)), q)
        return jnp.where(left_shared, jnp.where(trans_a, k * a_cols, k),
                         ((k >> la_cc) << (la_cr + la_cc)) + q)

    def b_step(k: jax.Array) -> jax.Array:
        return jnp.where(shared_on, jnp.where(trans_b, k, k * b_cols),
                         ((k >> lb_cr) << (lb_cr + 3)) + (k & (b_cr - 1)))

    # MX scale words per row / column and k (1 for an absent scale): A[i][k] takes
    # sA[i][k div 32] (a Shared sA row is absolute like A's, a Local one this PE's),
    # B[k][n] takes sB[k div 32][n]
    a_row = jnp.where(left_shared, sh_row, gi) * jnp.where(left_shared, shr.sa_cols, loc.sa_cols)
    sb_c = jnp.where(shared_on, shr.sb_cols, loc.sb_cols)
    # the Local operand rows A, sA, B, sB of this PE (rows 0-3), copied once per block
    words = payload(cast(PeFile, state.tiles), jnp.stack([loc.a_slot, loc.sa_slot, loc.b_slot, loc.sb_slot]),
                    cfg.tile_words)
    shared = state.shared.words

    def scales(k: jax.Array) -> tuple[jax.Array, jax.Array]:
        sa = fetch(words, shared, 1, shr.sa, left_shared, a_row + (k >> 5))
        sb = fetch(words, shared, 3, shr.sb, shared_on, gn + (k >> 5) * sb_c)
        return jnp.where(blk.sa_on, sa, U64(1)), jnp.where(blk.sb_on, sb, U64(1))

    def operands(a_table: _Table, b_table: _Table, k: jax.Array,
                 rows: Sequence[jax.Array | int] = (0, shr.a, 2, shr.b)) -> tuple[jax.Array, jax.Array]:
        """A[i][k] of every grid row and B[k][n] of every grid column from (Local,
        Shared) tables of raw Words, or of decoded values (one row each: rows = 0)."""
        a = fetch(a_table[0], a_table[1], rows[0], rows[1], left_shared, a_base + a_step(k))
        b = fetch(b_table[0], b_table[1], rows[2], rows[3], shared_on, b_base + b_step(k))
        return a, b

    return r, c, lane_ok, grid, words, scales, operands


def _chunks(trips: jax.Array) -> jax.Array:
    """Iterations of the K loop for `trips` k (the batch's most, trip_count)."""
    return (trip_count(trips) + K_CHUNK - 1) // K_CHUNK


def _k_loop(blk: Block) -> jax.Array:
    """Which K loop a batch runs (both profiles): 2 x (some State has MX scales)
    + (some State has Shared operands); the lean ones never fetch what no State
    uses (benchmarks/profile.py)."""
    any_scales = trip_count((blk.sa_on | blk.sb_on).astype(jnp.int32)) > 0
    any_shared = trip_count(blk.shared_on.astype(jnp.int32)) > 0
    return any_scales.astype(jnp.int32) * 2 + any_shared.astype(jnp.int32)


def _ieee_product(blk: Block, shr: Shared, grid: _Grid, words: jax.Array, shared: jax.Array,
                  scales: _Scales, operands: _Operands, trips: jax.Array, c_grid: jax.Array
                  ) -> tuple[jax.Array, jax.Array]:
    """The `ieee` profile's K loop on the grid from C's Words `c_grid` (where .ACC):
    each product rounded once to binary32, binary32 adds (integers: the exact
    products mod 2^64, reduced at the end): (integer sums, binary32 values)."""
    is_acc, sa_on, sb_on = blk.is_acc, blk.sa_on, blk.sb_on
    is_float = blk.acc_type == DT["FP32"]
    scale: Callable[[jax.Array], jax.Array] = \
        lambda w: jnp.where(w == U64(0xFF), jnp.nan,
                            jnp.ldexp(jnp.float64(1), (w & U64(0xFF)).astype(jnp.int32) - 127))
    # operand values decoded once per bundle (the A and B rows of the Local file and
    # of the Shared records); integer inputs (<= 16 bits) are exact as float64 values,
    # and so are their products; MX scales are exact powers of two, applied per product
    def decode(dtype: jax.Array, table: jax.Array) -> jax.Array:
        return jnp.where(is_float, _float_value(dtype, table),
                         _int_value(dtype, table).astype(jnp.int64).astype(jnp.float64))
    init = (jnp.where(is_acc, c_grid, U64(0)),
            jnp.where(is_acc, binary32.value(c_grid), jnp.float64(0)))
    # the binary32 sums run only where some State of the batch has a float
    # accumulator, the integer ones only where some State has an integer one:
    # a D reads one of the two, and computing both cost a float GEMM a quarter
    # of its loop
    any_int = trip_count((~is_float).astype(jnp.int32)) > 0
    any_float = trip_count(is_float.astype(jnp.int32)) > 0

    def loop(with_scales: bool, with_shared: bool) -> Callable[[], tuple[jax.Array, jax.Array]]:
        """The K loop; a batch where no State has MX scales (Shared operands) runs the
        one that never fetches (decodes) them, as the portable profile's."""
        a_val = (decode(blk.a_type, words[0][None]),
                 decode(blk.a_type, shared[shr.a][None]) if with_shared else None)
        b_val = (decode(blk.b_type, words[2][None]),
                 decode(blk.b_type, shared[shr.b][None]) if with_shared else None)

        def body(t: jax.Array, carry: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
            acc_i, acc_f = carry
            k = t * K_CHUNK + jnp.arange(K_CHUNK)[:, None]
            a, b = operands(a_val, b_val, k, (0, 0, 0, 0))
            if with_scales:
                sa, sb = scales(k)
                a, b = a * jnp.where(sa_on, scale(sa), 1.0), b * jnp.where(sb_on, scale(sb), 1.0)
            # the chunk's k in ascending order: the exact product, rounded once, then a
            # binary32 add (both via float64); integers: the exact product, summed mod
            # 2^64 (reduced to 32 bits at the end)
            def binary32_sums(acc_f: jax.Array) -> jax.Array:
                for u in range(K_CHUNK):
                    exact = grid.rows(a[u]) * b[u][None, :]
                    acc_f = jnp.where(k[u, 0] < trips,
                                      binary32.round_value(acc_f + binary32.round_value(exact)), acc_f)
                return acc_f

            def integer_sums(acc_i: jax.Array) -> jax.Array:
                for u in range(K_CHUNK):
                    exact = grid.rows(a[u]) * b[u][None, :]
                    acc_i = jnp.where(k[u, 0] < trips,
                                      acc_i + jnp.where(is_float, 0, exact).astype(jnp.int64).astype(U64), acc_i)
                return acc_i
            keep: Callable[[jax.Array], jax.Array] = lambda acc: acc
            return (jax.lax.cond(any_int, integer_sums, keep, acc_i),
                    jax.lax.cond(any_float, binary32_sums, keep, acc_f))
        return lambda: jax.lax.fori_loop(0, _chunks(trips), body, init)

    if under_batch():
        which, kinds = _k_loop(blk), [(s, sh) for s in (False, True) for sh in (False, True)]
    else:
        # pj.run compiles for latency: each ieee loop is large, so one State
        # gets the lean loop and the full one only (half the copies)
        which, kinds = (_k_loop(blk) > 0).astype(jnp.int32), [(False, False), (True, True)]
    acc_i, acc_f = jax.lax.switch(which, [branch(loop(*kind)) for kind in kinds])
    return acc_i, acc_f


def _ieee_words(blk: Block, acc_i: jax.Array, acc_f: jax.Array, bias_words: jax.Array) -> jax.Array:
    """The `ieee` profile's D Words from its K loop's sums: Bias added in binary32
    (integers: mod 2^32), the binary32 value rounded to its Word."""
    is_bias, is_float = blk.is_bias, blk.acc_type == DT["FP32"]
    acc_f = jnp.where(is_bias, acc_f + binary32.value(bias_words), acc_f)
    acc_i = (acc_i + jnp.where(is_bias, bias_words, U64(0))) & U64(0xFFFFFFFF)
    acc_i = jnp.where(blk.acc_type == DT["S32"],
                      acc_i.astype(jnp.uint32).astype(jnp.int32).astype(jnp.int64).astype(U64), acc_i)
    return jnp.where(is_float, binary32.round_bits(acc_f), acc_i)


def product(state: State, cfg: MachineConfig, blk: Block, loc: Local, shr: Shared, dg: DGeometry,
             do: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """D's Words of every lane (one loop over K, ascending, on the grid) and which lanes D keeps."""
    tiles = cast(PeFile, state.tiles)      # the view's: PE `pe`'s storage.PeFile (dispatch._complete)
    W = lane_count(tiles)
    r, c, lane_ok, grid, words, scales, operands = _element_map(state, cfg, blk, loc, shr, dg)
    shared = state.shared.words
    # C has D's M layout and shape, in the accumulator's 32-bit CELLs (D's own
    # CELLs differ when a PreQuantMode converts): C[i][n] of each grid point
    lay = dg.lay
    c_cr, c_cc = take(CELL_R.reshape(-1), lay * 4), take(CELL_C.reshape(-1), lay * 4)
    lcr, lcc = log2(c_cr), log2(c_cc)
    gi = jnp.arange(_GRID_ROWS)[:, None] + jnp.where(grid.upper, 16, 0)[None, :]
    gn = grid.col[None, :]
    c_slot = ((gn >> lcc) << (lcr + lcc)) + (gi << lcc) + (gn & (c_cc - 1))
    c_grid = payload(tiles, loc.c_slot, cfg.tile_words)[jnp.clip(c_slot, 0, W - 1)]
    lane_row, lane_col = grid.of_lanes(jnp.clip(r, 0, 31), c)
    bias_words = payload(tiles, loc.bias_slot, cfg.tile_words)[jnp.clip(c, 0, W - 1)]
    trips = jnp.where(do, blk.K, 0)

    def lanes(g: jax.Array) -> jax.Array:
        return g[lane_row, lane_col]

    if cfg.profile != "ieee":
        def loop(with_scales: bool, with_shared: bool) -> Callable[[], jax.Array]:
            """The K loop; a batch where no State has MX scales (Shared operands)
            runs the one that never fetches them."""
            reads = (words, shared) if with_shared else (words, None)

            def body(t: jax.Array, acc: jax.Array) -> jax.Array:
                k = t * K_CHUNK + jnp.arange(K_CHUNK)[:, None]
                a, b = operands(reads, reads, k)
                if with_scales:
                    sa, sb = scales(k)
                    a, b = a * sa, b * sb
                for u in range(K_CHUNK):      # one elementwise chain: one fused kernel
                    acc = acc + jnp.where(k[u, 0] < trips, grid.rows(a[u]) * b[u][None, :], U64(0))
                return acc
            init = jnp.where(blk.is_acc, c_grid, U64(0))
            return lambda: jax.lax.fori_loop(0, _chunks(trips), body, init)
        acc = jax.lax.switch(_k_loop(blk), [branch(loop(scaled, from_shared)) for scaled in (False, True)
                                            for from_shared in (False, True)])
        return c, lane_ok, lanes(acc) + jnp.where(blk.is_bias, bias_words, U64(0))
    acc_i, acc_f = _ieee_product(blk, shr, grid, words, shared, scales, operands, trips, c_grid)
    return c, lane_ok, _ieee_words(blk, lanes(acc_i), lanes(acc_f), bias_words)


