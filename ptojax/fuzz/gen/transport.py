"""Seeded random TLOAD/TSTORE programs (differential testing).

A case starts from one of the program kinds (`PROGRAM_KINDS`): legal CUBE
(B.DATR Layout 21..26) and ordinary TLOAD bundles over all 25 dtypes
(weighted to the CUBE-legal ones), relayout TLOADs (B.DATR Layout 1..20,
27..30: a ColumnMajor/ZN/NZ/RowMajor FP64 tile), CUBE/ordinary/relayout
TLOAD -> TSTORE round trips of the loaded tile, crossed stores, several bundles in one stream, hands and
budgets filled up, zero-mask blocks, header commands outside a block, and
random words. It may then carry mutations (`MUTATIONS`,
transport_mutations.py). `Case.kind` and `Case.mutations` label what was
drawn, so tests can report coverage.
"""

from __future__ import annotations

import numpy as np

from ... import tables
from ...isa.encode import BSTOP, FPATR0, START, bstart, catr, datr, dim, ior, ios, iot_dst, iot_src
from .driver import Bundle, Case, GenConfig, Builder, flatten, gen_config
from .transport_mutations import (BUNDLE_MUTATIONS, MUTATIONS, STREAM_MUTATIONS, m_shuffle, real_bundles,
                                  zero_all)
from .values import (BITS, CELL, CODE_LAYOUT, CUBE_DTYPES, DTYPES, LOAD_CODES, MASK64, PEMODE_MASK,
                     RELAYOUT_CODES, RELAYOUT_TO, STORE_CODES, STORE_OF, elem_bytes, pick_one,
                     size_for_bytes, weighted_key)

LARGE_WORDS = 256        # a "large" tile's payload needs more Words than this

PROGRAM_KINDS = {
    # kind: weight
    "cube_load": 12,
    "cube_roundtrip": 16,
    "ord_load": 8,
    "ord_roundtrip": 12,
    "relayout_load": 4,
    "relayout_roundtrip": 6,
    "cross_store": 4,
    "two_bundles": 6,
    "hand_fill": 3,
    "budget": 3,
    "zero_mask": 5,
    "outside_block": 4,
    "random_words": 3,
    "structured_random": 4,
}


# ----------------------------------------------------------------- bundles


