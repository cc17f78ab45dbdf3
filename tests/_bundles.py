"""Shared helpers of the scenario tests: bundle words, State edits and views, setups.

Several test files build the same instruction words (BSTART of a DataType name,
CUBE TLOAD / TSTORE blocks, matrix and cooperative blocks), edit and read
States the same way, and load operands through the same setups. They import
those helpers from here, not from one another's test_*.py files, so no test
file depends on another one. The encoders of ptojax.isa.encode (datr, dim,
ior, ios, iot_*, fpatr, FPATR0, BSTOP) are imported from there directly.

Helpers that run words take the runner as an argument (`run_ok`, `Setup`,
`Core`, `e6_mask_state`): a scenario file passes its own module-level `run` /
`run_core` at call time, so that tests/_scenarios.py, which loads the file a
second time with those names bound to pj.run / pj.run_core, still makes the
JAX executor run every word (setup loads included).
"""

import jax
import numpy as np

import ptojax as pj
from ptojax import tables
from ptojax.isa import encode
from ptojax.isa.encode import (BSTOP, FPATR0, datr, dim, ior, ios, iot_dst, iot_src, iot_src2,
                               iot_src2_dst, iot_src_dst)
from ptojax.reference import layouts as ref_layouts
from ptojax.state import own_words, slot_window, state_differences, tile_words, write_tile_words

# ----------------------------------------------------------------- configs and constants

SMALL = pj.preset("small")
OLD = SMALL.replace(semantics="0.58.3")
PES = range(4)
X2, X3 = tables.gpr_index("x2"), tables.gpr_index("x3")
LAYOUT_CODE = {"CUBE_M32": 21, "CUBE_M16": 22, "CUBE_N8": 23}     # B.DATR ND2M32/ND2M16/ND2N8
FP16 = {1.0: 0x3C00, 1.5: 0x3E00, 2.25: 0x4080, 2.0: 0x4000, 3.0: 0x4200, -0.0: 0x8000,
        2 ** -24: 0x0001, 65504.0: 0x7BFF, "inf": 0x7C00, "-inf": 0xFC00, "nan": 0x7E00}


# ----------------------------------------------------------------- words


def code(dt):
    return tables.dtype(dt).code


def bstart(op, dt):
    """BSTART.<op> of a DataType name or code."""
    return encode.bstart(op, code(dt))


def mstart(op, dt):
    """BSTART.<matrix op> AType (A.1)."""
    return bstart(op, dt)


def iot(*srcs, hand=None, size=1, pemode=7, last=1):
    """B.IOT of any form: 0-2 sources and an optional destination hand."""
    if hand is None:
        return {1: iot_src, 2: iot_src2}[len(srcs)](*srcs, pemode, last)
    return {0: iot_dst, 1: iot_src_dst, 2: iot_src2_dst}[len(srcs)](*srcs, hand, size, pemode, last)


def dims(m=None, n=None, k=None):
    """B.DIM LB0 = M, LB1 = N, LB2 = K for the given values."""
    return [dim(i, v) for i, v in enumerate((m, n, k)) if v is not None]


def cube_load(layout_code, dt, vr, vc, hand=0, size=1, pemode=1, pad=3, regs=False):
    words = [bstart("TLOAD", dt), datr(layout_code, 31, pad), dim(0, vc), dim(1, vr),
             iot_dst(hand, size, pemode)]
    if regs:
        words.append(ior(X2, X3))
    return words + [BSTOP]


def cube_store(layout_code, dt, vr, vc, src=0, pemode=1, pad=3, regs=False):
    words = [bstart("TSTORE", dt), datr(layout_code, 31, pad), dim(0, vc), dim(1, vr),
             iot_src(src, pemode)]
    if regs:
        words.append(ior(X2, X3))
    return words + [BSTOP]


def sload(dt, sid, vr, vc, cols, size, pemode=7, regs=(X2, X3), extra=()):
    """A Shared TLOAD block: LB0 valid columns, LB1 valid rows, LB2 columns."""
    words = [bstart("TLOAD", dt), *extra, dim(0, vc), dim(1, vr), dim(2, cols),
             ios(sid, pemode, size)]
    if regs:
        words.append(ior(*regs))
    return words + [BSTOP]


