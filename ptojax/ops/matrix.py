"""TMATMUL / TGEMV completion: All-Local CUBE operands (ADR 0071) and Shared
B / Shared A+B operands with ADR 0100's group-M distribution over the Core.

`complete(state, h, pe, cfg, enable)` evaluates the ordered check list of
matrix.md B.6 (docs/matmul-decisions.md) as booleans, picks the first
failing one, and only when every check passes and `enable` holds publishes
the newly allocated D, converted by B.FPATR's epilogue (postprocess.py), and
its RowMax / GroupMax outputs. The product (matrix_product.py) is one loop over K (ascending, so the
`ieee` profile's binary32 accumulation order is the documented one) on a
grid of D's elements: each k reads A[i][k] for every row and B[k][n] for
every column from their CUBE slots and accumulates their products; the grid
is then mapped to D's payload slots. A Shared operand is read from
its RowMajor record instead (docs/shared-decisions.md section 5): PE `pe`
computes its own fragment of valid_M[pe] rows starting at Shared-A row
pe*M_per_PE, or from its own Local A.

Profiles (MachineConfig.profile, static): `portable` is the model's raw
64-bit multiply-accumulate mod 2^64; `ieee` decodes each element to its
exact value (ptojax.numerics), rounds each product once to binary32 and
adds in binary32 (integers: mod 2^32).

The decoded block's records (Block, Local, Shared, DGeometry), which the
product reads too, are in matrix_records.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple, TypeVar, cast

import jax
import jax.numpy as jnp
import numpy as np

from .. import families, tables
from ..indexing import row
from ..state import TILE_COLUMN, MachineConfig, State
from ..storage import PeFile
from . import postprocess as pp
from . import shared as sh
from .header import Header
from .common import (CUBE_TILE_LAYOUT, DT_BITS, DT_CLASS, U64, aux_words, capacity_register,
                     cube_descriptor, cube_geometry, gpr_value, install, install_aux, lane_count,
                     local_pool_in_use, log2, ordered_fault, ordinary_shape, ordinary_source_legal,
                     payload, pe_count, size_code_bytes, source, take)
from .family import Completion, Context, Family
from .lowering import branch, settle, trip_count
from .matrix_product import product
from .matrix_records import Block, DGeometry, Local, Shared

OP = tables.OP_ID
DT = {d.name: d.code for d in tables.DATATYPES}
LOC = tables.TILE_LOCATION_CODE
ROW_MAJOR = tables.TILE_LAYOUT_CODE["RowMajor"]
FIRST, LAST = OP["TMATMUL"], OP["TGEMVMX.ACC"]
COL_ALLOCATED = TILE_COLUMN["allocated"]

T = TypeVar("T")

# per operation id: (uses MX, uses C, uses Bias, is TGEMV)
_FORM = np.zeros((len(tables.OPS), 4), bool)
for _name, _i in OP.items():
    if FIRST <= _i <= LAST:
        _FORM[_i] = ("MX" in _name, _name.endswith(".ACC"), _name.endswith(".BIAS"),
                     _name.startswith("TGEMV"))

# ordinary input classes (matrix.md A.5): 0 floating, 1 signed, 2 unsigned
MATRIX_CLASS = np.full(32, -1, np.int32)
for _n in ("FP32", "TF32", "HF32", "FP16", "BF16", "HiF8", "E4M3", "E5M2", "E3M2", "E2M3",
           "E2M1X2", "E1M2X2"):
    MATRIX_CLASS[DT[_n]] = 0
for _n in ("S16", "S8", "S4X2"):
    MATRIX_CLASS[DT[_n]] = 1
for _n in ("U16", "U8", "U4X2"):
    MATRIX_CLASS[DT[_n]] = 2
ACC_TYPE = np.array([DT["FP32"], DT["S32"], DT["U32"]], np.int32)
MX_TYPE = np.zeros(32, bool)
MX_SCALED = np.zeros(32, bool)
for _n in ("FP16", "BF16", "E4M3", "E5M2", "E2M1X2", "E1M2X2"):
    MX_TYPE[DT[_n]] = True
for _n in ("E4M3", "E5M2", "E2M1X2", "E1M2X2"):
    MX_SCALED[DT[_n]] = True


def _pow2(x: jax.Array) -> jax.Array:
    return (x > 0) & ((x & (x - 1)) == 0)


def _member(x: jax.Array, values: Sequence[int]) -> jax.Array:
    return jnp.any(jnp.asarray(x)[..., None] == jnp.asarray(values, jnp.int32), axis=-1)


def _source_at(idx: jax.Array, ok: jax.Array, n: jax.Array | int) -> jax.Array:
    """TileIndex of the n-th source of the stream (0 when there is none)."""
    pos = jnp.cumsum(ok) - 1
    hit = ok & (pos == n)
    return jnp.where(jnp.any(hit), idx[jnp.argmax(hit)], 0)


# ---------------------------------------------------------------- completion


def _stack(*xs: jax.Array | int) -> jax.Array:
    return jnp.stack([jnp.asarray(x, jnp.int32) for x in xs])


def _unstack(tree: T, n: int) -> Iterator[T]:
    return (jax.tree_util.tree_map(lambda v: v[k], tree) for k in range(n))


def _decode(h: Header, pe: jax.Array, cfg: MachineConfig) -> Block:
    """The operation's form, the element types and the Shared groups of header `h`."""
    op = jnp.clip(h.op, 0, len(tables.OPS) - 1)
    form = row(_FORM, op)
    is_mx, is_acc, is_bias, is_gemv = form[0], form[1], form[2], form[3]
    lb = jnp.where(h.lb_present, h.lb, 1)
    M, N, K = lb[0], lb[1], lb[2]

    a_type = h.dtype
    b_type = jnp.where(h.datr_present & (h.datr_dtype != tables.DTYPE_NONE), h.datr_dtype, a_type)
    a_cls, b_cls = take(MATRIX_CLASS, a_type), take(MATRIX_CLASS, b_type)
    types_legal = jnp.where(is_mx, take(MX_TYPE, a_type) & take(MX_TYPE, b_type),
                         (a_cls >= 0) & (a_cls == b_cls))
    acc_type = jnp.where(is_mx, DT["FP32"], take(ACC_TYPE, jnp.maximum(a_cls, 0)))
    sa_on = is_mx & take(MX_SCALED, a_type)
    sb_on = is_mx & take(MX_SCALED, b_type)

    # ---- Shared groups (B.IOS order [A, sA,] B, sB) and ADR 0100's group-M split
    n_shared = h.ios_count
    shared_on = n_shared > 0
    left_shared = shared_on & (n_shared == 2 + sa_on + sb_on)
    a_local, b_local = ~left_shared, ~shared_on
    coop = shared_on & (cfg.semantics == "adr0100")
    G = M                                   # LB0: group_M on the Shared forms
    m_per_pe = jnp.where(G <= 64, 16, 32)
    Mi = jnp.where(coop, jnp.clip(G - pe * m_per_pe, 0, m_per_pe), M)   # this PE's rows
    row0 = jnp.where(coop, pe * m_per_pe, 0)                             # its first Shared-A row
    active = Mi > 0
    return Block(is_acc, is_bias, is_gemv, M, N, K, a_type, b_type, acc_type, types_legal,
                  sa_on, sb_on, n_shared, shared_on, left_shared, a_local, b_local, coop, G,
                  m_per_pe, Mi, row0, active)


