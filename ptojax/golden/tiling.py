"""`pj.golden.gemm`: golden products of any size, as the CUBE computes them.

A product too large for one bundle is split the way a compiler splits it
(docs/numerics.md, "Golden GEMMs"): D is cut into tiles of tile_m rows
(CUBE_M16 / CUBE_M32) by tile_n columns, K into chunks of tile_k. Each
(M-tile, N-tile) pair runs its K chunks in ascending order as an ACC chain:

- chunk 0: TLOADs of its A tile, B tile (and C, Bias, the MX scales),
  TMATMUL (.BIAS, .ACC when `acc` is given; TMATMULMX* for MX), TSTORE of D;
- chunk k > 0: TLOAD of the previous chunk's D as C, of A and B, TMATMUL.ACC,
  TSTORE of D;
- the B.FPATR epilogue, its sources and the reduction outputs on the last
  chunk only.

With core=True a tile is a group of tile_m = group_M rows (up to 128) that
ADR 0100's cooperative TMATMUL computes on the Core's four PEs, each chunk
the sequence of cooperative.py (Shared TLOADs of A and B, per-PE Local
TLOADs of C and Bias, the cooperative bundle, per-PE TSTOREs of D); the
Shared paths take only powers of two for N and K, so the columns and the K
chunks past the last whole tile are split into powers of two (largest
first) instead.

Every pair of one chunk runs at once, one State a pair, through
`pj.batch.run` (core=True: one Core State a pair, `pj.batch.run(...,
core=True)`); the chunks run in sequence. A chunk's D travels to the next
one through global memory in the accumulator type (FP32 / S32 / U32 Words,
stored and loaded back unchanged), since a State's Local tiles are never
released (state-and-transport F.8) and a fresh State per chunk keeps every
State the same size. The States' sizes come from the tile shape alone, so one
tile shape runs the same compiled programs whatever the matrix size.

What the split changes: rows and columns are independent, so tile_m and
tile_n (and core=True's column pieces) never change a result; tile_k does
where the accumulation is not exact (ieee floating point): Bias is added
once after chunk 0's K loop, not after the whole sum (docs/numerics.md).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .. import tables
from .._x64 import x64
from ..batch import run as batch_run
from ..isa.asm import assemble
from ..state import MachineConfig, State, reset
from .bundle import (Epilogue, MatmulFault, MatmulResult, Operands, Sequence, build_sequence,
                     epilogue, operands, read_acc, read_d)
from .cooperative import GROUP_M_MAX, build_cooperative, m_per_pe

__all__ = ["gemm", "GEMM_ROWS"]

GEMM_ROWS = 32          # States a batch: pairs beyond it run as further batches of this size
_MAX_WORDS = 32768      # the model's tile bound (PTO_MODEL_TILE_ELEMENTS)
_STREAM_WORDS = 128     # every chunk's words padded to this: the longest (an MX chunk with the
                        # epilogue's three sources, RowMaxIn chained) is about 110
_MAX_COMMITS = 16       # bundles of a chunk: at most nine TLOADs, the matrix bundle, three TSTOREs
_CORE_STREAM_WORDS = 256    # core=True: the longest (MX.ACC, every epilogue source and output
                            # on four PEs) is about 235 words
_CORE_MAX_COMMITS = 64      # core=True: four Shared TLOADs, four Local ones on each of four PEs,
                            # the matrix bundle, three TSTOREs on each PE: 33 bundles


def _pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def _tile_words(n: int, k: int) -> int:
    """Payload Words enough for a tile shape's A (32 x k), B (k x n) and C / D (32 x n)
    in any type (their CELL-aligned storage rounds up to at most the next power of two)."""
    return _pow2(max(32 * k, k * n, 32 * n))


def _shared_words(m: int, n: int, k: int) -> int:
    """core=True: Words enough for a Shared register of A (m x k) or B (k x n) in any
    type (a TSize of at least 128 bytes: 256 elements of a 4-bit type)."""
    return _pow2(max(256, m * k, k * n))


def _gm_bytes(m: int, n: int, k: int) -> int:
    """GM bytes enough for one chunk of an m x n x k tile shape in any type: C, A, B, D of
    4-byte elements, the E8M0 scales, Bias, the epilogue's U64 vectors and RowMaxIn,
    RowMax and GroupMax, each region 64-byte aligned."""
    kb = -(-k // 32)
    regions = (m * n * 4, m * k * 4, m * kb, k * n * 4, kb * n, n * 4, m * 4, n * 8, n * 8,
               m * n * 4, m * 4, m * n * 4)
    return sum(r + 64 for r in regions)


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _tile_arg(value, name: str, default: int, limit: int | None = None, why: str = "",
              pow2: bool = False) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if limit is not None and value > limit:
        raise ValueError(f"{name} must be at most {limit} {why}, got {value}")
    if pow2 and value & (value - 1):
        raise ValueError(f"{name} must be a power of two under core=True (the Shared paths take "
                         f"only powers of two for N and K), got {value}")
    return int(value)


class _Span(NamedTuple):
    """A tile's (or K chunk's) first row, column or k, and its size."""
    start: int
    size: int

    @property
    def end(self) -> int:
        return self.start + self.size - 1


def _uniform(total: int, tile: int) -> tuple:
    """Tiles of `tile`, the last one what is left."""
    return tuple(_Span(s, min(tile, total - s)) for s in range(0, total, tile))


def _pow2_pieces(total: int, tile: int) -> tuple:
    """Whole tiles of `tile` (a power of two), then what is left as powers of two,
    largest first (its binary digits): each piece starts on a multiple of its size."""
    spans = list(_uniform(total - total % tile, tile))
    at = total - total % tile
    for bit in reversed(range((total % tile).bit_length())):
        if total >> bit & 1:
            spans.append(_Span(at, 1 << bit))
            at += 1 << bit
    return tuple(spans)


class _Key(NamedTuple):
    """What a pair's bundle sequence depends on at one chunk (never the data)."""
    m: int               # rows of this tile (tile_m, or the ragged last)
    n: int               # columns
    kc: int              # depth of this chunk
    first: bool          # chunk 0: Bias, the user's C
    last: bool           # the last chunk: the epilogue
    chained_max: bool    # RowMaxIn is the previous N tile's RowMax