def _cube_shape(rng, lay: str, bits: int, tile_words: int, mode: str):
    """(vr, vc, cells) for a CUBE layout; mode fit/exact/short/big, or (the
    large_tile kind) large: past LARGE_WORDS payload Words and under the
    tile_words bound, at_bound: exactly tile_words, over_bound: one CELL more."""
    cr, cc = CELL[(lay, bits)]
    per = cr * cc
    max_cells = max(1, tile_words // per)

    def shape_for(cells):
        if lay == "N8":
            ks = [k for k in range(1, cells + 1) if cells % k == 0]
            k = pick_one(rng, ks)
            nn = cells // k
            vr = int(rng.integers((k - 1) * cr + 1, k * cr + 1))
            vc = int(rng.integers((nn - 1) * 8 + 1, nn * 8 + 1))
        else:
            vr = int(rng.integers(1, cr + 1))
            if rng.random() < 0.3:
                vr = pick_one(rng, [1, cr, min(cr, 2)])
            vc = int(rng.integers((cells - 1) * cc + 1, cells * cc + 1))
        return vr, vc

    if mode == "exact":
        opts = [c for c in (1, 2, 4, 8, 16) if c <= max_cells]
        cells = pick_one(rng, opts)
    elif mode == "short":
        opts = [c for c in (2, 3, 5, 9, 17) if c <= max_cells] or [2]
        cells = pick_one(rng, opts)
    elif mode == "big":
        cells = max_cells + int(rng.integers(1, 4))
    elif mode == "at_bound":
        cells = max_cells
    elif mode == "over_bound":
        cells = max_cells + 1
    elif mode == "within":
        lo = min(LARGE_WORDS // per + 1, max_cells)
        cells = int(rng.integers(lo, max(lo, max_cells - 1) + 1))
    else:
        cells = int(rng.integers(1, max_cells + 1))
        # keep shapes mostly within ~40 x 40
        if rng.random() < 0.6:
            cells = int(rng.integers(1, min(max_cells, 6) + 1))
    vr, vc = shape_for(cells)
    return vr, vc, cells


def _cube_dtype(rng) -> int:
    if rng.random() < 0.88:
        return pick_one(rng, CUBE_DTYPES)
    return pick_one(rng, [0, 14, 16, 24])                  # FP64, HiF4X2, S64, U64: no CELL class


def cube_tload(b: Builder, *, dt=None, code=None, shape_mode=None, hand=None,
               fits=False) -> Bundle:
    """A CUBE TLOAD; `fits`: addressing that stays inside GM (Builder.fitting_mode)."""
    rng = b.rng
    dt = _cube_dtype(rng) if dt is None else dt
    code = pick_one(rng, LOAD_CODES) if code is None else code
    lay = CODE_LAYOUT[code]
    bits = BITS[dt]
    cbits = bits if bits in (4, 8, 16, 32) else 16     # illegal dtypes: any geometry
    shape_mode = shape_mode or weighted_key(rng, {"fit": 8, "exact": 2, "short": 1.2, "big": 0.5})
    vr, vc, cells = _cube_shape(rng, lay, cbits, b.m.tile_words, shape_mode)
    need = cells * 128
    if shape_mode == "short":
        size = size_for_bytes(need - 128)
        if (128 << (size - 1)) >= need:
            size = max(1, size - 1)
    else:
        size = size_for_bytes(need)
        if shape_mode == "fit" and rng.random() < 0.3:
            size += int(rng.integers(1, 3))
    size = max(1, min(size, 10))
    b.notes.append(f"cube:{lay}/{tables.DTYPE_BY_CODE[dt].name}/{vr}x{vc}/cells{cells}/"
                   f"size{size}/{shape_mode}")
    hand = int(rng.integers(0, 4)) if hand is None else hand
    pemode = int(rng.integers(1, 8))
    pad = int(rng.integers(0, 4))
    items = [("datr", datr(code, 31, pad)), ("dim0", b.dim_word(0, vc)), ("dim1", b.dim_word(1, vr))]
    abits = bits if bits else 16
    items += b.ior_items(vr, vc, abits, mode=b.fitting_mode(vr, vc, abits) if fits else None)[0]
    items.append(("iot", iot_dst(hand, size, pemode, 1)))
    info = dict(op="TLOAD", cube=True, code=code, dt=dt, vr=vr, vc=vc, hand=hand,
                mask=PEMODE_MASK[pemode], pemode=pemode, size=size, index=b.next_index(hand))
    return Bundle(bstart("TLOAD", dt), items, True, info)


def ord_tload(b: Builder, *, dt=None) -> Bundle:
    rng = b.rng
    dt = pick_one(rng, DTYPES) if dt is None else dt
    datr_zero = rng.random() < 0.15                     # present-with-zeros: FP64 destination
    edt = 0 if datr_zero else dt
    ebits = BITS[edt]
    W = b.m.tile_words
    col = 1 << int(rng.integers(0, 7))                  # 1..64
    while col > W:
        col //= 2
    vc = int(rng.integers(1, col + 1))
    vr = int(rng.integers(1, max(1, min(40, W // col)) + 1))
    if rng.random() < 0.05:
        vr = int(rng.integers(1, 3 * W // col + 2))     # past the model bound
    need_bits = vr * col * ebits
    size = size_for_bytes((need_bits + 7) // 8)
    mode = weighted_key(rng, {"exact": 6, "roomy": 3, "short": 1})
    if mode == "roomy":
        size += int(rng.integers(1, 4))
    elif mode == "short":
        size -= 1
    size = max(1, min(size, 10))
    hand = int(rng.integers(0, 4))
    pemode = int(rng.integers(1, 8))
    items = []
    if datr_zero:
        items.append(("datr", datr(0, 0, 0)))
    # LB0 = ValidCol (absent or 0 -> 1), LB1 = ValidRow, LB2 = Col (absent -> ValidCol)
    if vc != 1 or rng.random() < 0.5:
        items.append(("dim0", b.dim_word(0, vc if vc != 1 or rng.random() < 0.5 else 0)))
    if vr != 1 or rng.random() < 0.5:
        items.append(("dim1", b.dim_word(1, vr if vr != 1 or rng.random() < 0.5 else 0)))
    if col != vc or rng.random() < 0.4:
        items.append(("dim2", b.dim_word(2, col)))
    else:
        col = vc if vc & (vc - 1) == 0 else col         # absent: Col = ValidCol
    # accesses use the effective dtype; the dense default stride the BSTART one
    items += b.ior_items(vr, vc, ebits, aligned_to=elem_bytes(ebits))[0]
    items.append(("iot", iot_dst(hand, size, pemode, 1)))
    b.notes.append(f"ord:{tables.DTYPE_BY_CODE[edt].name}/{vr}x{vc}/col{col}/size{size}/{mode}")
    info = dict(op="TLOAD", cube=False, code=0, dt=edt, start_dt=dt, vr=vr, vc=vc, col=col,
                hand=hand, mask=PEMODE_MASK[pemode], pemode=pemode, size=size,
                index=b.next_index(hand))
    return Bundle(bstart("TLOAD", dt), items, True, info)


def relayout_tload(b: Builder) -> Bundle:
    """An ordinary TLOAD with a relayout code: DataType 0 makes the tile FP64
    (the BSTART type sizes only the dense stride), in the layout the code
    names. ZN/NZ shapes are mostly whole fractals (16 rows x 4 FP64 columns),
    sometimes not (Fault_TileLegality after the allocation)."""
    rng = b.rng
    code = pick_one(rng, RELAYOUT_CODES)
    layout = RELAYOUT_TO[code]
    start_dt = pick_one(rng, DTYPES) if rng.random() < 0.3 else 0
    fractal = layout in ("ZN", "NZ")
    grid = not fractal or rng.random() < 0.85
    col = 1 << int(rng.integers(2 if fractal and grid else 0, 6))     # 1..32
    vc = int(rng.integers(1, col + 1))
    vr = int(rng.integers(1, 40))
    rows = max(vr, 16 if fractal and grid else 1)
    rows = 1 << (rows - 1).bit_length()
    if fractal and not grid and rng.random() < 0.5:
        rows = pick_one(rng, [1, 2, 4, 8])                    # too few rows for a fractal
        vr = min(vr, rows)
    size = max(1, min(10, size_for_bytes(rows * col * 8) + int(rng.integers(0, 2))))
    hand = int(rng.integers(0, 4))
    pemode = int(rng.integers(1, 8))
    items = [("datr", datr(code, 0, 0)), ("dim0", b.dim_word(0, vc)), ("dim1", b.dim_word(1, vr))]
    if col != vc or rng.random() < 0.4:
        items.append(("dim2", b.dim_word(2, col)))
    else:
        col = vc if vc & (vc - 1) == 0 else col                # absent: Col = ValidCol
    items += b.ior_items(vr, vc, 64, aligned_to=8)[0]
    items.append(("iot", iot_dst(hand, size, pemode, 1)))
    b.notes.append(f"relayout:{tables.LAYOUT_CODES[code]}/{vr}x{vc}/col{col}/size{size}"
                   + ("" if grid else "/off_grid"))
    info = dict(op="TLOAD", cube=False, code=code, dt=0, start_dt=start_dt, vr=vr, vc=vc,
                col=col, hand=hand, mask=PEMODE_MASK[pemode], pemode=pemode, size=size,
                index=b.next_index(hand))
    return Bundle(bstart("TLOAD", start_dt), items, True, info)


def cube_tstore(b: Builder, src: dict, *, fits=False) -> Bundle:
    """CUBE TSTORE of a loaded tile: matching codes/shape/dtype, or mismatched;
    `fits`: addressing inside GM."""
    rng = b.rng
    code = STORE_OF.get(src.get("code"), pick_one(rng, STORE_CODES))
    dt, vr, vc = src["dt"], src["vr"], src["vc"]
    mism = []
    u = rng.random()
    if u < 0.08:
        code = pick_one(rng, [c for c in STORE_CODES if c != code]); mism.append("code")
    elif u < 0.14:
        dt = pick_one(rng, [d for d in CUBE_DTYPES if d != dt]); mism.append("dtype")
    elif u < 0.20:
        same_bits = [d for d in CUBE_DTYPES if BITS[d] == BITS.get(dt) and d != dt]
        if same_bits:
            dt = pick_one(rng, same_bits); mism.append("dtype_same_width")
    elif u < 0.28:
        vr, vc = (vc, vr) if vr != vc else (vr + 1, vc); mism.append("shape")
    if mism:
        b.notes.append("cube_store_mismatch:" + ",".join(mism))
    bits = BITS.get(dt, 16)
    pad = int(rng.integers(0, 4))
    pemode = src.get("pemode", 7)
    if rng.random() < 0.25:
        subs = [p for p in range(1, 8) if PEMODE_MASK[p] & src.get("mask", 15) == PEMODE_MASK[p]]
        pemode = pick_one(rng, subs) if subs else pemode
    items = [("datr", datr(code, 31, pad)), ("dim0", b.dim_word(0, vc)), ("dim1", b.dim_word(1, vr))]
    items += b.ior_items(vr, vc, bits, mode=b.fitting_mode(vr, vc, bits) if fits else None)[0]
    items.append(("iot", iot_src(src["index"], pemode, 1)))
    info = dict(op="TSTORE", cube=True, code=code, dt=dt, vr=vr, vc=vc, src=src["index"],
                pemode=pemode, mask=PEMODE_MASK[pemode])
    return Bundle(bstart("TSTORE", dt), items, True, info)


def ord_tstore(b: Builder, src: dict, *, fits=False) -> Bundle:
    """Ordinary TSTORE of a loaded tile; stride aliasing, nibble stores, LB2 default;
    `fits`: addressing inside GM."""
    rng = b.rng
    tdt = src["dt"]
    bits = BITS[tdt]
    start_dt = tdt if rng.random() < 0.6 else pick_one(rng, DTYPES)   # only sizes the default stride
    vr, vc = src["vr"], src["vc"]
    items = []
    if rng.random() < 0.15 + 0.5 * (src.get("code", 0) != 0):
        # the code is not read by a TSTORE: NORM or any relayout stores alike
        items.append(("datr", datr(pick_one(rng, (0,) + RELAYOUT_CODES), 0, 0)))
    if rng.random() < 0.3:
        items.append(("dim0", b.dim_word(0, int(rng.integers(0, 50)))))   # ignored by the model
    if rng.random() < 0.3:
        items.append(("dim1", b.dim_word(1, int(rng.integers(0, 50)))))
    if rng.random() < 0.3:
        items.append(("dim2", b.dim_word(2, pick_one(rng, [1, 2, 4, 8, 16, 3, 0]))))
    mode = b.fitting_mode(vr, vc, bits) if fits else None
    if not fits and rng.random() < 0.5:
        mode = weighted_key(rng, {"zero": 3, "short": 3, "negative": 2, "dense": 2, "gap": 1,
                               "misaligned_base": 1, "past_end": 1, "wrap": 1})
    items += b.ior_items(vr, vc, bits, mode=mode)[0]
    pemode = int(rng.integers(1, 8))
    items.append(("iot", iot_src(src["index"], pemode, 1)))
    info = dict(op="TSTORE", cube=False, code=0, dt=start_dt, vr=vr, vc=vc, src=src["index"],
                pemode=pemode, mask=PEMODE_MASK[pemode])
    return Bundle(bstart("TSTORE", start_dt), items, True, info)


def minimal_tload(b: Builder, hand: int, size: int = 1, pemode: int = 1, dt: int = 27) -> Bundle:
    """BSTART.TLOAD, one dst B.IOT, BSTOP: a 1x1 ordinary load from GM address 0."""
    info = dict(op="TLOAD", cube=False, code=0, dt=dt, vr=1, vc=1, col=1, hand=hand,
                mask=PEMODE_MASK[pemode], pemode=pemode, size=size, index=b.next_index(hand))
    return Bundle(bstart("TLOAD", dt), [("iot", iot_dst(hand, size, pemode, 1))], True, info)


# ----------------------------------------------------------------- program kinds


def _prog_cube_load(b):
    return [cube_tload(b)]


def _prog_cube_roundtrip(b):
    ld = cube_tload(b, dt=pick_one(b.rng, CUBE_DTYPES) if b.rng.random() < 0.95 else None)
    return [ld, cube_tstore(b, ld.info)]


def _prog_ord_load(b):
    return [ord_tload(b)]


def _prog_ord_roundtrip(b):
    ld = ord_tload(b)
    return [ld, ord_tstore(b, ld.info)]


def _prog_relayout_load(b):
    return [relayout_tload(b)]


def _prog_relayout_roundtrip(b):
    ld = relayout_tload(b)
    return [ld, ord_tstore(b, ld.info)]


def _prog_cross_store(b):
    if b.rng.random() < 0.5:
        ld = cube_tload(b, dt=pick_one(b.rng, CUBE_DTYPES), shape_mode="fit")
        b.notes.append("cross:cube->ordinary")
        return [ld, ord_tstore(b, ld.info)]
    ld = ord_tload(b, dt=pick_one(b.rng, CUBE_DTYPES))
    b.notes.append("cross:ordinary->cube")
    return [ld, cube_tstore(b, dict(ld.info, code=pick_one(b.rng, LOAD_CODES)))]


def _prog_two_bundles(b):
    """Two or three bundles; a missing BSTOP lets the next BSTART complete a block."""
    rng = b.rng
    first = cube_tload(b, shape_mode="fit") if rng.random() < 0.5 else ord_tload(b)
    out = [first]
    if rng.random() < 0.6:
        out.append(cube_tstore(b, first.info) if first.info["cube"] else ord_tstore(b, first.info))
    else:
        out.append(cube_tload(b, shape_mode="fit") if rng.random() < 0.5 else ord_tload(b))
    for bd in out[:-1]:
        if rng.random() < 0.7:
            bd.stop = False
    if sum(len(x.words()) for x in out) < 12 and rng.random() < 0.5:
        out.append(minimal_tload(b, int(rng.integers(0, 4))))
        if rng.random() < 0.5:
            out[-2].stop = False
    return out


def _prog_hand_fill(b):
    """More TLOADs into one hand than it has slots (Fault_TileAllocation)."""
    rng = b.rng
    hand = int(rng.integers(0, 4))
    n = b.m.hand_slots + 1
    out = [minimal_tload(b, hand, pemode=int(rng.integers(1, 8)),
                         dt=pick_one(rng, DTYPES)) for _ in range(n)]
    if rng.random() < 0.4:
        out.append(ord_tstore(b, out[0].info))
    return out


def _prog_budget(b):
    """Core budget: big masks and SizeCodes, or a small TILE_CAPACITY register."""
    rng = b.rng
    if rng.random() < 0.5:
        b.tile_capacity = pick_one(rng, [0, 128, 256, 512, 1024, 4096, int(rng.integers(0, 1 << 20)),
                                      int(rng.integers(0, 1 << 20)), (1 << 32) + 128])
        if rng.random() < 0.1:                 # the 64-bit register's top half (hand-made)
            b.tile_capacity = pick_one(rng, [1 << 63, MASK64, (1 << 63) + 4096])
        b.notes.append(f"tile_capacity:{b.tile_capacity}")
        if rng.random() < 0.5:
            return [cube_tload(b, shape_mode="fit")]
        return [ord_tload(b), minimal_tload(b, int(rng.integers(0, 4)))]
    out = [minimal_tload(b, int(rng.integers(0, 4)), size=pick_one(rng, [9, 10]), pemode=7)]
    out.append(minimal_tload(b, int(rng.integers(0, 4)), size=pick_one(rng, [1, 8, 9, 10]),
                             pemode=int(rng.integers(1, 8))))
    if rng.random() < 0.5:
        out.append(minimal_tload(b, int(rng.integers(0, 4)), size=10, pemode=7))
    return out


def _prog_zero_mask(b):
    """Blocks whose only bindings are PEMode 000: no-ops, also when otherwise illegal."""
    rng = b.rng
    out = [cube_tload(b) if rng.random() < 0.5 else ord_tload(b)]
    if rng.random() < 0.5:
        src = dict(out[0].info)
        out.append(cube_tstore(b, src) if src["cube"] else ord_tstore(b, src))
    bd = out[int(rng.integers(0, len(out)))]
    zero_all(bd)
    # otherwise-illegal schema in the zero-mask block
    r = rng.random()
    if r < 0.2 and bd.find("datr"):
        i = bd.find("datr")[0]
        bd.items[i] = ("datr", datr(pick_one(rng, STORE_CODES if bd.info["op"] == "TLOAD" else LOAD_CODES),
                                    int(rng.integers(0, 32)) if rng.random() < 0.3 else 31, 1,
                                    int(rng.integers(0, 6)), int(rng.integers(0, 8))))
        b.notes.append("zero_mask:illegal_datr")
    elif r < 0.4:
        bd.items = [it for it in bd.items if not it[0].startswith("dim")]
        b.notes.append("zero_mask:no_dims")
    elif r < 0.5:
        bd.items.append(("ios", ios(int(rng.integers(0, 256)), 0, int(rng.integers(0, 13)))))
        b.notes.append("zero_mask:zero_ios")
    elif r < 0.6:
        bd.items.append(("ior", ior(0, 0, 5, 3)))
        b.notes.append("zero_mask:ior_surplus")
    return out


def _prog_outside_block(b):
    """Header commands with no block open, BSTOP with no block, zero-mask B.IOT outside."""
    rng = b.rng
    pool = [("datr", datr(22, 31, 1)), ("dim0", dim(0, 3)), ("ior", ior(0, 0)),
            ("iot", iot_dst(1, 1, 1, 1)), ("iot0", iot_dst(1, 1, 0, 1)),
            ("ios", ios(3, 1)), ("ios0", ios(3, 0)), ("catr", catr()), ("fpatr", FPATR0),
            ("bstop", BSTOP)]
    pre = [pool[int(rng.integers(0, len(pool)))] for _ in range(int(rng.integers(1, 4)))]
    b.notes.append("outside:" + ",".join(t for t, _ in pre))
    body = [] if rng.random() < 0.3 else [cube_tload(b, shape_mode="fit") if rng.random() < 0.5
                                          else ord_tload(b)]
    return [Bundle(0, pre, False, dict(raw=True))] + body


def _structured_word(rng) -> int:
    """A random word of one command class: fixed low bits, random fields."""
    cls = int(rng.integers(0, 9))
    r = int(rng.integers(0, 1 << 32))
    if cls == 0:
        return BSTOP
    if cls == 1:        # BSTART family: random engine/function/dtype
        return (r & 0xFFFF8000) | 0x1181
    if cls == 2:        # TLSU TLOAD/TSTORE starts with random dtype
        return START[pick_one(rng, ["TLOAD", "TSTORE"])] | (r & 0xF8000000)
    if cls == 3:        # B.DATR
        return (r & 0xFFFF8F80) | 0x1023 if rng.random() < 0.3 else (r & 0xFFF38F80) | 0x1023
    if cls == 4:        # B.DIM, random target selector
        return (r & 0xFFFFFF80) | 0x43
    if cls == 5:        # B.IOR/B.IOS/B.IOT
        return (r & 0xFFFFFF80) | 0x13
    if cls == 6:        # B.IOT forms with small sources
        return (r & 0x0FF8FF80 & ~(3 << 13)) | 0x4013 | int(rng.integers(0, 3)) << 13
    if cls == 7:        # B.CATR/B.DATR/B.FPATR group
        return (r & 0xFFFFFF80) | 0x23
    return r


def _prog_random_words(b):
    rng = b.rng
    n = int(rng.integers(1, b.g.max_words + 1))
    return [Bundle(0, [("word", int(rng.integers(0, 1 << 32))) for _ in range(n)], False,
                   dict(raw=True))]


def _prog_structured_random(b):
    rng = b.rng
    n = int(rng.integers(1, b.g.max_words + 1))
    return [Bundle(0, [("word", _structured_word(rng)) for _ in range(n)], False, dict(raw=True))]


PROGRAMS = {
    "cube_load": _prog_cube_load, "cube_roundtrip": _prog_cube_roundtrip,
    "ord_load": _prog_ord_load, "ord_roundtrip": _prog_ord_roundtrip,
    "relayout_load": _prog_relayout_load, "relayout_roundtrip": _prog_relayout_roundtrip,
    "cross_store": _prog_cross_store, "two_bundles": _prog_two_bundles,
    "hand_fill": _prog_hand_fill, "budget": _prog_budget, "zero_mask": _prog_zero_mask,
    "outside_block": _prog_outside_block, "random_words": _prog_random_words,
    "structured_random": _prog_structured_random,
}


assert set(PROGRAMS) == set(PROGRAM_KINDS)


# ----------------------------------------------------------------- the case


def _fit(rng, bundles, max_words: int) -> list:
    """Drop optional header items until the stream fits max_words, then cut."""
    words = flatten(bundles)
    tries = 0
    while len(words) > max_words and tries < 64:
        tries += 1
        cands = [(bd, i) for bd in real_bundles(bundles) for i, (t, _) in enumerate(bd.items)
                 if t in ("ior", "dim2", "catr", "fpatr", "iot0") or
                 (t == "datr" and not bd.info.get("cube"))]
        if not cands:
            break
        bd, i = cands[int(rng.integers(0, len(cands)))]
        del bd.items[i]
        words = flatten(bundles)
    return words[:max_words]


def _mutate(b: Builder, kind: str, bundles: list) -> tuple:
    """(applied labels, stream mutations left for the words): 1 (60%) to
    max_mutations labels with probability p_mutate, each applied as it is drawn
    (so its draws sit between the labels'), else sometimes a legal shuffle."""
    rng, g = b.rng, b.g
    applied = []
    stream_muts = []
    if kind not in ("random_words", "structured_random") and rng.random() < g.p_mutate:
        n = 1 + int(rng.integers(0, g.max_mutations))
        if rng.random() < 0.6:
            n = 1
        for _ in range(n):
            m = weighted_key(rng, MUTATIONS)
            if m in STREAM_MUTATIONS:
                stream_muts.append(m)
                applied.append(m)
            elif BUNDLE_MUTATIONS[m](b, bundles):
                applied.append(m)
    elif kind not in ("random_words", "structured_random") and rng.random() < 0.3:
        if m_shuffle(b, bundles):
            applied.append("shuffle")
    return applied, stream_muts


def _mutate_stream(b: Builder, words: list, stream_muts: list) -> list:
    """The stream mutations on the fitted words (and the PC they start at)."""
    rng = b.rng
    for m in stream_muts:
        if m == "truncate" and len(words) > 1:
            words = words[: int(rng.integers(1, len(words)))]
        elif m == "random_word":
            w = int(rng.integers(0, 1 << 32)) if rng.random() < 0.5 else _structured_word(rng)
            words.insert(int(rng.integers(0, len(words) + 1)), w)
            words = words[: b.g.max_words]
        elif m == "odd_pc":
            b.pc = (4 * int(rng.integers(0, 1 << 20))) | pick_one(rng, [1, 3])
        elif m == "pc_wrap":
            b.pc = (MASK64 + 1 - 4 * int(rng.integers(1, len(words) + 2))) & MASK64
    return words


def transport_case(rng: np.random.Generator, g: GenConfig) -> Case:
    """One TLOAD/TSTORE Case: a program kind, its mutations (drawn by _mutate,
    not driver.draw_mutations: these draws predate it and seeds replay them),
    the words fitted to max_words, random (or zero, or counting) GM."""
    b = Builder(rng, g)
    kind = weighted_key(rng, PROGRAM_KINDS)
    bundles = PROGRAMS[kind](b)
    applied, stream_muts = _mutate(b, kind, bundles)
    words = _mutate_stream(b, _fit(rng, bundles, g.max_words), stream_muts)
    if not words:
        words = [BSTOP]
    if b.pc == 0 and rng.random() < 0.2:
        b.pc = 4 * int(rng.integers(0, 1 << 28))
    b.noise_regs()
    gm_mode = rng.random()
    if gm_mode < 0.85:
        gm = rng.integers(0, 256, g.machine.gm_bytes, dtype=np.uint8).tobytes()
    elif gm_mode < 0.95:
        gm = bytes(g.machine.gm_bytes)
    else:
        gm = (np.arange(g.machine.gm_bytes) & 0xFF).astype(np.uint8).tobytes()
    return b.case(kind, applied, words, gm, pc=b.pc, tile_capacity=b.tile_capacity)


def random_words_case(rng: np.random.Generator, cfg=None, structured: bool = True) -> Case:
    """A Case of random (or class-structured random) words only."""
    g = gen_config(cfg)
    b = Builder(rng, g)
    bundles = (_prog_structured_random if structured else _prog_random_words)(b)
    b.noise_regs()
    gm = rng.integers(0, 256, g.machine.gm_bytes, dtype=np.uint8).tobytes()
    return b.case("structured_random" if structured else "random_words", (),
                  flatten(bundles)[: g.max_words], gm)
