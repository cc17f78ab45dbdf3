"""Seeded random TMOV cases (docs/tmov.md): the Local tile copy (Function 2)
and the Shared moves (9 INSERT, 10 PUBLISH, 11 BROADCAST, 12 EXTRACT).

`random_tmov_case(rng, cfg, kind=None, mutations=None)` draws a kind of
`TMOV_KINDS` and mutations of `TMOV_MUTATIONS`, each aimed at one ordered
check (`TMOV_AIMS[label]` is its fault when it is the only one). The source
tile is made by an ordinary TLOAD in `Case.setup` (a BROADCAST/EXTRACT case
also publishes or inserts its Shared register there), so the case's own words
are the TMOV bundle, sometimes twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ...isa.encode import (BSTOP, bstart, catr, datr, dim, fpatr, ior, ios, iot_dst, iot_src,
                           iot_src_dst)
from .driver import (Builder, Family, compatible, draw_kind, draw_many, draw_mutations,
                     finish_case, gen_config)
from .values import BITS, DT_CODE, PEMODE_MASK, TL, elem_bytes, encode_elements, pick_one, rand_value

TMOV_KINDS = {
    "mv_copy": 8,           # Function 2, one Src0 -> Dst binding
    "mv_split": 3,          # Function 2, a source-only and a destination-only binding
    "mv_none": 3,           # Function 2 with BSTART DTYPE_NONE: the source's type
    "mv_fp64_layout": 2,    # Function 2 of an FP64 ColumnMajor tile, B.DATR Layout only
    "ms_insert": 5,         # 9: quarters of a Local tile into a fresh or existing register
    "ms_publish": 4,        # 10: the same, publishing
    "ms_broadcast": 4,      # 11: a published register into a new Local tile
    "ms_extract": 5,        # 12: any mask, from a published, partial or missing register
    "mv_zero_mask": 1,      # every binder PEMode 000: a strict no-op
}

TMOV_MUTATIONS = {
    "ior": 3,               # a nonzero B.IOR field (MV.4 / MS.2 / MV.2)
    "datr_attr": 3,         # B.DATR DataType/CMode/Sat/Pad nonzero (MV.5 / MS.3)
    "cube_layout": 1,       # B.DATR Layout 21..26: the CUBE path (C5.3)
    "unterminated": 2,      # no L=1 (MV.4 BundleControl; MS.4 / MS.9)
    "extra_ios": 2,         # a B.IOS in a Local TMOV, or a second one (MV.1-3, MS.1)
    "no_ios": 1,            # a Shared TMOV without its B.IOS (MS.1)
    "size": 3,              # another SizeCode (MV.7/MV.9, MS.5, MS.9)
    "dtype": 3,             # another BSTART DataType (MV.9, MS.9)
    "mask": 2,              # the B.IOS mask differs from the B.IOT's (header or MS.4/MS.9)
    "unallocated": 2,       # the source names a free TileIndex (MV.8 / MS.5)
    "undefined": 2,         # one source element undefined (Case.undefine: MV.8 / MS.5)
    "budget": 2,            # TILE_CAPACITY below the new tile's charge (MV.7 / MS.6 / MS.12)
    "lb": 3,                # B.DIM values: inherit (0), equal, or another shape (MV.7/MV.9)
    "unpublished": 2,       # BROADCAST/EXTRACT of an inserted, not published register
    "dst_form": 1,          # INSERT/PUBLISH with a Src0 -> Dst binding (HDR.6)
    "fpatr": 1,             # a B.FPATR in the header (HDR.8)
    "twice": 2,             # the bundle twice (a second copy, a repeated INSERT)
    "catr": 1,              # B.CATR DR=1 (legal) or trap=1 (Fault_BundlePostCommit)
    "drop_bstop": 1,        # completed by the stream's end: the block stays open
}
TMOV_AIMS = {m: TL for m in TMOV_MUTATIONS}
TMOV_AIMS.update({"ior": "Fault_BundleControl", "budget": "Fault_TileAllocation",
                  "lb": "Fault_None", "twice": "Fault_None", "catr": "Fault_None",
                  "drop_bstop": "Fault_None", "fpatr": "Fault_BundleControl"})
assert set(TMOV_AIMS) == set(TMOV_MUTATIONS)

_CONFLICTS = {frozenset(p) for p in (("extra_ios", "no_ios"), ("unallocated", "undefined"),
                                     ("twice", "drop_bstop"))}
_SHARED_ONLY = {"no_ios", "unpublished", "dst_form", "mask"}
_SOURCE = ("U8", "S8", "FP16", "BF16", "S16", "U32", "FP32", "S32", "U64", "E4M3")


def _ok(m: str, kind: str, drawn: list) -> bool:
    shared = kind.startswith("ms_")
    if m in _SHARED_ONLY and not shared:
        return False
    if m == "dst_form" and kind not in ("ms_insert", "ms_publish"):
        return False
    if m == "unpublished" and kind not in ("ms_broadcast", "ms_extract"):
        return False
    return compatible(m, drawn, _CONFLICTS)


TMOV = Family("TMOV", TMOV_KINDS, TMOV_MUTATIONS, "mv_zero_mask", _ok)
_DATA = 0x100


@dataclass
class _SourceTile:
    """The source tile the setup's TLOAD makes: vr x vc of a dtype, row-major
    (ColumnMajor FP64 for mv_fp64_layout), in `size` SizeCode steps."""
    name: str
    dt: int
    bits: int
    size: int
    cols: int
    vc: int
    vr: int
    layout_code: int
    values: list


def _draw_source(rng, kind: str) -> _SourceTile:
    name = "FP64" if kind == "mv_fp64_layout" else pick_one(rng, _SOURCE)
    dt = DT_CODE[name]
    bits = BITS[dt]
    size = int(rng.integers(1, 3))
    cap_elems = size * 1024 // bits                         # 128 B per SizeCode step
    cols = 1 << int(rng.integers(0, 4))
    rows = cap_elems // cols
    vc = int(rng.integers(1, cols + 1))
    vr = int(rng.integers(1, min(rows, 4) + 1))
    layout_code = 1 if kind == "mv_fp64_layout" else 0
    values = [[rand_value(rng, bits) for _ in range(vc)] for _ in range(vr)]
    return _SourceTile(name, dt, bits, size, cols, vc, vr, layout_code, values)


def _source_load(b: Builder, t: _SourceTile) -> tuple:
    """(GM holding the tile's elements at _DATA, the setup's TLOAD of it, its TileIndex)."""
    gm = bytearray(b.g.machine.gm_bytes)
    data = b"".join(encode_elements(t.dt, r) for r in t.values)
    gm[_DATA:_DATA + len(data)] = data
    stride = elem_bytes(t.bits) * t.vc
    src_index = b.next_index(0)
    ra, rs = b.reg(_DATA), b.reg(stride)
    load = [bstart("TLOAD", t.dt)] + ([datr(t.layout_code, 0, 0)] if t.layout_code else []) \
        + [dim(0, t.vc), dim(1, t.vr), dim(2, t.cols), ior(ra, rs), iot_dst(0, t.size, 7), BSTOP]
    return gm, load, src_index


@dataclass
class _Move:
    """What the TMOV block names: the BSTART DataType, the Shared register,
    the source TileIndex (the setup's tile, or a free one), the new tile's
    hand and SizeCode, the binders' PEMode."""
    kind: str
    start_dt: int
    sid: int
    src_index: int
    src: int
    hand: int
    dsize: int
    pemode: int


def _draw_move(rng, kind: str, has, t: _SourceTile, src_index: int, pemode: int) -> _Move:
    sid = int(rng.integers(0, 256))
    start_dt = 31 if kind == "mv_none" else t.dt
    if has("dtype"):
        start_dt = pick_one(rng, [d for d in BITS if d != t.dt])
    src = src_index if not has("unallocated") else src_index + 1 + int(rng.integers(0, 8))
    dsize = t.size if not has("size") else pick_one(rng, [s for s in range(1, 6) if s != t.size])
    hand = int(rng.integers(1, 4))
    return _Move(kind, start_dt, sid, src_index, src, hand, dsize, pemode)


def _local_move(rng, mv: _Move, t: _SourceTile, has, setup: list) -> tuple:
    """Function 2: one Src0 -> Dst binding, or a source-only and a destination-only one."""
    src, hand, dsize, pemode = mv.src, mv.hand, mv.dsize, mv.pemode
    if mv.kind == "mv_split":
        binds = [iot_src(src, pemode, 0), iot_dst(hand, dsize, pemode)]
        if rng.random() < 0.5:
            binds = [iot_dst(hand, dsize, pemode, 0), iot_src(src, pemode)]
    else:
        binds = [iot_src_dst(src, hand, dsize, 0 if mv.kind == "mv_zero_mask" else pemode)]
    return "TMOV", [("iot", w) for w in binds]


def _to_shared(rng, mv: _Move, t: _SourceTile, has, setup: list) -> tuple:
    """9/10: the source's quarters into the register (sometimes an existing one,
    all four quarters inserted by the setup)."""
    op = "TMOV.L2S.INSERT" if mv.kind == "ms_insert" else "TMOV.L2S.PUBLISH"
    if rng.random() < 0.3:     # an existing register (all four quarters): updated in place
        setup += [bstart("TMOV.L2S.INSERT", t.dt), iot_src(mv.src_index, 7), ios(mv.sid, 7, t.size),
                  BSTOP]
    bind = iot_src_dst(mv.src, mv.hand, mv.dsize, mv.pemode) if has("dst_form") \
        else iot_src(mv.src, mv.pemode)
    return op, [("iot", bind), ("ios", ios(mv.sid, mv.pemode, mv.dsize))]


def _to_local(rng, mv: _Move, t: _SourceTile, has, setup: list) -> tuple:
    """11/12: the register (published or inserted by the setup, or missing)
    into a new Local tile."""
    broadcast = mv.kind == "ms_broadcast"
    op = "TMOV.S2L.BROADCAST" if broadcast else "TMOV.S2L.EXTRACT"
    fill = "TMOV.L2S.INSERT" if has("unpublished") else "TMOV.L2S.PUBLISH"
    fmask = 7 if broadcast or rng.random() < 0.7 else int(rng.integers(1, 8))
    if broadcast or rng.random() < 0.85:
        setup += [bstart(fill, t.dt), iot_src(mv.src_index, fmask), ios(mv.sid, fmask, t.size), BSTOP]
    return op, [("ios", ios(mv.sid, mv.pemode)), ("iot", iot_dst(mv.hand, mv.dsize, mv.pemode))]


def _move(kind: str):
    """The kind's bundle builder: (op, header items), the setup extended."""
    if kind.startswith("mv_"):
        return _local_move
    return _to_shared if kind in ("ms_insert", "ms_publish") else _to_local


def _header_mutations(rng, has, items: list, op: str, t: _SourceTile, mv: _Move) -> list:
    """The header's mutations, in TMOV_MUTATIONS' draw order."""
    if has("ior"):
        items.insert(0, ("ior", ior(int(rng.integers(1, 24)))))
    if has("datr_attr"):
        attr = pick_one(rng, [dict(dtype=t.dt), dict(cmode=1), dict(sat=1), dict(pad=1)])
        items.insert(0, ("datr", datr(**(dict(layout=t.layout_code, dtype=0, pad=0) | attr))))
    if has("cube_layout"):
        items.insert(0, ("datr", datr(int(rng.integers(21, 27)), 31, 0)))
    if has("extra_ios"):
        items.insert(0, ("ios", ios((mv.sid + 1) % 256, mv.pemode)))
    if has("no_ios"):
        items = [it for it in items if it[0] != "ios"]
    if has("mask"):
        items = [("ios", ios(mv.sid, pick_one(rng, [p for p in range(1, 8) if p != mv.pemode]),
                             mv.dsize if op.startswith("TMOV.L2S") else 0))
                 if k == "ios" else (k, w) for k, w in items]
    if has("unterminated"):
        items = [(k, w & ~(1 << 19)) if k == "iot" else (k, w) for k, w in items]
    if has("lb"):
        pick = rng.integers(0, 3)
        items.insert(0, ("dim", dim(int(pick), pick_one(rng, [0, (t.vc, t.vr, t.cols)[pick],
                                                              int(rng.integers(1, 9))]))))
    if has("fpatr"):
        items.insert(0, ("fpatr", fpatr()))
    if has("catr"):
        items.append(("catr", catr(trap=int(rng.random() < 0.5), dr=1)))
    return items


def _shuffle(rng, items: list) -> list:
    """Sometimes the header in another order (free, but for the B.IOTs' own order)."""
    if rng.random() < 0.2:
        order = [items[k] for k in rng.permutation(len(items))]
        iots = iter([it for it in items if it[0] == "iot"])
        items = [next(iots) if it[0] == "iot" else it for it in order]
    return items


def _words(op: str, start_dt: int, items: list, has) -> list:
    """The bundle (twice for "twice"; its BSTOP dropped for "drop_bstop")."""
    bundle = [bstart(op, start_dt)] + [w for _, w in items] + [BSTOP]
    words = bundle + (bundle if has("twice") else [])
    return words[:-1] if has("drop_bstop") else words


def random_tmov_case(rng, cfg=None, kind: Optional[str] = None, mutations: Optional[list] = None):
    g = gen_config(cfg)
    b = Builder(rng, g)
    kind = draw_kind(rng, TMOV, kind)
    applied = draw_mutations(rng, g, TMOV, kind, mutations)
    has = applied.__contains__

    t = _draw_source(rng, kind)
    pemode = 7 if kind in ("ms_broadcast",) else int(rng.integers(1, 8))
    gm, load, src_index = _source_load(b, t)
    setup = list(load)
    mv = _draw_move(rng, kind, has, t, src_index, pemode)
    undefine = ((src_index, 0),) if has("undefined") else ()
    op, items = _move(kind)(rng, mv, t, has, setup)
    if t.layout_code:
        items.insert(0, ("datr", datr(t.layout_code, 0, 0)))
    items = _shuffle(rng, _header_mutations(rng, has, items, op, t, mv))
    words = _words(op, mv.start_dt, items, has)
    cap = None
    if has("budget"):
        charge = bin(PEMODE_MASK[7]).count("1") * t.size * 128
        cap = charge + int(rng.integers(0, t.size * 128))
    b.notes.append(f"{t.name} {t.vr}x{t.vc} cols {t.cols} size {t.size} mask {PEMODE_MASK[pemode]:04b}")
    return finish_case(b, kind, applied, b.cut(words), bytes(gm), setup=tuple(setup),
                       undefine=undefine, tile_capacity=cap)


def random_tmov_cases(seed: int, n: int, cfg=None) -> list:
    """n TMOV Cases from one seed (case i is random_tmov_case(case_rng(seed, i), cfg))."""
    return draw_many(random_tmov_case, seed, n, gen_config(cfg))
