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

Every pair of one chunk runs at once, one State a pair, through
`pj.batch.run`; the chunks run in sequence. A chunk's D travels to the next
one through global memory in the accumulator type (FP32 / S32 / U32 Words,
stored and loaded back unchanged), since a State's Local tiles are never
released (state-and-transport F.8) and a fresh State per chunk keeps every
State the same size. The States' sizes come from the tile shape alone, so one
tile shape runs the same compiled programs whatever the matrix size.

What the split changes: rows and columns are independent, so tile_m and
tile_n never change a result; tile_k does where the accumulation is not
exact (ieee floating point): Bias is added once after chunk 0's K loop, not
after the whole sum (docs/numerics.md).
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

__all__ = ["gemm", "GEMM_ROWS"]

GEMM_ROWS = 32          # States a batch: pairs beyond it run as further batches of this size
_MAX_WORDS = 32768      # the model's tile bound (PTO_MODEL_TILE_ELEMENTS)
_STREAM_WORDS = 128     # every chunk's words padded to this: the longest (an MX chunk with the
                        # epilogue's three sources, RowMaxIn chained) is about 110
_MAX_COMMITS = 16       # bundles of a chunk: at most nine TLOADs, the matrix bundle, three TSTOREs


def _pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def _tile_words(n: int, k: int) -> int:
    """Payload Words enough for a tile shape's A (32 x k), B (k x n) and C / D (32 x n)
    in any type (their CELL-aligned storage rounds up to at most the next power of two)."""
    return _pow2(max(32 * k, k * n, 32 * n))