def matmul_words(op, atype, srcs, m=None, n=None, k=None, hand=0, size=1, pemode=7,
                 fp=FPATR0, extra=(), split=False):
    """A matrix block: BSTART, [extra header], B.FPATR, B.DIM, B.IOT(s), BSTOP.

    split=False: one B.IOT per pair of sources, D on the first one (E1 style);
    split=True: D alone on a first destination-and-source B.IOT (E2/E3 style)."""
    words = [mstart(op, atype), *extra, fp, *dims(m, n, k)]
    srcs = list(srcs)
    bindings = []
    if split:
        bindings.append(iot(srcs.pop(0), hand=hand, size=size, pemode=pemode, last=0))
    while srcs:
        pair, srcs = srcs[:2], srcs[2:]
        dst = hand if not bindings and not split else None
        bindings.append(iot(*pair, hand=dst, size=size, pemode=pemode, last=0))
    bindings[-1] |= 1 << 19
    return words + bindings + [BSTOP]


def coop(op, atype, sids, srcs=(), G=None, N=None, K=None, hand=0, size=2, pemode=7,
         fp=FPATR0, extra=(), ios_pemode=None, ios_size=0):
    """A matrix block with Shared operands: BSTART, [extra], B.FPATR, B.DIM
    (LB0 = group_M), one B.IOS per Shared id, then D (and Local sources) on B.IOTs."""
    words = [mstart(op, atype), *extra, fp, *dims(G, N, K)]
    words += [ios(sid, pemode if ios_pemode is None else ios_pemode, ios_size) for sid in sids]
    srcs = list(srcs)
    bindings = [iot(*srcs[:2], hand=hand, size=size, pemode=pemode, last=0)]
    srcs = srcs[2:]
    while srcs:
        bindings.append(iot(*srcs[:2], pemode=pemode, last=0))
        srcs = srcs[2:]
    bindings[-1] |= 1 << 19
    return words + bindings + [BSTOP]


# ----------------------------------------------------------------- GM bytes