class _Plan(NamedTuple):
    op: Operands
    layout: str          # A's and D's layout (core=True: "", D's follows group_M)
    core: bool           # cooperative TMATMULs on the Core (a row tile is one group_M)
    rows: tuple          # the row tiles, _Spans
    cols: tuple          # the column tiles
    chunks: tuple        # the K chunks, ascending
    ep: Epilogue         # the whole product's epilogue (its vectors span M and N)
    vectors: dict        # epilogue source name -> codes (RowMaxIn M x 1; quant, alpha 1 x N)
    nominal: tuple       # the tile shape asked for (m, n, k), before fitting it to the matrix:
                         # the States' sizes come from it, so every matrix shares programs


@x64
def gemm(a, b, *, dtype: str, b_dtype: str | None = None, acc=None, bias=None, scales=None,
         layout: str | None = None, profile: str = "ieee", tile_m: int | None = None,
         tile_n: int | None = None, tile_k: int | None = None, core: bool = False,
         pre_quant: int = 0, quant_scale=None, quant_offset=None, shift=None, relu=None,
         row_max: bool = False, row_max_init=None, group_max: int | None = None,
         max_abs: bool = False, rounding: str = "RNE", saturate: bool = False,
         flags: bool = False):
    """D = epilogue([acc +] A @ B [+ bias]) for any M x K by K x N, as numpy.

    Takes every argument `pj.golden.matmul` takes (dtypes, acc, bias, MX
    scales, profile, the B.FPATR epilogue keywords, flags), except gemv,
    and computes the product with the bundle sequence described in this
    module's docstring:

    - layout: CUBE_M16 or CUBE_M32 for A and D (default CUBE_M32 when
      M > 16, else CUBE_M16);
    - tile_m (at most the layout's 16 / 32 rows), tile_n, tile_k: the tile
      shape (defaults: the layout's rows, 64 columns, 64 deep, less for a
      smaller matrix); MX products need tile_k a multiple of 32, group_max a
      tile_n that is a multiple of GroupN, unless one tile spans the matrix;
    - row_max over several N tiles chains them: tile j's RowMaxIn is tile
      j - 1's RowMax (row_max_init for the first);
    - core=True: ADR 0100's cooperative TMATMUL on the Core's four PEs
      (docs/numerics.md, "Golden GEMMs"): tile_m is group_M, 1..128
      (default min(M, 128): every PE a 32-row fragment, the fewest groups);
      tile_n and tile_k must be powers of two, and the columns and K past
      the last whole tile run as power-of-two pieces; layout does not apply
      (D's follows group_M). The epilogue, acc, bias and MX work as above,
      each PE loading its own rows of C and RowMaxIn; MX takes any tile_k
      (no power-of-two chunk spans a scale block); group_max also needs
      every column piece but the last a multiple of GroupN.

    Returns what matmul returns. Raises MatmulFault (naming the tile, the
    chunk and the bundle) on an architectural fault, ValueError/TypeError
    on misuse, before any bundle runs.
    """
    plan = _plan(a, b, dtype, b_dtype, acc, bias, scales, layout, profile, tile_m, tile_n, tile_k,
                 core, pre_quant, quant_scale, quant_offset, shift, relu, row_max, row_max_init,
                 group_max, max_abs, rounding, saturate)
    if not isinstance(flags, bool):
        raise TypeError(f"flags must be True or False, got {type(flags).__name__}")
    return _Runner(plan, profile).run(flags)