def _gm_bytes(n: int, k: int) -> int:
    """GM bytes enough for one chunk of a tile shape in any type: C, A, B, D of 4-byte
    elements, the E8M0 scales, Bias, the epilogue's U64 vectors and RowMaxIn, RowMax and
    GroupMax, each region 64-byte aligned."""
    kb = -(-k // 32)
    regions = (32 * n * 4, 32 * k * 4, 32 * kb, k * n * 4, kb * n, n * 4, 32 * 4, n * 8, n * 8,
               32 * n * 4, 32 * 4, 32 * n * 4)
    return sum(r + 64 for r in regions)


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _tile_arg(value, name: str, default: int, limit: int | None = None) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if limit is not None and value > limit:
        raise ValueError(f"{name} must be at most {limit} for this layout, got {value}")
    return int(value)


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
    layout: str
    tm: int
    tn: int
    tk: int
    ep: Epilogue         # the whole product's epilogue (its vectors span M and N)
    vectors: dict        # epilogue source name -> codes (RowMaxIn M x 1; quant, alpha 1 x N)
    nominal: tuple       # the tile shape asked for (m, n, k), before fitting it to the matrix:
                         # the States' sizes come from it, so every matrix shares programs

    @property
    def mi(self) -> int:
        return _ceil(self.op.M, self.tm)

    @property
    def nj(self) -> int:
        return _ceil(self.op.N, self.tn)

    @property
    def kk(self) -> int:
        return _ceil(self.op.K, self.tk)


@x64
def gemm(a, b, *, dtype: str, b_dtype: str | None = None, acc=None, bias=None, scales=None,
         layout: str | None = None, profile: str = "ieee", tile_m: int | None = None,
         tile_n: int | None = None, tile_k: int | None = None,
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
      j - 1's RowMax (row_max_init for the first).

    Returns what matmul returns. Raises MatmulFault (naming the tile, the
    chunk and the bundle) on an architectural fault, ValueError/TypeError
    on misuse, before any bundle runs.
    """
    plan = _plan(a, b, dtype, b_dtype, acc, bias, scales, layout, profile, tile_m, tile_n, tile_k,
                 pre_quant, quant_scale, quant_offset, shift, relu, row_max, row_max_init,
                 group_max, max_abs, rounding, saturate)
    if not isinstance(flags, bool):
        raise TypeError(f"flags must be True or False, got {type(flags).__name__}")
    return _Runner(plan, profile).run(flags)


def _plan(a, b, dtype, b_dtype, acc, bias, scales, layout, profile, tile_m, tile_n, tile_k,
          pre_quant, quant_scale, quant_offset, shift, relu, row_max, row_max_init,
          group_max, max_abs, rounding, saturate) -> _Plan:
    op = operands(a, b, dtype, b_dtype, profile, acc, bias, scales)
    if layout is None:
        layout = "CUBE_M32" if op.M > 16 else "CUBE_M16"
    if layout not in ("CUBE_M16", "CUBE_M32"):
        raise ValueError(f"layout must be 'CUBE_M16' or 'CUBE_M32', got {layout!r}")
    rows = 16 if layout == "CUBE_M16" else 32
    nominal = (_tile_arg(tile_m, "tile_m", rows, rows), _tile_arg(tile_n, "tile_n", 64),
               _tile_arg(tile_k, "tile_k", 64))
    tm, tn, tk = min(op.M, nominal[0]), min(op.N, nominal[1]), min(op.K, nominal[2])
    if op.mx and nominal[2] % 32 and tk < op.K:
        raise ValueError(f"MX products need tile_k a multiple of 32 (one E8M0 scale block), got {tk}")
    if group_max is not None and tn < op.N and group_max in tables.FPATR_GROUP_N and tn % group_max:
        raise ValueError(f"group_max={group_max} needs tile_n a multiple of it, got {tn}")
    ep = epilogue(op.acc_t, op.M, op.N, pre_quant, quant_scale, quant_offset, shift, relu, row_max,
                  row_max_init, group_max, max_abs, rounding, saturate)
    vectors = {load[0]: load[3] for load in ep.loads}
    return _Plan(op, layout, tm, tn, tk, ep, vectors, nominal)


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
    gprs: list            # (GPR index, value)


def _build(plan: _Plan, key: _Key) -> _Built:
    seq = build_sequence(_tile_operands(plan, key), plan.layout, False, _tile_ep(plan, key))
    words = np.asarray(assemble(seq.prog.source()), np.uint32)
    return _Built(seq, words, [(tables.gpr_index(r), v) for r, v in seq.prog.gprs.items()])


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
        for k in range(plan.kk):
            for key in self._keys_at(k):
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
        words_needed = max([_tile_words(n, kc)] + [b.seq.prog.words_needed for b in builds])
        gm_needed = max([_gm_bytes(n, kc)] + [len(b.seq.prog.gm) for b in builds])
        if words_needed > _MAX_WORDS:
            raise ValueError(f"a {m}x{n}x{kc} tile shape needs {words_needed} payload Words in one "
                             f"tile; the model holds at most {_MAX_WORDS} (lower tile_n or tile_k)")
        self.cfg = MachineConfig(gm_bytes=_pow2(gm_needed), tile_words=words_needed, hand_slots=4,
                                 shared_slots=1, shared_words=8, tile_capacity=(1 << 31) - 1,
                                 profile=self.profile)
        self.width = max([_STREAM_WORDS] + [len(b.words) for b in self.built.values()])
        self.d: np.ndarray | None = None                # the product, padded to whole tiles
        self.row_max_codes = np.zeros((op.M, 1), np.uint64)   # RowMax Words so far (the chain's RowMaxIn)
        self.row_max: np.ndarray | None = None
        self.group_max: np.ndarray | None = None
        self.raised = 0                                 # numeric flags, ORed over every State

    def _keys_at(self, k: int):
        plan, op = self.plan, self.plan.op
        ms = {plan.tm, op.M - (plan.mi - 1) * plan.tm}
        ns = {plan.tn, op.N - (plan.nj - 1) * plan.tn}
        kc = min(plan.tk, op.K - k * plan.tk)
        last = k == plan.kk - 1
        chained = (False, True) if last and plan.ep.row_cols and plan.nj > 1 else (False,)
        return [_Key(m, n, kc, k == 0, last, c) for m in ms for n in ns for c in chained]

    def _key(self, i: int, j: int, k: int) -> _Key:
        plan, op = self.plan, self.plan.op
        return _Key(min(plan.tm, op.M - i * plan.tm), min(plan.tn, op.N - j * plan.tn),
                    min(plan.tk, op.K - k * plan.tk), k == 0, k == plan.kk - 1,
                    k == plan.kk - 1 and bool(plan.ep.row_cols) and j > 0)

    def run(self, with_flags: bool):
        plan = self.plan
        # pairs N-tile-major, so that a chained RowMax's previous N tile ran in an earlier batch
        # or earlier in the same batch's last chunk
        pairs = [(i, j) for j in range(plan.nj) for i in range(plan.mi)]
        for p0 in range(0, len(pairs), GEMM_ROWS):
            self._run_pairs(pairs[p0: p0 + GEMM_ROWS])
        return self._result(with_flags)

    def _run_pairs(self, pairs: list):
        plan = self.plan
        prev = None                         # the previous chunk's D bytes, a row a pair
        for k in range(plan.kk):
            if k == plan.kk - 1 and plan.ep.row_cols and plan.nj > 1:
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
        gpr = np.zeros((R, 4, len(tables.GPR_NAMES)), np.uint64)
        words = np.zeros((R, self.width), np.uint32)
        lengths = np.zeros(R, np.int32)
        keys = [self._key(i, j, k) for i, j in pairs]
        groups: dict = {}
        for r in rows:
            groups.setdefault(keys[r], []).append(r)
        for key, idx in groups.items():
            built = self.built[key]
            ix = np.asarray(idx)
            i0 = np.asarray([pairs[r][0] * plan.tm for r in idx])
            j0 = np.asarray([pairs[r][1] * plan.tn for r in idx])
            k0 = np.full(len(idx), k * plan.tk)
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
            for reg, value in built.gprs:
                gpr[ix, 0, reg] = value
            words[ix, : len(built.words)] = built.words
            lengths[ix] = len(built.words)
        states = _fresh_states(self.cfg, R, jnp.asarray(gm), jnp.asarray(gpr))
        res = batch_run(states, words, lengths=lengths, cfg=self.cfg, donate=True, max_commits=_MAX_COMMITS,
                        uniform=True)
        bad = [r for r in rows if res.fault_code[r] != 0]
        if bad:
            self._fault(res, pairs, k, bad[0], keys)
        mem = np.asarray(res.state.gm)
        self.raised |= int(np.bitwise_or.reduce(res.numeric_flags[rows]))
        out = np.zeros((R, plan.tm * plan.tn * 4), np.uint8)
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
        where = (f"tile rows {i * plan.tm}..{i * plan.tm + keys[r].m - 1}, columns "
                 f"{j * plan.tn}..{j * plan.tn + keys[r].n - 1}, K chunk {k * plan.tk}.."
                 f"{k * plan.tk + keys[r].kc - 1}")
        raise MatmulFault(fault, address, f"{seq.prog.step_at(int(res.executed[r]))} of {where}")

    def _collect(self, seq: Sequence, key: _Key, ix: np.ndarray, tiles: list, mem: np.ndarray):
        """Place the last chunk's D (and reductions) of these pairs into the product."""
        plan, op = self.plan, self.plan.op
        g = len(ix)
        raw = mem[ix, seq.d_at: seq.d_at + key.m * seq.row_bytes].reshape(g * key.m, seq.row_bytes)
        d = read_d(raw, seq.out, g * key.m, key.n).reshape(g, key.m, key.n)
        if self.d is None:
            self.d = np.zeros((plan.mi * plan.tm, plan.nj * plan.tn), d.dtype)
        rows = np.asarray([i * plan.tm for i, _ in tiles])[:, None, None] + np.arange(key.m)[None, :, None]
        cols = np.asarray([j * plan.tn for _, j in tiles])[:, None, None] + np.arange(key.n)[None, None, :]
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
        op = self.plan.op
        assert self.d is not None          # every pair's last chunk placed its D
        d = self.d[: op.M, : op.N]
        names = tables.flag_names(self.raised)
        if not self.plan.ep.row_cols and not self.plan.ep.group_cols:
            return MatmulResult(d, None, None, names) if with_flags else d
        return MatmulResult(d, self.row_max, self.group_max, names)