def _binding_stream(h: Header, cfg: MachineConfig, blk: Block,
                    gpr: jax.Array) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
    """Step 3, the binding stream, with the B.IOR parameter Words from this PE's
    GPRs `gpr`: (gate_legal, the scalar (quant, LReLU) parameter Words)."""
    rows = h.bound
    n_src, n_dst = h.n_src, h.n_dst
    mask = h.mask
    N, K, G = blk.N, blk.K, blk.G
    shared_bad = blk.shared_on & ((blk.n_shared != 1 + blk.sb_on) & ~blk.left_shared
                                | jnp.any(h.ios_bound & (h.shared_size != 0))
                                | ~_pow2(N) | ~_pow2(K)
                                | (((G < 1) | (G > 128) | (mask != 0xF)) if cfg.semantics == "adr0100"
                                   else ~_pow2(G)))
    mode = h.pre_quant_mode
    vector_mode, scalar_mode = _member(mode, pp.VECTOR_MODES), _member(mode, pp.SCALAR_MODES)
    n_post = (h.row_max & h.row_max_init) + vector_mode + (h.relu == 3)
    n_scalar = scalar_mode.astype(jnp.int32) + (h.relu == 2)
    # step 3, the one combined gate, by its parts (the reference's twins)
    stream_legal = ~(blk.is_gemv & (h.ios_count > 0)) & (n_src == _math_sources(blk) + n_post) \
        & (n_dst == 1 + h.row_max + h.group_max) & h.iot_closed
    # the scalar parameters: dense B.IOR sources, quant first (zero without a B.IOR)
    reg0 = jnp.where(h.ior_present, gpr_value(gpr, h.reg_src0), U64(0))
    reg1 = jnp.where(h.ior_present, gpr_value(gpr, h.reg_src1), U64(0))
    quant = jnp.where(scalar_mode, reg0, U64(0))
    relu = jnp.where(h.relu == 2, jnp.where(scalar_mode, reg1, reg0), U64(0))
    params_legal = (~scalar_mode | pp.quant_parameter_legal(mode, quant)) \
        & ((h.relu != 2) | pp.relu_parameter_legal(relu))
    ior_legal = ~h.ior_present | ((h.reg_dst == 0) & ((n_scalar >= 1) | (h.reg_src0 == 0))
                                  & ((n_scalar >= 2) | (h.reg_src1 == 0)) & (h.reg_src2 == 0)
                                  & params_legal)
    datr_legal = ~h.datr_present | ((h.layout == 0) & (h.pad == 0) & (h.cmode == 0)
                                    & (h.canonicalize == 0))
    dimensions_legal = ~jnp.any(h.lb_present & (h.lb == 0))
    # at least one binding, with the fields a decoded B.IOT can hold (only a
    # hand-made block State holds others), and one mask over every B.IOT and
    # B.IOS: the header compares a B.IOT with earlier B.IOTs only, so a B.IOS
    # recorded before the first B.IOT is compared here
    masks_legal = (h.iot_count > 0) & jnp.all(
        ~rows | (_member(h.pe_mask, tables.PEMODE_MASK[1:]) & (h.dst_hand >= 0) & (h.dst_hand <= 3)
                 & (~h.has_dst | ((h.size_code >= 1) & (h.size_code <= 10)))
                 & (h.src0 >= 0) & (h.src0 < 64) & (h.src1 >= 0) & (h.src1 < 64))) \
        & ~jnp.any(h.ios_bound & (h.shared_masks != mask))
    gate_legal = blk.types_legal & stream_legal & ior_legal & datr_legal & dimensions_legal \
        & masks_legal & ~shared_bad
    return gate_legal, (quant, relu)