def _plan(a, b, dtype, b_dtype, acc, bias, scales, layout, profile, tile_m, tile_n, tile_k,
          core, pre_quant, quant_scale, quant_offset, shift, relu, row_max, row_max_init,
          group_max, max_abs, rounding, saturate) -> _Plan:
    if not isinstance(core, bool):
        raise TypeError(f"core must be True or False, got {type(core).__name__}")
    op = operands(a, b, dtype, b_dtype, profile, acc, bias, scales)
    if core:
        if layout is not None:
            raise ValueError(f"layout does not apply under core=True (D's layout follows group_M: "
                             f"CUBE_M16 up to 64 rows, else CUBE_M32), got {layout!r}")
        layout = ""
        nominal = (_tile_arg(tile_m, "tile_m", GROUP_M_MAX, GROUP_M_MAX, "(group_M) under core=True"),
                   _tile_arg(tile_n, "tile_n", 64, pow2=True), _tile_arg(tile_k, "tile_k", 64, pow2=True))
        split = _pow2_pieces
    else:
        if layout is None:
            layout = "CUBE_M32" if op.M > 16 else "CUBE_M16"
        if layout not in ("CUBE_M16", "CUBE_M32"):
            raise ValueError(f"layout must be 'CUBE_M16' or 'CUBE_M32', got {layout!r}")
        rows = 16 if layout == "CUBE_M16" else 32
        nominal = (_tile_arg(tile_m, "tile_m", rows, rows, "for this layout"),
                   _tile_arg(tile_n, "tile_n", 64), _tile_arg(tile_k, "tile_k", 64))
        split = _uniform
    row_tiles = _uniform(op.M, nominal[0])
    cols, chunks = split(op.N, nominal[1]), split(op.K, nominal[2])
    # (core=True's chunks are powers of two, each on a multiple of its size: none spans a
    # scale block boundary)
    if op.mx and not core and nominal[2] % 32 and len(chunks) > 1:
        raise ValueError(f"MX products need tile_k a multiple of 32 (one E8M0 scale block), "
                         f"got {min(op.K, nominal[2])}")
    if group_max is not None and group_max in tables.FPATR_GROUP_N and any(
            c.size % group_max for c in cols[:-1]):
        raise ValueError(f"group_max={group_max} needs tile_n a multiple of it (and under core=True "
                         f"every power-of-two piece of N's remainder but the last), got column tiles "
                         f"of {sorted({c.size for c in cols})}")
    ep = epilogue(op.acc_t, op.M, op.N, pre_quant, quant_scale, quant_offset, shift, relu, row_max,
                  row_max_init, group_max, max_abs, rounding, saturate)
    vectors = {load[0]: load[3] for load in ep.loads}
    return _Plan(op, layout, core, row_tiles, cols, chunks, ep, vectors, nominal)


