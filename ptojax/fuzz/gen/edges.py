"""Edge kinds of the TLOAD/TSTORE family (`EDGE_KINDS`), drawn with
probability `GenConfig.edge_weight`:

- `large_tile`: a CUBE (M32/M16/N8) or ordinary RowMajor TLOAD whose payload
  needs more than LARGE_WORDS (256) Words: past that and under the config's
  tile_words bound, exactly at it, or one CELL (CUBE) / one row (RowMajor)
  over it (Fault_TileAllocation); loads within or at the bound may be stored
  back (CUBE: sometimes with one CELL more than the tile holds). Dtypes are
  those whose TSize stays a legal SizeCode (<= 64 KiB) at that size. Drawn
  only where tile_words > LARGE_WORDS (`edge_kinds`).
- `budget_edge`: up to two earlier 1x1 allocations, then a CUBE or ordinary
  TLOAD whose Core charge (popcount(mask) x TSize, A.5) plus theirs lands
  exactly at the Case's TILE_CAPACITY, a few bytes under it, or 1..128 bytes
  over it (Fault_TileAllocation); every preset. `edge_capacity` does the same
  for MGATHER.CAS and matrix destinations.

Edge cases carry no mutations; each notes what it covers as `edge:<label>`,
the campaign's `edges` coverage axis (`edge_labels(machine)`).
"""

from __future__ import annotations

import numpy as np

from ...isa.encode import bstart, iot_dst
from ...state import MachineConfig
from .driver import (Builder, Bundle, Case, Family, draw_kind, finish_case, flatten, gen_config,
                     tload_items)
from .transport import LARGE_WORDS, cube_tload, cube_tstore, minimal_tload, ord_tstore
from .values import (BITS, CELL, CODE_LAYOUT, CUBE_DTYPES, DTYPES, LOAD_CODES, PEMODE_MASK,
                     elem_bytes, pick_one, size_for_bytes, weighted_key)

EDGE_KINDS = {"large_tile": 2, "budget_edge": 1}

MAX_TSIZE = 128 << 9                         # SizeCode 10, the largest Local TSize

LARGE_LABELS = ("large:TLOAD", "large:TSTORE", "large:M32", "large:M16", "large:N8",
                "large:RowMajor", "large:within", "large:at_bound", "large:over_bound",
                "large:store_over")
BUDGET_LABELS = ("budget:exact", "budget:slack", "budget:over", "budget:prior", "budget:cube",
                 "budget:ordinary")
# MGATHER.CAS / matrix cases with an edge weight (edge_capacity)
FAMILY_BUDGET_LABELS = {"cas": ("budget:cas_exact", "budget:cas_over1"),
                        "matmul": ("budget:matmul_exact", "budget:matmul_over1")}
EDGE_LABELS = LARGE_LABELS + BUDGET_LABELS + sum(FAMILY_BUDGET_LABELS.values(), ())

_FAMILY = Family("edge", EDGE_KINDS, {}, "", lambda m, kind, drawn: False)


def large_ok(machine: MachineConfig) -> bool:
    """Can a tile of this machine hold more than LARGE_WORDS payload Words?"""
    return machine.tile_words > LARGE_WORDS


def edge_kinds(machine: MachineConfig) -> dict:
    """The edge kinds (and weights) this machine can draw."""
    return {k: w for k, w in EDGE_KINDS.items() if k != "large_tile" or large_ok(machine)}


def edge_labels(machine: MachineConfig, families=()) -> list:
    """The `edges` axis labels this machine can draw, with those of the
    `families` ("cas", "matmul") drawn too."""
    return ((list(LARGE_LABELS) if large_ok(machine) else []) + list(BUDGET_LABELS)
            + [x for f in families for x in FAMILY_BUDGET_LABELS[f]])