def _math_sources(blk: Block) -> jax.Array:
    """Local mathematical sources: [C] + Local [A, sA] + Local [B, sB] + [Bias]."""
    return blk.is_acc.astype(jnp.int32) + blk.a_local * (1 + blk.sa_on) \
        + blk.b_local * (1 + blk.sb_on) + blk.is_bias


def _local_indices(h: Header, blk: Block) -> tuple[jax.Array, ...]:
    """TileIndex of the Local sources (step 7), in stream order C, A, sA, B, sB, Bias."""
    idx, ok = h.sources, h.source_ok
    o_a = blk.is_acc.astype(jnp.int32)
    o_sa = o_a + 1
    o_b = o_a + blk.a_local * (1 + blk.sa_on)
    o_sb = o_b + 1
    o_bias = o_b + blk.b_local * (1 + blk.sb_on)
    return tuple(_source_at(idx, ok, o) for o in (0, o_a, o_sa, o_b, o_sb, o_bias))


def _local_sources(state: State, cfg: MachineConfig, blk: Block, indices: Sequence[jax.Array],
                   mode: jax.Array, tsize: jax.Array) -> Local:
    """Step 7: the Local operands' descriptors and contents, and D's M layout."""
    tiles = cast(PeFile, state.tiles)      # the view's: PE `pe`'s storage.PeFile (dispatch._complete)
    W, HS = cfg.tile_words, cfg.hand_slots
    Mi, N, K = blk.Mi, blk.N, blk.K
    c_idx, a_idx, sa_idx, b_idx, sb_idx, bias_idx = indices
    tcap = state.tile_capacity

    def primary_legal(index: jax.Array, vr: jax.Array, vc: jax.Array, dtype: jax.Array
                      ) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array, dict[str, jax.Array]]:
        """A, B, C: a legal CUBE descriptor, defined, of this valid shape and dtype
        (the layout is compared by the caller)."""
        slot, alloc, s, defined = source(tiles, index, HS)
        legal, lay, cr, cc = cube_descriptor(s, tcap, W)
        good = alloc & legal & defined & (s["valid_rows"] == vr) & (s["valid_cols"] == vc) \
            & (s["dtype"] == dtype)
        return slot, good, lay, cr, cc, s

    m_fits: Callable[[jax.Array], jax.Array] = lambda lay: ((lay == 0) & (Mi <= 16)) | ((lay == 1) & (Mi <= 32))
    # A, B and C checked as one batch of three (one copy of the descriptor checks)
    cube3 = jax.vmap(primary_legal)(_stack(a_idx, b_idx, c_idx), _stack(Mi, K, Mi), _stack(K, N, N),
                                    _stack(blk.a_type, blk.b_type, blk.acc_type))
    (a_slot, a_ok, a_lay, a_cr, a_cc, a_s), (b_slot, b_ok, b_lay, b_cr, b_cc, b_s), \
        (c_slot, c_ok, c_lay, _, _, c_s) = _unstack(cube3, 3)
    a_ok = a_ok & m_fits(a_lay)
    b_ok = b_ok & (b_lay == 2)
    # D's M layout: A's (Local A), C's (both Shared + ACC), else by rows per PE (section 5, check 10)
    shared_lay_ok: bool | jax.Array
    if cfg.semantics == "adr0100":
        shared_lay, shared_lay_ok = jnp.where(blk.m_per_pe == 16, 0, 1), True
    else:
        shared_lay, shared_lay_ok = jnp.where(blk.M <= 16, 0, 1), blk.M <= 32
    d_lay = jnp.where(blk.a_local, a_lay, jnp.where(blk.is_acc, c_lay, shared_lay))
    c_ok = c_ok & (c_lay == d_lay) & m_fits(c_lay) & ((mode != 0) | (c_s["capacity"] == tsize))

    def auxiliary_legal(index: jax.Array, vr: jax.Array, vc: jax.Array, dtype: jax.Array
                        ) -> tuple[jax.Array, jax.Array, dict[str, jax.Array]]:
        """Bias and scales: legal, fully defined ordinary RowMajor tiles
        (TileSourceContentsDefined) of this valid shape and dtype."""
        slot, alloc, s, defined = source(tiles, index, HS)
        good = ordinary_source_legal(s, alloc, defined, tcap, W) & (s["layout"] == ROW_MAJOR) \
            & (s["dtype"] == dtype) & (s["valid_rows"] == vr) & (s["valid_cols"] == vc)
        return slot, good, s

    kb = (K + 31) >> 5
    aux3 = jax.vmap(auxiliary_legal)(_stack(sa_idx, sb_idx, bias_idx), _stack(Mi, kb, 1),
                                     _stack(kb, N, N), _stack(DT["E8M0"], DT["E8M0"], blk.acc_type))
    (sa_slot, sa_ok, sa_s), (sb_slot, sb_ok, sb_s), (bias_slot, bias_ok, _) = _unstack(aux3, 3)
    # an idle PE of a cooperative block resolves no Local source (ADR 0100)
    sources_legal = ~blk.active | ~(
        (blk.a_local & (~a_ok | (blk.sa_on & ~sa_ok))) | (blk.b_local & (~b_ok | (blk.sb_on & ~sb_ok)))
        | (blk.is_acc & ~c_ok) | (blk.is_bias & ~bias_ok)
        | (blk.left_shared & ~blk.is_acc & ~shared_lay_ok))
    return Local(a_slot, sa_slot, b_slot, sb_slot, c_slot, bias_slot, a_lay, a_cr, a_cc, b_cr,
                  b_s["k_repeat"], sa_s["cols"], sb_s["cols"], d_lay, kb, sources_legal)