# ------------------------------------------------------------------ the sequences


def _tile_ep(plan: _Plan, key: _Key) -> Epilogue:
    """A tile's epilogue at a chunk: none before the last chunk; on the last,
    the product's with its vectors cut to the tile (placeholders: the data
    goes into GM per pair)."""
    ep = plan.ep
    if not key.last:
        return Epilogue((0,) * 9, [], [], plan.op.acc_t, 0, 0, "Default", 0)
    fields = list(ep.fields)
    loads = []
    for name, lay, dt, _, hand, kind in ep.loads:
        shape = (key.m, 1) if name == "RowMaxIn" else (1, key.n)
        loads.append((name, lay, dt, np.zeros(shape, np.uint64), hand, kind))
    if key.chained_max and "RowMaxIn" not in plan.vectors:
        loads.insert(0, ("RowMaxIn", "ordinary", plan.op.acc_t, np.zeros((key.m, 1), np.uint64), "U", "row"))
        fields[5] = 1
    group_n = tables.FPATR_GROUP_N[fields[2]]
    return ep._replace(fields=tuple(fields), loads=loads,
                       group_cols=_ceil(key.n, group_n) if group_n else 0)


def _tile_operands(plan: _Plan, key: _Key) -> Operands:
    """Placeholder operands of a key's shapes (zeros: the data goes into GM per pair)."""
    op = plan.op
    z = lambda r, c: np.zeros((r, c), np.uint64)   # noqa: E731
    kb = _ceil(key.kc, 32)
    has_c = not key.first or op.c is not None
    return Operands(op.at, op.bt, op.acc_t, z(key.m, key.kc), z(key.kc, key.n),
                    z(key.m, key.n) if has_c else None,
                    None if op.sa is None else z(key.m, kb), None if op.sb is None else z(kb, key.n),
                    z(1, key.n) if key.first and op.bias is not None else None, op.mx)


class _Built(NamedTuple):
    seq: Sequence
    words: np.ndarray     # the assembled stream
    gprs: list            # (GPR index, [PE0..PE3 values])


def _build(plan: _Plan, key: _Key) -> _Built:
    op, ep = _tile_operands(plan, key), _tile_ep(plan, key)
    seq = build_cooperative(op, ep) if plan.core else build_sequence(op, plan.layout, False, ep)
    words = np.asarray(assemble(seq.prog.source()), np.uint32)
    return _Built(seq, words, seq.prog.gpr_values())


# ------------------------------------------------------------------ operand bytes


def _pack_rows(codes: np.ndarray, bits: int) -> np.ndarray:
    """Row-major ND bytes of a batch of code tiles [G, r, c] -> uint8 [G, r * stride]
    (the layout matmul's pack_nd gives one tile)."""
    g, r, c = codes.shape
    if bits == 4:
        if c % 2:
            codes = np.concatenate([codes, np.zeros((g, r, 1), codes.dtype)], axis=2)
        nib = (codes & np.uint64(0xF)).astype(np.uint8)
        return (nib[:, :, 0::2] | (nib[:, :, 1::2] << 4)).reshape(g, -1)
    word = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}[bits]
    return codes.astype(word).astype(np.dtype(word).newbyteorder("<")).view(np.uint8).reshape(g, -1)


def _cut(x: np.ndarray, r0: np.ndarray, nr: int, c0: np.ndarray, nc: int) -> np.ndarray:
    """x[r0[g] : r0[g] + nr, c0[g] : c0[g] + nc] for every g: [G, nr, nc]."""
    rows = r0[:, None, None] + np.arange(nr)[None, :, None]
    cols = c0[:, None, None] + np.arange(nc)[None, None, :]
    return x[rows, cols]


# ------------------------------------------------------------------ running