def pack(matrix, d):
    """Dense row-major GM bytes of `matrix` (raw element values) in dtype d."""
    out = bytearray()
    for row in matrix:
        if d.bits == 4:
            b = bytearray((len(row) + 1) // 2)
            for c, v in enumerate(row):
                b[c // 2] |= (v & 0xF) << (4 * (c % 2))
            out += b
        else:
            for v in row:
                out += (v & ((1 << d.bits) - 1)).to_bytes(d.element_bytes, "little")
    return bytes(out)


def row_bytes(cols, d):
    return (cols * d.bits + 7) // 8


# ----------------------------------------------------------------- State edits


def small():
    return pj.reset(pj.preset("small"))


def poke(s, **fields):
    """Replace top-level State fields (numpy or ints) with 64-bit JAX enabled."""
    with jax.enable_x64(True):
        return s.replace(**{k: jax.numpy.asarray(np.asarray(v, np.asarray(getattr(s, k)).dtype))
                            for k, v in fields.items()})


def poke_tiles(s, field, index, value, pe=0):
    """Set one entry of PE `pe`'s Tiles array (index: a slot, or (slot, word) for
    words/defined: Word `word` of an allocated slot, or pool slot `word` of the
    window a free slot would be placed at: stale, it has no dtype yet)."""
    t = {k: np.asarray(v) for k, v in s.tiles.items()}
    t["words"], t["defined"] = t["words"].copy(), t["defined"].copy()
    t[field] = t[field].copy()
    part = ("words", "defined").index(field) if field in ("words", "defined") else None
    if part is not None and t["allocated"][pe, index[0]]:
        slot, word = index
        row = tile_words(t, pe, slot)
        row[part][word] = value
        write_tile_words(t, pe, slot, *row)
    elif part is not None:
        slot_window(t, pe, index[0])[part][index[1]] = value
    else:
        t[field][pe][index] = value
    with jax.enable_x64(True):
        return s.replace(tiles=s.tiles.replace(**{k: jax.numpy.asarray(t[k])
                                                  for k in {field, "words", "defined"}}))


def poke_local(s, pe, index, **fields):
    """Edit descriptor fields / whole payload rows of one Local slot of PE `pe`."""
    hs = s.tiles.base.shape[1] // 4
    slot = (index // 16) * hs + index % 16
    t = {k: np.asarray(v).copy() for k, v in s.tiles.items()}
    for k, v in fields.items():
        if k in ("words", "defined"):      # the slot's W payload Words
            row = tile_words(t, pe, slot)
            row[("words", "defined").index(k)][:] = v
            write_tile_words(t, pe, slot, *row)
        else:
            t[k][pe, slot] = v
    new = {k: t[k] for k in fields}
    with jax.enable_x64(True):
        return s.replace(tiles=s.tiles.replace(**{k: jax.numpy.asarray(v) for k, v in new.items()}))


def write_memory(s, addr, data):
    g = np.asarray(s.gm).copy()
    g[addr:addr + len(data)] = np.frombuffer(bytes(data), np.uint8)
    return poke(s, gm=g)


def write_gpr(s, name, value, pe=0):
    r = np.asarray(s.gpr).copy()
    r[pe, tables.gpr_index(name)] = value & ((1 << 64) - 1)
    return poke(s, gpr=r)


def with_regs(s, pe=0, **regs):
    for name, v in regs.items():
        s = write_gpr(s, name, v, pe)
    return s


def gpr_all(s, reg, value):
    """Write GPR `reg` of all four PEs."""
    for p in PES:
        s = pj.write_gpr(s, reg, value, pe=p)
    return s


# ----------------------------------------------------------------- State views


def gm(s, addr, n):
    return pj.read_memory(s, addr, n)


def tile(s, index, pe=0):
    """Descriptor and payload of TileIndex `index` in PE `pe`'s Local file
    (own slot mapping, state.py: leaves are [PE, slot, ...])."""
    hs = s.tiles.base.shape[1] // 4
    slot = (index // 16) * hs + index % 16
    out = {k: np.asarray(v)[pe, slot] for k, v in s.tiles.items() if k not in ("words", "defined")}
    out["words"], out["defined"] = own_words(s.tiles, pe, slot)    # its own pool Words
    return out


local = tile        # local(s, index, pe): the name the Shared and TMOV scenarios read


def allocated(s, pe=0):
    """The allocated TileIndices of PE `pe`'s Local file, ascending."""
    hs = s.tiles.base.shape[1] // 4
    return [(slot // hs) * 16 + slot % hs
            for slot in np.flatnonzero(np.asarray(s.tiles.allocated)[pe])]


def charge(s, pe=0):
    t = s.tiles
    return int(sum(bin(int(m)).count("1") * int(c) for a, m, c in
                   zip(np.asarray(t.allocated)[pe], np.asarray(t.mask)[pe],
                       np.asarray(t.capacity)[pe]) if a))


def record(s, sid):
    """The Shared record holding `sid` (a dict of its fields), None without one."""
    hits = np.flatnonzero(np.asarray(s.shared.sid) == sid)
    if not hits.size:
        return None
    assert hits.size == 1
    return {k: np.asarray(v)[hits[0]] for k, v in s.shared.items()}


def same_except(a, b, *names):
    """Every leaf but the named top-level fields is identical."""
    return not state_differences(a, b, skip=names)


def matrix_of(s, index, layout, dt, rows, cols):
    """The valid region of a CUBE tile as raw Words."""
    words = tile(s, index)["words"]
    at = ref_layouts.index_function(layout, tables.dtype(dt), rows, cols)
    return [[int(words[at(r, c)]) for c in range(cols)] for r in range(rows)]


# ----------------------------------------------------------------- running words


def run_ok(run, s, words, *, all_executed=True, **kw):
    """run(s, words, **kw) completes without a fault (and, with all_executed,
    executes every word); returns the new State. `run` is the caller's runner:
    a scenario file passes its module-level `run` / `run_core` at call time."""
    r = run(s, words, **kw)
    assert r.fault == "Fault_None", r.fault
    if all_executed:
        assert r.executed == len(words)
    return r.state


class Setup:
    """Operand tiles loaded by TLOAD blocks of one word stream, run by `run`.

    Each block reads its matrix from its own GM area through B.IOR with its
    own GPR pair (base, stride). TileIndices follow the allocation rule
    (lowest free slot of the hand), counted here from a fresh State.
    """

    def __init__(self, cfg=SMALL, *, run):
        self.cfg = cfg
        self.run = run
        self.s = pj.reset(cfg)
        self.words = []
        self.addr = 0x40
        self.reg = 2
        self.used = [0, 0, 0, 0]

    def _place(self, matrix, d):
        raw = pack(matrix, d)
        addr = self.addr
        self.s = pj.write_memory(self.s, addr, raw)
        self.addr = (addr + len(raw) + 15) // 16 * 16
        base, stride = self.reg, self.reg + 1
        self.reg += 2
        assert self.reg <= tables.NUM_GPRS and self.addr <= self.cfg.gm_bytes
        self.s = pj.write_gpr(self.s, base, addr)
        self.s = pj.write_gpr(self.s, stride, row_bytes(len(matrix[0]), d))
        return base, stride

    def _index(self, hand):
        index = hand * 16 + self.used[hand]
        self.used[hand] += 1
        return index

    def cube(self, layout, dt, matrix, hand=1, size=1, pemode=7, pad=3):
        """CUBE TLOAD (ND2M16/ND2M32/ND2N8) of `matrix`; returns its TileIndex."""
        d = tables.dtype(dt)
        base, stride = self._place(matrix, d)
        self.words += [bstart("TLOAD", dt), datr(LAYOUT_CODE[layout], 31, pad),
                       dim(0, len(matrix[0])), dim(1, len(matrix)),
                       iot(hand=hand, size=size, pemode=pemode), ior(base, stride), BSTOP]
        return self._index(hand)

    def ordinary(self, dt, matrix, hand=3, size=1, pemode=7, cols=None):
        """Ordinary RowMajor TLOAD (Bias, E8M0 scales); Col = next power of two."""
        d = tables.dtype(dt)
        vc = len(matrix[0])
        cols = cols or 1 << (vc - 1).bit_length()
        base, stride = self._place(matrix, d)
        self.words += [bstart("TLOAD", dt), dim(0, vc), dim(1, len(matrix)), dim(2, cols),
                       iot(hand=hand, size=size, pemode=pemode), ior(base, stride), BSTOP]
        return self._index(hand)

    def state(self):
        s = run_ok(self.run, self.s, self.words, cfg=None) if self.words else self.s
        assert [int(x) for x in allocated(s)] == sorted(
            h * 16 + k for h in range(4) for k in range(self.used[h]))
        return s


class Core:
    """A State built by one stream run by `run_core`: Shared TLOADs (mask 1111
    unless told) and per-PE Local loads (each a single-PE block on that PE, with
    that PE's own GPRs). Every load reads GM through its own GPR pair."""

    def __init__(self, cfg=SMALL, *, run_core):
        self.cfg = cfg
        self.run_core = run_core
        self.s = pj.reset(cfg)
        self.words = []
        self.addr = 0x40
        self.reg = 2
        self.used = {p: [0, 0, 0, 0] for p in PES}

    def _regs(self):
        base, stride = self.reg, self.reg + 1
        self.reg += 2
        assert self.reg <= tables.NUM_GPRS
        return base, stride

    def _place(self, matrix, d):
        raw = pack(matrix, d)
        addr = self.addr
        self.s = pj.write_memory(self.s, addr, raw)
        self.addr = (addr + len(raw) + 15) // 16 * 16
        assert self.addr <= self.cfg.gm_bytes
        return addr

    def shared(self, sid, dt, matrix, size=1, cols=None, pemode=7):
        """Shared TLOAD of `matrix` into S<sid>: LB2 = cols (default: its width)."""
        d = tables.dtype(dt)
        base, stride = self._regs()
        addr = self._place(matrix, d)
        self.s = gpr_all(gpr_all(self.s, base, addr), stride, row_bytes(len(matrix[0]), d))
        self.words += sload(dt, sid, len(matrix), len(matrix[0]), cols or len(matrix[0]), size,
                            pemode, regs=(base, stride))
        return sid

    def local(self, kind, dt, per_pe, hand=1, size=1, cols=None, pad=3):
        """Local load of per_pe[p] on each PE p (kind: a CUBE layout, or
        "RowMajor" for an ordinary TLOAD); returns the TileIndex (the same on
        every PE loaded)."""
        d = tables.dtype(dt)
        base, stride = self._regs()
        index = None
        for p, matrix in per_pe.items():
            addr = self._place(matrix, d)
            self.s = pj.write_gpr(pj.write_gpr(self.s, base, addr, pe=p), stride,
                                  row_bytes(len(matrix[0]), d), pe=p)
            vr, vc = len(matrix), len(matrix[0])
            if kind == "RowMajor":
                c = cols or 1 << (vc - 1).bit_length()
                self.words += [bstart("TLOAD", dt), dim(0, vc), dim(1, vr), dim(2, c),
                               iot(hand=hand, size=size, pemode=p + 1), ior(base, stride), BSTOP]
            else:
                code = {"CUBE_M32": 21, "CUBE_M16": 22, "CUBE_N8": 23}[kind]
                self.words += [bstart("TLOAD", dt), datr(code, 31, pad), dim(0, vc), dim(1, vr),
                               iot(hand=hand, size=size, pemode=p + 1), ior(base, stride), BSTOP]
            i = hand * 16 + self.used[p][hand]
            self.used[p][hand] += 1
            assert index is None or index == i
            index = i
        return index

    def state(self):
        return run_ok(self.run_core, self.s, self.words, cfg=self.cfg) if self.words else self.s


def e6_mask_state(cfg, *, run_core):
    """S40 = [[2]], S41 = [[3]] (U16), loaded by one run_core stream (matrix.md E6)."""
    st = Core(cfg, run_core=run_core)
    st.shared(40, "U16", [[2]])
    st.shared(41, "U16", [[3]])
    return st.state()