def _shared_sources(state: State, h: Header, blk: Block, kb: jax.Array) -> Shared:
    """Check 7s, collectively: ready records with the exact stored shape."""
    tcap = state.tile_capacity
    G, N, K = blk.G, blk.N, blk.K
    trans_a, trans_b = h.trans_a == 1, h.trans_b == 1
    o_sh_b = jnp.where(blk.left_shared, 1 + blk.sa_on, 0)

    def shared_source_legal(ordinal: jax.Array, rows: jax.Array, cols: jax.Array,
                            dtype: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        sid = row(h.shared_id, ordinal)
        i, exists, _ = sh.lookup(state.shared, sid)
        r = sh.record(state.shared, i)
        good = sh.cooperative_ready(r, exists, tcap) & (r["cols"] == cols) \
            & (rows <= r["valid_rows"]) & (cols <= r["valid_cols"]) & (r["dtype"] == dtype) \
            & (r["layout"] == sh.ROW_MAJOR)
        return i, good, r["cols"]

    sh4 = jax.vmap(shared_source_legal)(
        _stack(0, 1, o_sh_b, o_sh_b + 1),
        _stack(jnp.where(trans_a, K, G), G, jnp.where(trans_b, N, K), kb),
        _stack(jnp.where(trans_a, G, K), kb, jnp.where(trans_b, K, N), N),
        _stack(blk.a_type, DT["E8M0"], blk.b_type, DT["E8M0"]))
    (sh_a, sh_a_ok, a_cols), (sh_sa, sh_sa_ok, sa_cols), (sh_b, sh_b_ok, b_cols), \
        (sh_sb, sh_sb_ok, sb_cols) = _unstack(sh4, 4)
    sources_legal = ~((blk.left_shared & (~sh_a_ok | (blk.sa_on & ~sh_sa_ok)))
                      | (blk.shared_on & (~sh_b_ok | (blk.sb_on & ~sh_sb_ok))))
    return Shared(sh_a, sh_sa, sh_b, sh_sb, a_cols, sa_cols, b_cols, sb_cols, trans_a, trans_b,
                   sources_legal)


class _Post(NamedTuple):
    """The post-process sources (step 6): legality and the vector parameter rows."""
    legal: jax.Array
    row_max_in: jax.Array           # uint64[lanes]: RowMaxIn (Mi x 1: Word i is row i)
    quant_row: jax.Array            # the vector quant parameters (row 0)
    relu_row: jax.Array             # the vector PReLU parameters


def _post_sources(state: State, cfg: MachineConfig, h: Header, blk: Block) -> _Post:
    """Step 6: PreQuantMode against the accumulator class (every PE), then the
    post-process sources after the mathematical ones (on a PE with rows):
    RowMaxIn Mi x 1 accumulator-typed, the vector quant and PReLU parameters
    1 x N U64 with every Word legal; RowMajor at location Any, defined."""
    # the view's tiles: PE `pe`'s storage.PeFile (dispatch._complete)
    tiles, W, HS = cast(PeFile, state.tiles), cfg.tile_words, cfg.hand_slots
    mode = h.pre_quant_mode
    rin_on = (h.row_max & h.row_max_init) == 1
    vec_on = _member(mode, pp.VECTOR_MODES)
    prelu_on = h.relu == 3
    o_rin = _math_sources(blk)
    o_q = o_rin + rin_on
    o_r = o_q + vec_on
    indices = [_source_at(h.sources, h.source_ok, o) for o in (o_rin, o_q, o_r)]

    def legal(index: jax.Array, vr: jax.Array, vc: jax.Array, dtype: jax.Array) -> tuple[jax.Array, jax.Array]:
        slot, alloc, s, defined = source(tiles, index, HS)
        good = ordinary_source_legal(s, alloc, defined, state.tile_capacity, W) \
            & (s["layout"] == ROW_MAJOR) & (s["location"] == LOC["Any"]) & (s["dtype"] == dtype) \
            & (s["valid_rows"] == vr) & (s["valid_cols"] == vc)
        return slot, good

    slots, ok = jax.vmap(legal)(_stack(*indices), _stack(blk.Mi, 1, 1), _stack(1, blk.N, blk.N),
                                _stack(blk.acc_type, DT["U64"], DT["U64"]))
    # RowMaxIn and the two parameter vectors, read only where some State of the batch has one
    reads = rin_on | vec_on | prelu_on
    L = lane_count(tiles)
    rows = jax.lax.cond(trip_count(reads.astype(jnp.int32)) > 0,
                        branch(lambda: payload(tiles, slots, W)), lambda: jnp.zeros((3, L), U64))
    in_row = jnp.arange(rows.shape[-1]) >= blk.N
    quant_ok = jnp.all(in_row | pp.quant_parameter_legal(mode, rows[1]))
    relu_ok = jnp.all(in_row | pp.relu_parameter_legal(rows[2]))
    sources_ok = (~rin_on | ok[0]) & (~vec_on | (ok[1] & quant_ok)) & (~prelu_on | (ok[2] & relu_ok))
    legal_all = pp.mode_matches_accumulator(mode, blk.acc_type) & (~blk.active | sources_ok)
    return _Post(legal_all, rows[0], rows[1], rows[2])


class _Destinations(NamedTuple):
    """The destination group (step 10): D, [RowMaxOut,] [GroupMaxOut]."""
    slots: jax.Array                # int32[3]
    tsize: jax.Array                # int32[3] bytes
    present: jax.Array              # bool[3]
    cols: jax.Array                 # int32[3]: the auxiliary outputs' columns (D's: N)
    mask: jax.Array                 # the tiles' PE mask
    legal: jax.Array                # slots found, budget, the auxiliary shapes (D's geometry apart)


def _destinations(state: State, cfg: MachineConfig, h: Header, blk: Block, pe: jax.Array) -> _Destinations:
    """Each destination the lowest free slot of its hand not taken by an earlier
    one; the Core budget for all of them (a cooperative fragment's own: one
    PE each, its own mask bit); each auxiliary output RowMajor M x cols,
    accumulator-typed (RowMax 1 column, GroupMax ceil(N / GroupN))."""
    tiles, HS = cast(PeFile, state.tiles), cfg.hand_slots      # the view's: a storage.PeFile (dispatch)
    dst = h.bound & h.has_dst
    ordinal = jnp.cumsum(dst) - 1
    rows = [jnp.argmax(dst & (ordinal == k)) for k in range(3)]
    present = jnp.stack([jnp.any(dst & (ordinal == k)) for k in range(3)])
    hands = jnp.stack([h.dst_hand[r] for r in rows])
    tsize = size_code_bytes(jnp.stack([h.size_code[r] for r in rows]))
    allocated = tiles.desc[:, COL_ALLOCATED] != 0
    slots, found, taken = [], [], jnp.zeros(allocated.shape, bool)
    for k in range(3):
        free = jax.lax.dynamic_slice_in_dim(~allocated & ~taken, hands[k] * HS, HS)
        slot = hands[k] * HS + jnp.argmax(free).astype(jnp.int32)
        slots.append(slot)
        found.append(jnp.any(free) | ~present[k])
        taken = taken | ((jnp.arange(allocated.shape[0]) == slot) & present[k])
    mask = jnp.where(blk.coop, 1 << (3 - pe), h.mask)
    charge = jnp.sum(jnp.where(present, pe_count(mask) * tsize, 0).astype(jnp.int64))
    budget_ok = local_pool_in_use(state, cfg) + charge <= capacity_register(state.tile_capacity)
    group_n = jnp.asarray(tables.FPATR_GROUP_N)[jnp.clip(h.group_n, 0, 9)]
    group_cols = (blk.N + group_n - 1) // jnp.maximum(group_n, 1)
    cols = jnp.stack([blk.N, jnp.where(h.row_max == 1, 1, group_cols), group_cols])
    shapes_ok = [~present[k] | ordinary_shape(tsize[k], cols[k], blk.Mi, cols[k], 32,
                                                cfg.tile_words)[0] for k in (1, 2)]
    legal = found[0] & found[1] & found[2] & budget_ok & shapes_ok[0] & shapes_ok[1]
    return _Destinations(jnp.stack(slots), tsize, present, cols, mask, legal)


def complete(state: State, h: Header, pe: jax.Array, cfg: MachineConfig, enable: jax.Array,
             ctx: Context) -> Completion:
    """Complete the matrix block with header `h` (its faults have no data address)."""
    # the named scopes label the compiled program's kernels by phase (benchmarks/profile.py)
    with jax.named_scope("checks"):
        blk = _decode(h, pe, cfg)
        gate_legal, (quant, relu) = _binding_stream(h, cfg, blk, row(state.gpr, pe))
        post = _post_sources(state, cfg, h, blk)
        indices = _local_indices(h, blk)
        c_idx = indices[0]
        dst = _destinations(state, cfg, h, blk, pe)
        d_hand, dslot, tsize = h.dst_hand[jnp.argmax(h.bound & h.has_dst)], dst.slots[0], dst.tsize[0]
        loc = _local_sources(state, cfg, blk, indices, h.pre_quant_mode, tsize)
        shr = _shared_sources(state, h, blk, loc.kb)

        # ---- destination (step 10): D's M layout, its element type, valid Mi x N
        out_type = pp.output_type(h.pre_quant_mode, blk.acc_type)
        d_cls = take(DT_CLASS, out_type)
        d_lay = jnp.clip(loc.d_lay, 0, 1)
        d_cr, d_cc, d_g, d_shape_ok = cube_geometry(d_lay, d_cls, blk.Mi, blk.N, tsize,
                                                    capacity_register(state.tile_capacity), cfg.tile_words)
        aux_on = (h.row_max == 1) | (h.group_max == 1)

        fault = settle(ordered_fault(
            ("MM.1 fpatr_present", ~h.fpatr_present, "Fault_BundleControl"),
            ("MM.3 gate", ~gate_legal, "Fault_TileLegality"),
            ("MM.4 gemv_rows", blk.is_gemv & (blk.M != 1), "Fault_TileLegality"),
            ("MM.5 transpose", (shr.trans_a & blk.a_local) | (shr.trans_b & blk.b_local),
             "Fault_TileLegality"),
            ("MM.6 post_sources", ~post.legal, "Fault_TileLegality"),
            ("MM.7s shared_sources", ~shr.sources_legal, "Fault_TileLegality"),
            ("MM.7 local_sources", ~loc.sources_legal, "Fault_TileLegality"),
            ("MM.8 acc_hand", blk.is_acc & (c_idx == d_hand), "Fault_TileLegality"),
            ("MM.10 destination", blk.active & (~dst.legal | ~d_shape_ok), "Fault_TileAllocation"),
        ))
        do = enable & (fault == 0) & blk.active
    with jax.named_scope("elements"):
        dg = DGeometry(d_lay, d_cr, d_cc, d_g, take(DT_BITS, out_type) == 4)
        col, lane_ok, acc_words = product(state, cfg, blk, loc, shr, dg, do)
        # the view's tiles: PE `pe`'s storage.PeFile (dispatch._complete)
        lane_col = jnp.clip(col, 0, lane_count(cast(PeFile, state.tiles)) - 1)

        def convert() -> tuple[jax.Array, jax.Array]:
            words, flags = pp.element(
                acc_words, h.pre_quant_mode, h.relu, blk.acc_type,
                jnp.where(_member(h.pre_quant_mode, pp.VECTOR_MODES), post.quant_row[lane_col], quant),
                jnp.where(h.relu == 3, post.relu_row[lane_col], relu),
                pp.rounding(h.pre_quant_mode, jnp.where(h.datr_present, h.rmode, 0)),
                h.datr_present & (h.sat != 0))
            return words, pp.or_all(jnp.where(lane_ok, flags, 0))       # D's valid M x N only
        # a batch where no State converts or activates keeps its accumulators as they are
        converts = do & ((h.pre_quant_mode != 0) | (h.relu != 0))
        d_words, flags = jax.lax.cond(trip_count(converts.astype(jnp.int32)) > 0, branch(convert),
                                      lambda: (acc_words, jnp.int32(0)))

    with jax.named_scope("writes"):
        # D's other payload Words keep their old values, undefined (the model configures
        # the descriptor and writes only the valid M x N Words)
        tiles = cast(PeFile, state.tiles)
        Mi, N = blk.Mi, blk.N
        d_mask = dst.mask
        vals: dict[str, jax.Array | int]
        vals = dict(dtype=out_type, layout=take(CUBE_TILE_LAYOUT, d_lay),
                    location=LOC["Matrix"], capacity=tsize, rows=d_g["storage_rows"],
                    cols=d_g["storage_cols"], valid_rows=Mi, valid_cols=N, k_repeat=d_g["k_repeat"],
                    n_repeat=d_g["n_repeat"], cell_count=d_g["cell_count"],
                    storage_bytes=d_g["required_bytes"], mask=d_mask, defined_valid=Mi * N)
        tiles = install(tiles, dslot, do, vals, d_words, lane_ok, lane_ok, cfg.tile_words)
        tiles, aux_flags = _install_reductions(tiles, cfg, h, blk, dst, post, acc_words, dg,
                                               do & aux_on)
        # CommitMatrixResult: the flags of D and of the reductions, sticky
        flags = jnp.where(do, flags | aux_flags, 0)
    return Completion(fault, U64(0), state.replace(tiles=tiles,
                                                   numeric_flags=state.numeric_flags | flags))


def _reductions(h: Header, blk: Block, post: _Post, acc_words: jax.Array, dg: DGeometry, go: jax.Array,
                n_out: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    """MatrixRowMaxResult / MatrixGroupMaxResult over D's raw accumulator Words,
    one column at a time (the fold's order is the model's: a tie keeps the
    earlier Word, and an FP32 Word passes through whole): (RowMax Words of
    rows 0..31, GroupMax Words row-major M x G in n_out Words, the flags of
    the enabled reductions' steps on D's valid rows)."""
    acc_type, max_abs = blk.acc_type, h.max_abs == 1
    rows = jnp.arange(32)
    d_cc = dg.cc
    lcr, lcc = log2(dg.cr), log2(d_cc)
    group_n = jnp.maximum(jnp.asarray(tables.FPATR_GROUP_N)[jnp.clip(h.group_n, 0, 9)], 1)
    G = (blk.N + group_n - 1) // group_n
    L = acc_words.shape[0]

    def lane(c: jax.Array) -> jax.Array:
        """D's lane of (row, c) for every row: its CUBE M layout (a 4-bit M16 CELL swizzled)."""
        q = c & (d_cc - 1)
        q = jnp.where(dg.b4 & (dg.lay == 0), q ^ (12 * (((q >> 2) ^ (q >> 3)) & 1)), q)
        return jnp.clip(((c >> lcc) << (lcr + lcc)) + (rows << lcc) + q, 0, L - 1)

    valid = rows < blk.Mi
    on_row, on_group = h.row_max == 1, h.group_max == 1

    def step(value: jax.Array, w: jax.Array, opens: jax.Array) -> tuple[jax.Array, jax.Array]:
        """A run's first Word (its own absolute step with MaxAbsEn) or the next step."""
        first, f_first = pp.reduction_step(w, w, True, acc_type)
        nxt, f_next = pp.reduction_step(value, w, max_abs, acc_type)
        opened = jnp.where(max_abs, first, w)
        return (jnp.where(opens, opened, nxt),
                jnp.where(opens, jnp.where(max_abs, f_first, 0), f_next))

    def body(c: jax.Array, carry: tuple[jax.Array, jax.Array, jax.Array, jax.Array]
             ) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
        # the batch runs to its largest N: a State's own columns end at its N
        row_v, grp_v, out, flags = carry
        w = acc_words[lane(c)]
        mine = c < blk.N
        row_n, row_f = step(row_v, w, c == 0)
        grp_n, grp_f = step(grp_v, w, c % group_n == 0)
        row_v, grp_v = jnp.where(mine, row_n, row_v), jnp.where(mine, grp_n, grp_v)
        new = jnp.where(on_row, row_f, 0) | jnp.where(on_group, grp_f, 0)
        flags = flags | pp.or_all(jnp.where(mine & valid, new, 0))
        closes = mine & ((c % group_n == group_n - 1) | (c == blk.N - 1))
        at = jnp.where(closes & valid, rows * G + c // group_n, n_out)
        return row_v, grp_v, out.at[at].set(grp_v, mode="drop"), flags

    zeros = jnp.zeros(32, U64)
    row_v, _, out, flags = jax.lax.fori_loop(0, trip_count(jnp.where(go, blk.N, 0)), body,
                                             (zeros, zeros, jnp.zeros(n_out, U64), jnp.int32(0)))
    init = on_row & (h.row_max_init == 1)
    row_in, init_f = pp.reduction_step(post.row_max_in[rows % L], row_v, max_abs, acc_type)
    row_v = jnp.where(init, row_in, row_v)
    flags = flags | pp.or_all(jnp.where(init & valid, init_f, 0))
    return row_v, out, jnp.where(go, flags, 0)


def _install_reductions(tiles: PeFile, cfg: MachineConfig, h: Header, blk: Block, dst: _Destinations,
                        post: _Post, acc_words: jax.Array, dg: DGeometry, go: jax.Array
                        ) -> tuple[PeFile, jax.Array]:
    """Publish RowMaxOut and GroupMaxOut (destinations 1 and 2 in stream order)
    after D: RowMajor at location Any, accumulator-typed, valid Mi x cols;
    (the tiles, the reductions' flags)."""
    n = aux_words(lane_count(tiles))
    row_v, group_v, flags = _reductions(h, blk, post, acc_words, dg, go, n)
    row_words = jnp.zeros(n, U64).at[:32].set(row_v[: min(32, n)]) if n >= 32 else row_v[:n]
    for k in (1, 2):
        is_row = (k == 1) & (h.row_max == 1)
        cols = dst.cols[k]
        fields: dict[str, jax.Array | int]
        fields = dict(dtype=blk.acc_type, layout=ROW_MAJOR, location=LOC["Any"],
                      capacity=dst.tsize[k], rows=(dst.tsize[k] * 8) // jnp.maximum(cols * 32, 1),
                      cols=cols, valid_rows=blk.Mi, valid_cols=cols, k_repeat=0, n_repeat=0,
                      cell_count=0, storage_bytes=0, mask=dst.mask, defined_valid=blk.Mi * cols)
        words = jnp.where(is_row, row_words, group_v)
        tiles = install_aux(tiles, k - 1, dst.slots[k], go & dst.present[k], fields, words,
                            cfg.tile_words)
    return tiles, flags


FAMILY = Family(families.BY_NAME["matrix"], complete,
                selects=lambda h: (h.op >= FIRST) & (h.op <= LAST))