@functools.partial(jax.jit, static_argnums=(0, 1))
def _fresh_states(cfg: MachineConfig, rows: int, gm: jax.Array, gpr: jax.Array) -> State:
    """`rows` reset States with these GMs and GPRs: one program that writes
    them, not one transfer a leaf."""
    fresh = jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a, (rows,) + a.shape), reset(cfg))
    return fresh.replace(gm=gm, gpr=gpr)


class _Runner:
    """Runs a plan: pairs in batches of GEMM_ROWS, each batch's chunks in order."""

    def __init__(self, plan: _Plan, profile: str):
        self.plan = plan
        self.profile = profile
        self.built: dict = {}
        op = plan.op
        for k in range(len(plan.chunks)):
            for key in self._keys_at(k):
                if key not in self.built:
                    self.built[key] = _build(plan, key)
        # sizes from the nominal tile shape only, so that every operand type, layout and
        # epilogue of one tile shape and profile share the compiled program
        m, n, kc = plan.nominal
        try:
            sizing = [_build(plan, _Key(m, n, kc, first, True, bool(plan.ep.row_cols)))
                      for first in (True, False)]
        except ValueError as e:
            raise ValueError(f"the {m}x{n}x{kc} tile shape does not fit one bundle: {e} "
                             f"(lower tile_n or tile_k)") from None
        builds = sizing + list(self.built.values())
        if plan.core:       # A and B in Shared registers: the Local tiles are C, D (M_per_PE x n),
                            # Bias and the epilogue's vectors
            words_needed = max([_pow2(m_per_pe(m) * n)] + [b.seq.prog.words_needed for b in builds])
            shared_needed = max([_shared_words(m, n, kc)] + [b.seq.prog.shared_words_needed for b in builds])
            gm_needed = max([_gm_bytes(m, n, kc)] + [len(b.seq.prog.gm) for b in builds])
            stream_words, self.max_commits = _CORE_STREAM_WORDS, _CORE_MAX_COMMITS
        else:
            words_needed = max([_tile_words(n, kc)] + [b.seq.prog.words_needed for b in builds])
            shared_needed = 8
            gm_needed = max([_gm_bytes(32, n, kc)] + [len(b.seq.prog.gm) for b in builds])
            stream_words, self.max_commits = _STREAM_WORDS, _MAX_COMMITS
        if max(words_needed, shared_needed) > _MAX_WORDS:
            what = "Shared register" if shared_needed > _MAX_WORDS else "tile"
            raise ValueError(f"a {m}x{n}x{kc} tile shape needs {max(words_needed, shared_needed)} payload "
                             f"Words in one {what}; the model holds at most {_MAX_WORDS} (lower tile_n "
                             f"or tile_k{', or tile_m' if plan.core else ''})")
        # Local tile slots a hand: a State's pools hold hand_slots x 4 hands tiles at their
        # largest, and writing a chunk's fresh States was a third of its time, so the pools
        # are sized by the most tiles a bundle sequence allocates in one hand (a plain
        # product: one, golden.bundle's hands); four classes, not one a count, keep one
        # program a tile shape for most products
        most = max(n for b in builds for n in b.seq.prog.used.values())
        self.cfg = MachineConfig(gm_bytes=_pow2(gm_needed), tile_words=words_needed,
                                 hand_slots=next(h for h in (1, 2, 4, tables.HAND_SLOTS) if most <= h),
                                 shared_slots=4 if plan.core else 1, shared_words=shared_needed,
                                 tile_capacity=(1 << 31) - 1, profile=self.profile)
        self.width = max([stream_words] + [len(b.words) for b in self.built.values()])
        self.d: np.ndarray | None = None                # the product
        self.row_max_codes = np.zeros((op.M, 1), np.uint64)   # RowMax Words so far (the chain's RowMaxIn)
        self.row_max: np.ndarray | None = None
        self.group_max: np.ndarray | None = None
        self.raised = 0                                 # numeric flags, ORed over every State

    def _keys_at(self, k: int):
        plan = self.plan
        ms = {s.size for s in plan.rows}
        ns = {s.size for s in plan.cols}
        kc = plan.chunks[k].size
        last = k == len(plan.chunks) - 1
        chained = (False, True) if last and plan.ep.row_cols and len(plan.cols) > 1 else (False,)
        return [_Key(m, n, kc, k == 0, last, c) for m in ms for n in ns for c in chained]

    def _key(self, i: int, j: int, k: int) -> _Key:
        plan = self.plan
        last = k == len(plan.chunks) - 1
        return _Key(plan.rows[i].size, plan.cols[j].size, plan.chunks[k].size, k == 0, last,
                    last and bool(plan.ep.row_cols) and j > 0)

    def run(self, with_flags: bool):
        plan = self.plan
        # pairs N-tile-major, so that a chained RowMax's previous N tile ran in an earlier batch
        # or earlier in the same batch's last chunk
        pairs = [(i, j) for j in range(len(plan.cols)) for i in range(len(plan.rows))]
        for p0 in range(0, len(pairs), GEMM_ROWS):
            self._run_pairs(pairs[p0: p0 + GEMM_ROWS])
        return self._result(with_flags)

    def _run_pairs(self, pairs: list):
        plan = self.plan
        prev = None                         # the previous chunk's D bytes, a row a pair
        last = len(plan.chunks) - 1
        for k in range(len(plan.chunks)):
            if k == last and plan.ep.row_cols and len(plan.cols) > 1:
                # RowMax chains over N tiles: the last chunk one N tile at a time
                for j in sorted({j for _, j in pairs}):
                    rows = [r for r, (_, jj) in enumerate(pairs) if jj == j]
                    self._chunk(pairs, k, prev, rows)
            else:
                prev = self._chunk(pairs, k, prev, list(range(len(pairs))))

    def _chunk(self, pairs: list, k: int, prev, rows: list):
        """Run chunk k of `pairs` (only the rows listed; the others run no words)."""
        plan, op = self.plan, self.plan.op
        R = GEMM_ROWS
        gm = np.zeros((R, self.cfg.gm_bytes), np.uint8)
        gpr = np.zeros((R, tables.NUM_PES, len(tables.GPR_NAMES)), np.uint64)
        words = np.zeros((R, self.width), np.uint32)
        lengths = np.zeros(R, np.int32)
        keys = [self._key(i, j, k) for i, j in pairs]
        groups: dict = {}
        for r in rows:
            groups.setdefault(keys[r], []).append(r)
        for key, idx in groups.items():
            built = self.built[key]
            ix = np.asarray(idx)
            i0 = np.asarray([plan.rows[pairs[r][0]].start for r in idx])
            j0 = np.asarray([plan.cols[pairs[r][1]].start for r in idx])
            k0 = np.full(len(idx), plan.chunks[k].start)
            zero = np.zeros(len(idx), np.int64)
            placed = built.seq.prog.placed
            data = {"A": (op.a, op.at.bits, i0, key.m, k0, key.kc),
                    "B": (op.b, op.bt.bits, k0, key.kc, j0, key.n)}
            if op.sa is not None:
                data["sA"] = (op.sa, 8, i0, key.m, k0 // 32, _ceil(key.kc, 32))
            if op.sb is not None:
                data["sB"] = (op.sb, 8, k0 // 32, _ceil(key.kc, 32), j0, key.n)
            if key.first and op.c is not None:
                data["C"] = (op.c, 32, i0, key.m, j0, key.n)
            if key.first and op.bias is not None:
                data["Bias"] = (op.bias, 32, zero, 1, j0, key.n)
            if key.last:
                for name in ("quant", "alpha"):
                    if name in plan.vectors:
                        data[name] = (plan.vectors[name], 64, zero, 1, j0, key.n)
                if key.chained_max:
                    data["RowMaxIn"] = (self.row_max_codes, 32, i0, key.m, zero, 1)
                elif "RowMaxIn" in plan.vectors:
                    data["RowMaxIn"] = (plan.vectors["RowMaxIn"], 32, i0, key.m, zero, 1)
            for name, (src, bits, r0, nr, c0, nc) in data.items():
                at, _ = placed[name]
                raw = _pack_rows(_cut(src, r0, nr, c0, nc), bits)
                gm[ix, at: at + raw.shape[1]] = raw
            if "C" in placed and not key.first:
                at, _ = placed["C"]
                gm[ix, at: at + key.m * key.n * 4] = prev[ix, : key.m * key.n * 4]
            for reg, values in built.gprs:
                gpr[ix, :, reg] = values
            words[ix, : len(built.words)] = built.words
            lengths[ix] = len(built.words)
        states = _fresh_states(self.cfg, R, jnp.asarray(gm), jnp.asarray(gpr))
        res = batch_run(states, words, lengths=lengths, cfg=self.cfg, donate=True,
                        max_commits=self.max_commits, uniform=True, core=plan.core)
        bad = [r for r in rows if res.fault_code[r] != 0]
        if bad:
            self._fault(res, pairs, k, bad[0], keys)
        mem = np.asarray(res.state.gm)
        self.raised |= int(np.bitwise_or.reduce(res.numeric_flags[rows]))
        out = np.zeros((R, plan.rows[0].size * max(c.size for c in plan.cols) * 4), np.uint8)
        for key, idx in groups.items():
            seq = self.built[key].seq
            ix = np.asarray(idx)
            nbytes = key.m * seq.row_bytes
            out[ix, :nbytes] = mem[ix, seq.d_at: seq.d_at + nbytes]
            if key.last:
                self._collect(seq, key, ix, [pairs[r] for r in idx], mem)
        return out

    def _fault(self, res, pairs, k, r, keys):
        plan = self.plan
        i, j = pairs[r]
        seq = self.built[keys[r]].seq
        fault = tables.FAULTS[int(res.fault_code[r])]
        address = int(res.fault_address[r]) if fault in tables.MEMORY_FAULTS else None
        rs, cs, ks = plan.rows[i], plan.cols[j], plan.chunks[k]
        where = f"tile rows {rs.start}..{rs.end}, columns {cs.start}..{cs.end}, K chunk {ks.start}..{ks.end}"
        raise MatmulFault(fault, address, f"{seq.prog.step_at(int(res.executed[r]))} of {where}")

    def _collect(self, seq: Sequence, key: _Key, ix: np.ndarray, tiles: list, mem: np.ndarray):
        """Place the last chunk's D (and reductions) of these pairs into the product."""
        plan, op = self.plan, self.plan.op
        g = len(ix)
        raw = mem[ix, seq.d_at: seq.d_at + key.m * seq.row_bytes].reshape(g * key.m, seq.row_bytes)
        d = read_d(raw, seq.out, g * key.m, key.n).reshape(g, key.m, key.n)
        if self.d is None:
            self.d = np.zeros((op.M, op.N), d.dtype)
        rows = np.asarray([plan.rows[i].start for i, _ in tiles])[:, None, None] + np.arange(key.m)[None, :, None]
        cols = np.asarray([plan.cols[j].start for _, j in tiles])[:, None, None] + np.arange(key.n)[None, None, :]
        self.d[rows, cols] = d
        for (name, c), at in zip(seq.aux, seq.aux_at):
            raw = mem[ix, at: at + key.m * c * 4].reshape(g * key.m, c * 4)
            vals = read_acc(raw, op.acc_t, g * key.m, c).reshape(g, key.m, c)
            if name == "RowMax":       # N tiles in ascending order: the last one's is the row's
                if self.row_max is None:
                    self.row_max = np.zeros(op.M, vals.dtype)
                self.row_max[rows[:, :, 0]] = vals[:, :, 0]
                self.row_max_codes[rows[:, :, 0], 0] = vals[:, :, 0].view(np.uint32)
            else:
                group = tables.FPATR_GROUP_N[plan.ep.fields[2]]
                if self.group_max is None:
                    self.group_max = np.zeros((op.M, _ceil(op.N, group)), vals.dtype)
                gcols = (cols[:, :, :1] // group) + np.arange(c)[None, None, :]
                self.group_max[rows, gcols] = vals

    def _result(self, with_flags: bool):
        assert self.d is not None          # every pair's last chunk placed its D
        d = self.d
        names = tables.flag_names(self.raised)
        if not self.plan.ep.row_cols and not self.plan.ep.group_cols:
            return MatmulResult(d, None, None, names) if with_flags else d
        return MatmulResult(d, self.row_max, self.group_max, names)