def edge_coverage(machine: MachineConfig, edge_weight: float, cas: bool = False,
                  matmul: bool = False) -> dict:
    """With an edge weight, the edge kinds and `edges` labels a campaign on this
    machine draws (with those of the CAS / matrix kinds when drawn too), and
    under "not_applicable" those it cannot (no tile holds more than
    LARGE_WORDS); without one, none."""
    if edge_weight <= 0:
        return {"kinds": [], "edges": [], "not_applicable": {}}
    kinds = list(edge_kinds(machine))
    families = [f for f, on in (("cas", cas), ("matmul", matmul)) if on]
    return {"kinds": kinds, "edges": edge_labels(machine, families),
            "not_applicable": {"kinds": [k for k in EDGE_KINDS if k not in kinds],
                               "edges": [] if large_ok(machine) else list(LARGE_LABELS)}}


def _mark(b: Builder, *labels):
    b.notes.extend(f"edge:{x}" for x in labels)


# ----------------------------------------------------------------- large tiles


def _large_dtype(rng, W: int, place: str, dtypes) -> int:
    """A dtype whose TSize for W payload Words (doubled over the bound, where the
    SizeCode rounds up) stays a legal SizeCode."""
    limit = MAX_TSIZE // (2 if place == "over_bound" else 1)
    return pick_one(rng, [d for d in dtypes if W * BITS[d] // 8 <= limit])


def _large_cube(b: Builder, place: str) -> list:
    rng = b.rng
    dt = _large_dtype(rng, b.m.tile_words, place, CUBE_DTYPES)
    code = pick_one(rng, LOAD_CODES)
    ld = cube_tload(b, dt=dt, code=code, shape_mode=place, fits=True)
    _mark(b, "large:TLOAD", f"large:{CODE_LAYOUT[code]}", f"large:{place}")
    if place == "over_bound" or rng.random() < 0.5:
        return [ld]
    src = ld.info
    if place == "at_bound" and rng.random() < 0.3:
        # the store asks for one CELL column more than the tile holds
        src = dict(src, vc=src["vc"] + CELL[(CODE_LAYOUT[code], BITS[dt])][1])
        _mark(b, "large:store_over")
    _mark(b, "large:TSTORE")
    return [ld, cube_tstore(b, src, fits=True)]


def _large_ord(b: Builder, place: str) -> list:
    """A RowMajor TLOAD of vr rows of Col columns: vr * Col payload Words."""
    rng, W = b.rng, b.m.tile_words
    dt = _large_dtype(rng, W, place, DTYPES)
    bits = BITS[dt]
    col = pick_one(rng, [c for c in (16, 32, 64, 128, 256) if 2 * c <= W])
    lo, top = LARGE_WORDS // col + 1, W // col
    if place == "within":
        vr = int(rng.integers(min(lo, top), max(lo, top - 1) + 1))
    else:
        vr = top if place == "at_bound" else top + 1
    vc = int(rng.integers(col // 2 + 1, col + 1))
    size = size_for_bytes((vr * col * bits + 7) // 8)
    if place != "over_bound" and size < 10 and rng.random() < 0.3:
        size += 1                                   # roomy: more physical rows than valid ones
    hand, pemode = int(rng.integers(0, 4)), int(rng.integers(1, 8))
    base, stride, mode = b.addressing(vr, vc, bits, b.fitting_mode(vr, vc, bits),
                                      aligned_to=elem_bytes(bits))
    items = tload_items(b, None, vr, vc, col, iot_dst(hand, size, pemode, 1), base, stride,
                        reg_room=4, reg_p=0.3, zero_base_p=0.5)
    info = dict(op="TLOAD", cube=False, code=0, dt=dt, start_dt=dt, vr=vr, vc=vc, col=col,
                hand=hand, mask=PEMODE_MASK[pemode], pemode=pemode, size=size,
                index=b.next_index(hand))
    b.notes.append(f"ord:{vr}x{vc}/col{col}/size{size}/addr:{mode}")
    _mark(b, "large:TLOAD", "large:RowMajor", f"large:{place}")
    out = [Bundle(bstart("TLOAD", dt), items, True, info)]
    if place != "over_bound" and rng.random() < 0.5:
        _mark(b, "large:TSTORE")
        out.append(ord_tstore(b, info, fits=True))
    return out


def _prog_large_tile(b: Builder) -> list:
    place = weighted_key(b.rng, {"within": 2, "at_bound": 2, "over_bound": 1})
    return (_large_cube if b.rng.random() < 0.6 else _large_ord)(b, place)


# ----------------------------------------------------------------- the budget edge


def _charge(info: dict) -> int:
    return bin(info["mask"]).count("1") * (128 << (info["size"] - 1))


def _prog_budget_edge(b: Builder) -> list:
    """Earlier 1x1 allocations, then the edge allocation; TILE_CAPACITY set so
    that the last charge lands at it, under it, or over it."""
    rng = b.rng
    wide = [d for d in DTYPES if BITS[d] >= 16]      # 1x1 at SizeCode 10: rows <= 65535

    def free_hand():
        return pick_one(rng, [h for h in range(4) if b.hand_used[h] < b.m.hand_slots])

    out = [minimal_tload(b, free_hand(), size=int(rng.integers(1, 11)),
                         pemode=int(rng.integers(1, 8)), dt=pick_one(rng, wide))
           for _ in range(int(rng.integers(0, 3)))]
    if rng.random() < 0.5:
        out.append(cube_tload(b, dt=pick_one(rng, CUBE_DTYPES), shape_mode="fit",
                              hand=free_hand(), fits=True))
        _mark(b, "budget:cube")
    else:
        out.append(minimal_tload(b, free_hand(), size=int(rng.integers(1, 11)),
                                 pemode=int(rng.integers(1, 8)), dt=pick_one(rng, wide)))
        _mark(b, "budget:ordinary")
    total = sum(_charge(bd.info) for bd in out)
    place = weighted_key(rng, {"exact": 3, "over": 3, "slack": 1})
    step = pick_one(rng, [1, 1, 2, 8, 64, 128]) if place == "over" else \
        int(rng.integers(1, 9)) if place == "slack" else 0
    b.tile_capacity = total - step if place == "over" else total + step
    b.notes.append(f"tile_capacity:{b.tile_capacity} (charge {total})")
    _mark(b, f"budget:{place}", *(["budget:prior"] if len(out) > 1 else []))
    return out


def edge_capacity(b: Builder, family: str, in_use: int, charge: int, budget: bool):
    """TILE_CAPACITY of an MGATHER.CAS / matrix case whose destination charges
    `charge` on top of `in_use`: with its budget mutation `charge` + `in_use`
    less 1..charge bytes, else None (the config's). With an edge weight, half
    the budget mutations fall exactly 1 byte short, and a quarter of the other
    cases get exactly what they charge (noted `edge:budget:<family>_over1` /
    `_exact`)."""
    rng = b.rng
    if b.g.edge_weight > 0 and rng.random() < (0.5 if budget else 0.25):
        _mark(b, FAMILY_BUDGET_LABELS[family][int(budget)])
        return in_use + charge - int(budget)
    return in_use + charge - int(rng.integers(1, charge + 1)) if budget else None


EDGES = {"large_tile": _prog_large_tile, "budget_edge": _prog_budget_edge}

assert set(EDGES) == set(EDGE_KINDS)


def edge_case(rng: np.random.Generator, cfg=None, kind=None) -> Case:
    """One edge Case (`kind`, else drawn from the kinds the machine allows)."""
    g = gen_config(cfg)
    b = Builder(rng, g)
    kinds = edge_kinds(g.machine)
    if kind is not None and kind not in kinds:
        raise ValueError(f"edge kind {kind!r} needs tile_words > {LARGE_WORDS}")
    kind = draw_kind(rng, _FAMILY, kind, kinds)
    words = b.cut(flatten(EDGES[kind](b)))
    gm = rng.integers(0, 256, g.machine.gm_bytes, dtype=np.uint8).tobytes()
    return finish_case(b, kind, [], words, gm, tile_capacity=b.tile_capacity)
