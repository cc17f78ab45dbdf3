"""ptojax State <-> `pto.asl-model.arch-state.v1` envelope (docs/interop.md).

`to_arch_state(state, cfg=None, pe=p)` writes one State as a plain-JSON dict
that validates against the asl-model runner's schema (data/NOTICE): PE p's
single-PE view (the ASL model's view). `from_arch_state(d, cfg=None)` reads it
back. The architectural fields go where the schema puts them (memory cells,
scalar registers, pc/tpc, fault, PE p's Local tile registers with
descriptors, the Core's Shared tile registers, the open block); what the schema
has no place for (the other PEs' GPR files and Local tile files, capacity,
allocation mask, location, CUBE derived fields, definedness counts, Shared
initialized mask / published / contents-defined flags and record order, stale
payload words, the raw block header) goes under an "extensions" object's
"ptojax" key, so that `from_arch_state(to_arch_state(s))` equals `s` leaf for
leaf.
"""

from __future__ import annotations

import json
import re
from importlib import resources
from typing import Any, Optional, cast

import jax
import jax.numpy as jnp
import numpy as np

from .. import tables
from ..state import (PROFILES, SEMANTICS, Block, MachineConfig, Rules, SharedTiles, State, Tiles,
                     check_state, config_of, empty_block, max_tile_words)
from .fields import (U64 as _U64, bool_ as _bool, dtype_code as _dtype_code, fail as _fail,
                     int_ as _int, layout_code as _layout_code, list_ as _list,
                     location_code as _location_code, obj as _obj, put_bits as _put_bits,
                     put_sparse as _put_sparse, slot as _slot, str_ as _str)
from .pool_rows import pool_rows, slot_rows

SCHEMA_ID = "pto.asl-model.arch-state.v1"
KINDS = ("initial_state", "state_snapshot")
EXT = "ptojax"                 # key of ptojax's entries in every "extensions" object
EXT_FORMAT = 2                 # version of what ptojax puts under that key
# format 1 (before the per-PE Local files and Shared records): still read; its one
# Local file is PE pe_id's, the other PEs' files and the Shared records are reset.
EXT_FORMATS = (1, 2)
GM_REGION_NAME = "GM"
TILE_CAPACITY_REGISTER = "TILE_CAPACITY"

_I32 = (-(1 << 31), (1 << 31) - 1)
_SHARED_NAME = re.compile(r"^S(0|[1-9][0-9]{0,2})$")
_CELL_ADDRESS = re.compile(r"^0x(?:0|[1-9a-f][0-9a-f]*)$")

# Tiles leaves besides the payload: (leaf, name in descriptor.extensions.ptojax)
_DESC_EXT = (("location", "location"), ("capacity", "capacity_bytes"),
             ("mask", "allocation_mask"), ("k_repeat", "cube_k_repeat"),
             ("n_repeat", "cube_n_repeat"), ("cell_count", "cube_cell_count"),
             ("storage_bytes", "cube_storage_bytes"))
_TILE_SCALARS = ("allocated", "dtype", "layout", "location", "capacity", "rows", "cols",
                 "valid_rows", "valid_cols", "k_repeat", "n_repeat", "cell_count",
                 "storage_bytes", "mask", "defined_valid", "base")
# an allocated tile's place in its PE's payload pool (state.py): optional, as
# an envelope the model wrote has none (its tiles are then placed in slot order)
_POOL_BASE = "pool_base"
_FREE_DEFAULTS = {"allocated": False, "dtype": tables.DTYPE_BY_NAME["U64"].code,
                  "layout": tables.TILE_LAYOUT_CODE["RowMajor"],
                  "location": tables.TILE_LOCATION_CODE["Any"]}

# SharedTiles leaves besides the payload, and a free record's canonical values
_SHARED_SCALARS = ("sid", "allocation_mask", "initialized_mask", "published", "contents_defined",
                   "dtype", "layout", "capacity", "rows", "cols", "valid_rows", "valid_cols")
_SHARED_BOOLS = ("published", "contents_defined")
_SHARED_FREE = {"sid": -1, "published": False, "contents_defined": False,
                "dtype": tables.DTYPE_BY_NAME["U64"].code,
                "layout": tables.TILE_LAYOUT_CODE["RowMajor"]}


def schema() -> dict:
    """The runner's JSON Schema (ptojax/interop/data, unchanged from asl-model)."""
    text = resources.files(__package__).joinpath(
        "data/asl-model-arch-state-v1.schema.json").read_text(encoding="utf-8")
    return json.loads(text)


def validate(d: dict) -> None:
    """Validate an envelope against the schema with `jsonschema` (must be installed)."""
    import jsonschema
    jsonschema.validate(d, schema(), cls=jsonschema.Draft202012Validator)


# ======================================================================= export


def _name(table, i):
    """Spec name of code `i` in a tuple/dict table, or the raw int when unassigned."""
    if isinstance(table, dict):
        return table.get(i, i)
    return table[i] if 0 <= i < len(table) else i


def _sparse(a: np.ndarray, start: int) -> list:
    """[[offset, value], ...] of the nonzero entries of a[start:] (offsets absolute)."""
    nz = np.flatnonzero(a[start:]) + start
    return [[int(i), int(a[i])] for i in nz]


def _strides(layout: str, rows: int, cols: int) -> list:
    """Element strides in payload slots: affine layouts only, [] for CELL/fractal order."""
    if layout == "RowMajor":
        return [cols, 1]
    if layout == "ColumnMajor":
        return [1, rows]
    return []


def _index_of_slot(slot: int, hand_slots: int) -> int:
    hand, k = divmod(slot, hand_slots)
    return hand * tables.HAND_SLOTS + k


def _fault_kind(name: str) -> str:
    if name == "Fault_None":
        return ""
    if name in tables.MEMORY_FAULTS:
        return "memory"
    if name == "Fault_Unimplemented":
        return "unimplemented"
    return "instruction"


def _block_attributes(b: dict) -> dict:
    """Readable view of the latched header of an active block (names where assigned)."""
    op = int(b["op"])
    attrs: dict[str, Any] = {}
    if 0 <= op < len(tables.OPS):
        name, engine, function = tables.OPS[op]
        attrs.update(operation=name, engine=engine, function=function)
    else:
        attrs["operation"] = op
    dt = int(b["dtype"])
    attrs["dtype"] = tables.DTYPE_BY_CODE[dt].name if dt in tables.DTYPE_BY_CODE else dt
    if b["datr_present"]:
        lay, dt, pad, cmode, rmode, sat, canon = (int(x) for x in b["datr"])
        dname = ("DTYPE_NONE" if dt == tables.DTYPE_NONE
                 else tables.DTYPE_BY_CODE[dt].name if dt in tables.DTYPE_BY_CODE else dt)
        attrs["B.DATR"] = {"layout": _name(tables.LAYOUT_CODES, lay), "dtype": dname,
                           "pad": _name(tables.PADVALUES, pad), "cmode": _name(tables.CMODES, cmode),
                           "rmode": _name(tables.RMODES, rmode), "sat": sat, "canon": canon}
    dims = {f"LB{i}": int(v) for i, (v, p) in enumerate(zip(b["lb"], b["lb_present"])) if p}
    if dims:
        attrs["B.DIM"] = dims
    if b["ior_present"]:
        dst, s0, s1, s2 = (int(x) for x in b["ior"])
        attrs["B.IOR"] = {k: _name(tables.GPR_NAMES, v)
                          for k, v in (("dst", dst), ("src0", s0), ("src1", s1), ("src2", s2))}
    n_iot = max(0, min(int(b["iot_count"]), len(b["iot"])))
    if n_iot:
        rows = []
        for i, r in enumerate(b["iot"][:n_iot]):
            dst_valid, hand, size, mask, v0, v1, s0, s1 = (int(x) for x in r)
            rows.append({
                "mask": tables.mask_str(mask),
                "last": bool(b["iot_closed"]) and i == n_iot - 1,
                "dst": f"{_name(tables.HANDS, hand)}<{size}>" if dst_valid else None,
                "src": [tables.tile_name(s) if 0 <= s < tables.LOCAL_TILES else s
                        for s, v in ((s0, v0), (s1, v1)) if v]})
        attrs["B.IOT"] = rows
    n_ios = max(0, min(int(b["ios_count"]), len(b["ios"])))
    if n_ios:
        attrs["B.IOS"] = [{"shared_id": int(sid), "size_code": int(size),
                           "mask": tables.mask_str(int(mask))}
                          for sid, size, mask in b["ios"][:n_ios]]
    if b["fpatr_present"]:
        attrs["B.FPATR"] = int(b["fpatr"])
    if b["catr_present"]:
        attrs["B.CATR"] = int(b["catr"])
    attrs["zero_mask_seen"] = bool(b["zero_seen"])
    attrs["iot_closed"] = bool(b["iot_closed"])
    return attrs


def _export_local(t: dict, pe: int, S: int, W: int, hs: int) -> tuple[dict, dict]:
    """One PE's Local file: allocated slots as tileValue registers, stale free slots."""
    regs: dict[str, Any] = {}
    free: dict[str, Any] = {}
    words, defined = t["words"][pe].astype(np.uint64), t["defined"][pe].astype(bool)
    for slot in range(S):
        name = tables.tile_name(_index_of_slot(slot, hs))
        f = {k: int(t[k][pe, slot]) for k in _TILE_SCALARS}
        where = f"PE{pe} tile {name}"
        if f["allocated"]:
            if f["dtype"] not in tables.DTYPE_BY_CODE:
                raise ValueError(f"{where}: dtype code {f['dtype']} is not assigned")
            if not 0 <= f["layout"] < len(tables.TILE_LAYOUTS):
                raise ValueError(f"{where}: layout {f['layout']} is not a TILE_LAYOUTS index")
            if not 0 <= f["location"] < len(tables.TILE_LOCATIONS):
                raise ValueError(f"{where}: location {f['location']} is not a TILE_LOCATIONS index")
            for k in ("rows", "cols", "valid_rows", "valid_cols", "capacity", "mask", "k_repeat",
                      "n_repeat", "cell_count", "storage_bytes", "defined_valid"):
                if f[k] < 0:
                    raise ValueError(f"{where}: {k}={f[k]} is negative")
            layout = tables.TILE_LAYOUTS[f["layout"]]
            n = min(f["rows"] * f["cols"], W)
            dext = {ext: (tables.TILE_LOCATIONS[f[leaf]] if leaf == "location" else f[leaf])
                    for leaf, ext in _DESC_EXT}
            dext[_POOL_BASE] = f["base"]
            vext = {"defined_valid_elements": f["defined_valid"],
                    "words_tail": _sparse(words[slot], n),
                    "defined_tail": [int(i) for i in np.flatnonzero(defined[slot, n:]) + n]}
            regs[name] = {
                "descriptor": {"dtype": tables.DTYPE_BY_CODE[f["dtype"]].name, "layout": layout,
                               "shape": [f["rows"], f["cols"]],
                               "valid_shape": [f["valid_rows"], f["valid_cols"]],
                               "strides": _strides(layout, f["rows"], f["cols"]),
                               "extensions": {EXT: dext}},
                "data": [int(x) for x in words[slot, :n].tolist()],
                "defined": [bool(x) for x in defined[slot, :n].tolist()],
                "generation": 0,
                "extensions": {EXT: vext}}
        else:
            stale = {k: v for k, v in f.items() if v != _FREE_DEFAULTS.get(k, 0)}
            w = _sparse(words[slot], 0)
            dd = [int(i) for i in np.flatnonzero(defined[slot])]
            if stale or w or dd:
                free[name] = {"fields": stale, "words": w, "defined": dd}
    return regs, free


def _export_shared(sh: dict, WS: int) -> tuple[dict, list]:
    """Shared records: held ones as sharedTile values "S<sid>" (record order), and the
    free records that differ from the canonical free record."""
    tiles: dict[str, Any] = {}
    free: list = []
    words, defined = sh["words"].astype(np.uint64), sh["defined"].astype(bool)
    holder: dict[int, int] = {}
    for r in range(words.shape[0]):
        f = {k: (bool(sh[k][r]) if k in _SHARED_BOOLS else int(sh[k][r])) for k in _SHARED_SCALARS}
        sid = f["sid"]
        if sid == -1:
            stale = {k: v for k, v in f.items() if v != _SHARED_FREE.get(k, 0)}
            w = _sparse(words[r], 0)
            dd = [int(i) for i in np.flatnonzero(defined[r])]
            if stale or w or dd:
                free.append({"record": r, "fields": stale, "words": w, "defined": dd})
            continue
        where = f"Shared record {r}"
        if not 0 <= sid < tables.SHARED_TILES:
            raise ValueError(f"{where}: sid {sid} is neither -1 (free) nor 0..{tables.SHARED_TILES - 1}")
        if sid in holder:
            raise ValueError(f"{where}: sid {sid} is also held by record {holder[sid]}")
        holder[sid] = r
        where = f"{where} (S{sid})"
        if f["dtype"] not in tables.DTYPE_BY_CODE:
            raise ValueError(f"{where}: dtype code {f['dtype']} is not assigned")
        if not 0 <= f["layout"] < len(tables.TILE_LAYOUTS):
            raise ValueError(f"{where}: layout {f['layout']} is not a TILE_LAYOUTS index")
        for k in ("allocation_mask", "initialized_mask"):
            if not 0 <= f[k] <= 0xF:
                raise ValueError(f"{where}: {k}={f[k]} is not a 4-bit mask")
        for k in ("capacity", "rows", "cols", "valid_rows", "valid_cols"):
            if f[k] < 0:
                raise ValueError(f"{where}: {k}={f[k]} is negative")
        n = min(f["rows"] * f["cols"], WS)
        tiles[f"S{sid}"] = {
            "descriptor": {"dtype": tables.DTYPE_BY_CODE[f["dtype"]].name,
                           "layout": tables.TILE_LAYOUTS[f["layout"]],
                           "shape": [f["rows"], f["cols"]],
                           "valid_shape": [f["valid_rows"], f["valid_cols"]],
                           "strides": [f["cols"], 1],
                           "extensions": {EXT: {"capacity_bytes": f["capacity"]}}},
            "data": [int(x) for x in words[r, :n].tolist()],
            "defined": [bool(x) for x in defined[r, :n].tolist()],
            "generation": 0,
            "allocation_mask": f["allocation_mask"],
            "extensions": {EXT: {"record": r, "initialized_mask": f["initialized_mask"],
                                 "published": f["published"],
                                 "contents_defined": f["contents_defined"],
                                 "words_tail": _sparse(words[r], n),
                                 "defined_tail": [int(i) for i in np.flatnonzero(defined[r, n:]) + n]}}}
    return tiles, free


def _export_args(state: State, cfg: Optional[MachineConfig], pe, kind: str):
    """to_arch_state's arguments checked: (pe as an int, cfg: the State's sizes when None)."""
    check_state(state)
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if isinstance(pe, bool) or not isinstance(pe, (int, np.integer)) or not 0 <= pe < tables.NUM_PES:
        raise ValueError(f"pe must be 0..{tables.NUM_PES - 1}, got {pe!r}")
    pe = int(pe)
    sizes = config_of(state)
    P, S, W = state.tiles.words.shape
    R, WS = state.shared.words.shape
    if P != tables.NUM_PES:
        raise ValueError(f"State.tiles has {P} Local files; expected one per PE ({tables.NUM_PES})")
    if cfg is None:
        cfg = sizes
    elif not isinstance(cfg, MachineConfig):
        raise TypeError(f"cfg must be a MachineConfig, got {type(cfg).__name__}")
    # cast: MachineConfig sets shared_words (tile_words when None)
    elif (cfg.gm_bytes != sizes.gm_bytes or cfg.hand_slots != sizes.hand_slots or cfg.tile_words > W
          or cfg.shared_slots != R or cast(int, cfg.shared_words) > WS):
        raise ValueError(
            f"cfg (gm_bytes={cfg.gm_bytes}, hand_slots={cfg.hand_slots}, tile_words={cfg.tile_words}, "
            f"shared_slots={cfg.shared_slots}, shared_words={cfg.shared_words}) does not match the "
            f"State (gm_bytes={sizes.gm_bytes}, hand_slots={sizes.hand_slots}, {W} payload Words "
            f"per Local slot, {R} Shared records of {WS} Words)")
    return pe, cfg


def _export_scalar(gpr: np.ndarray, pe: int, tile_capacity: int, tpc: int, flags: int) -> dict:
    """state.scalar: the chosen PE's GPRs by ABI name, TILE_CAPACITY, TPC, and
    the sticky numeric status flags (CORE_STATE[36:32]) by name."""
    registers = {name: int(gpr[pe, i]) for i, name in enumerate(tables.GPR_NAMES)}
    registers[TILE_CAPACITY_REGISTER] = tile_capacity
    named = {n: bool(flags >> i & 1) for i, n in enumerate(tables.NUMERIC_FLAGS)}
    return {"registers": registers, "pc": tpc, "tpc": tpc, "flags": named, "mode": "",
            "extensions": {EXT: {"gpr": [[int(x) for x in row] for row in gpr.tolist()]}}}


def _export_memory(gm: np.ndarray) -> dict:
    """state.memory: nonzero bytes as cells, one region for the whole GM."""
    nz = np.flatnonzero(gm)
    return {"cells": {f"0x{int(a):x}": int(gm[a]) for a in nz},
            "regions": [{"base": 0, "size": int(gm.shape[0]), "permissions": "rw",
                         "name": GM_REGION_NAME, "extensions": {}}],
            "extensions": {}}


def _export_fault(fault: int, fault_address: int) -> dict:
    """state.fault."""
    if not 0 <= fault < len(tables.FAULTS):
        raise ValueError(f"fault code {fault} is not a tables.FAULTS index")
    fname = tables.FAULTS[fault]
    pending = fname != "Fault_None"
    faddr = None if (not pending and fault_address == 0) else fault_address
    return {"pending": pending, "kind": _fault_kind(fname), "code": fname, "address": faddr,
            "instruction": "",
            "message": (f"{fname} at 0x{fault_address:x}" if pending else ""),
            "recoverable": fname in tables.MEMORY_FAULTS,
            "extensions": {EXT: {"trap_number": tables.TRAP_NUMBER.get(fname)}}}


def _export_tile(t: dict, pe: int, S: int, W: int, hs: int) -> dict:
    """state.tile: PE pe's Local file as registers; the other PEs' files in extensions."""
    files = [_export_local(t, p, S, W, hs) for p in range(tables.NUM_PES)]
    tile_regs, free = files[pe]
    local_files = [None if p == pe else {"registers": regs, "free_slots": fr}
                   for p, (regs, fr) in enumerate(files)]
    return {"registers": tile_regs,
            "extensions": {EXT: {"free_slots": free, "local_files": local_files}}}


def _export_block(b: dict) -> dict:
    """state.block: readable attributes + the raw header for the round trip."""
    active = bool(b["active"])
    return {"active": active, "block_id": None,
            "start_pc": int(b["pc"]) if active else None,
            "instruction_count": 0,
            "attributes": _block_attributes(b) if active else {},
            "extensions": {EXT: {k: v.tolist() for k, v in b.items()}}}


def to_arch_state(state: State, cfg: Optional[MachineConfig] = None, *, pe: int = 0,
                  kind: str = "state_snapshot") -> dict:
    """One State as a `pto.asl-model.arch-state.v1` envelope (a plain-JSON dict).

    The envelope is PE `pe`'s single-PE view (the ASL model's view): PE `pe`'s
    GPR file fills `state.scalar.registers` and its Local tile file
    `state.tile.registers` (`pe_id` = pe); all four GPR files travel in
    `scalar.extensions.ptojax.gpr` and the other PEs' Local files in
    `tile.extensions.ptojax.local_files`. The Core's Shared records are
    `state.shared.tiles["S<sid>"]`. `cfg`, when given, must match the State's
    sizes; it is recorded in `metadata`.
    """
    pe, cfg = _export_args(state, cfg, pe, kind)
    S, W = state.tiles.base.shape[-1], state.tiles.words.shape[-1]
    L = max_tile_words(W)       # a tile's row: a packed tile's elements past W included
    R, WS = state.shared.words.shape
    hs = S // 4

    gm = np.asarray(state.gm).astype(np.uint8)
    gpr = np.asarray(state.gpr).astype(np.uint64)
    tpc = int(np.asarray(state.pc))
    fault = int(np.asarray(state.fault))
    fault_address = int(np.asarray(state.fault_address))
    tile_capacity = int(np.asarray(state.tile_capacity))
    t = slot_rows({k: np.asarray(v) for k, v in state.tiles.items()})
    sh = {k: np.asarray(v) for k, v in state.shared.items()}
    b = {k: np.asarray(v) for k, v in state.block.items()}

    scalar = _export_scalar(gpr, pe, tile_capacity, tpc, int(np.asarray(state.numeric_flags)))
    memory = _export_memory(gm)
    fault_d = _export_fault(fault, fault_address)
    tile = _export_tile(t, pe, S, L, hs)
    # ---- Shared tiles: the Core's records
    shared_tiles, free_records = _export_shared(sh, WS)
    shared = {"tiles": shared_tiles, "generations": {},
              "extensions": {EXT: {"free_records": free_records}}}
    block = _export_block(b)

    from ..version import __version__
    return {
        "schema": SCHEMA_ID,
        "kind": kind,
        "state": {
            "scalar": scalar, "block": block, "tile": tile, "shared": shared,
            "memory": memory, "fault": fault_d,
            "pe_id": pe, "thread_id": 0, "cycle": 0,
            "extensions": {EXT: {"format": EXT_FORMAT, "gm_bytes": int(gm.shape[0]),
                                 "hand_slots": hs, "tile_words": int(W),
                                 "shared_slots": int(R), "shared_words": int(WS),
                                 "pool_pages": int(state.tiles.words.shape[-2]),
                                 "pool_slot_bits": int(state.tiles.words.dtype.itemsize * 8)}},
        },
        "artifact": {"model": "ptojax", "version": __version__, "semantics": cfg.semantics,
                     "profile": cfg.profile},
        "metadata": {"machine_config": {
            "gm_bytes": cfg.gm_bytes, "tile_words": cfg.tile_words, "hand_slots": cfg.hand_slots,
            "tile_capacity": cfg.tile_capacity, "shared_slots": cfg.shared_slots,
            "shared_words": cfg.shared_words, "profile": cfg.profile,
            "cas_lane_order": cfg.cas_lane_order, "cas_seed": cfg.cas_seed,
            "semantics": cfg.semantics}},
    }


# ======================================================================= import


def _ext(extensions, label: str):
    """The ptojax entry of an "extensions" object, or None."""
    e = _obj(extensions, label)
    return e.get(EXT)


def _read_tile(v, name: str, label: str, cfg: MachineConfig, t: dict):
    slot = _slot(cfg, name, label)
    W = cfg.max_tile_words
    v = _obj(v, label, ("descriptor", "data", "defined", "generation", "extensions"))
    dl = f"{label}.descriptor"
    d = _obj(v["descriptor"], dl, ("dtype", "layout", "shape", "valid_shape", "strides", "extensions"))
    dtype = _dtype_code(d["dtype"], f"{dl}.dtype")
    layout = _layout_code(d["layout"], f"{dl}.layout")
    rows, cols = (_int(x, f"{dl}.shape[{i}]", 0, _I32[1])
                  for i, x in enumerate(_list(d["shape"], f"{dl}.shape", 2)))
    vrows, vcols = (_int(x, f"{dl}.valid_shape[{i}]", 0, _I32[1])
                    for i, x in enumerate(_list(d["valid_shape"], f"{dl}.valid_shape", 2)))
    strides = _list(d["strides"], f"{dl}.strides")
    want = _strides(tables.TILE_LAYOUTS[layout], rows, cols)
    if strides != want:
        _fail(f"{dl}.strides", f"{strides} is not ptojax's slot order for "
              f"{tables.TILE_LAYOUTS[layout]} {rows}x{cols} (expected {want})")
    dext = _ext(d["extensions"], f"{dl}.extensions")
    if dext is None:
        _fail(f"{dl}.extensions", f"needs a {EXT!r} entry: the schema has no place for the "
              "tile's location, capacity, allocation mask and CUBE geometry")
    el = f"{dl}.extensions.{EXT}"
    _obj(dext, el, [ext for _, ext in _DESC_EXT], (_POOL_BASE,))
    fields = {"allocated": True, "dtype": dtype, "layout": layout, "rows": rows, "cols": cols,
              "valid_rows": vrows, "valid_cols": vcols,
              "base": _int(dext.get(_POOL_BASE, -1), f"{el}.{_POOL_BASE}", -1, _I32[1])}
    for leaf, ext in _DESC_EXT:
        if leaf == "location":
            fields[leaf] = _location_code(dext[ext], f"{el}.{ext}")
        else:
            fields[leaf] = _int(dext[ext], f"{el}.{ext}", 0, 0xF if leaf == "mask" else _I32[1])
    data = _list(v["data"], f"{label}.data")
    dfn = _list(v["defined"], f"{label}.defined")
    if len(data) > W:
        _fail(f"{label}.data", f"{len(data)} payload Words do not fit cfg.tile_words="
              f"{cfg.tile_words}" + (f" ({W} for a packed tile)" if W > cfg.tile_words else ""))
    if len(dfn) != len(data):
        _fail(f"{label}.defined", f"has {len(dfn)} entries for {len(data)} payload Words")
    _int(v["generation"], f"{label}.generation", 0, 1 << 63)
    vext = _ext(v["extensions"], f"{label}.extensions")
    if vext is None:
        _fail(f"{label}.extensions", f"needs a {EXT!r} entry (defined_valid_elements)")
    vl = f"{label}.extensions.{EXT}"
    _obj(vext, vl, ("defined_valid_elements", "words_tail", "defined_tail"))
    fields["defined_valid"] = _int(vext["defined_valid_elements"], f"{vl}.defined_valid_elements",
                                   0, _I32[1])
    for k, val in fields.items():
        t[k][slot] = val
    n = len(data)
    t["words"][slot, :n] = np.array([_int(x, f"{label}.data[{i}]", 0, _U64)
                                     for i, x in enumerate(data)], dtype=np.uint64)
    t["defined"][slot, :n] = np.array([_bool(x, f"{label}.defined[{i}]")
                                       for i, x in enumerate(dfn)], dtype=bool)
    _put_sparse(t["words"][slot], vext["words_tail"], f"{vl}.words_tail", W, n)
    _put_bits(t["defined"][slot], vext["defined_tail"], f"{vl}.defined_tail", W, n)


def _read_free(v, name: str, label: str, cfg: MachineConfig, t: dict):
    slot = _slot(cfg, name, label)
    v = _obj(v, label, ("fields", "words", "defined"))
    fl = _obj(v["fields"], f"{label}.fields", optional=_TILE_SCALARS)
    if fl.get("allocated", False) is not False:
        _fail(f"{label}.fields.allocated", "a free slot cannot be allocated")
    for k, val in fl.items():
        if k == "allocated":
            continue
        t[k][slot] = _int(val, f"{label}.fields.{k}", *_I32)
    _put_sparse(t["words"][slot], v["words"], f"{label}.words", cfg.max_tile_words, 0)
    _put_bits(t["defined"][slot], v["defined"], f"{label}.defined", cfg.max_tile_words, 0)


def _shared_sid(name, label: str) -> int:
    m = _SHARED_NAME.match(name) if isinstance(name, str) else None
    if m is None or not 0 <= int(m.group(1)) < tables.SHARED_TILES:
        _fail(label, f"Shared tile name {name!r} is not S0..S{tables.SHARED_TILES - 1}")
    return int(m.group(1))


def _record_index(v, label: str, R: int) -> int:
    r = _int(v, label, 0, (1 << 31) - 1)
    if r >= R:
        _fail(label, f"record {r} does not fit cfg.shared_slots={R}")
    return r


def _read_shared_tile(v, sid: int, label: str, cfg: MachineConfig) -> tuple[Optional[int], dict]:
    """(record index or None, {leaf: value}) of one sharedTile value."""
    WS = cfg.shared_words
    assert WS is not None       # MachineConfig sets it (tile_words when None)
    v = _obj(v, label, ("descriptor", "data", "defined", "generation", "allocation_mask",
                        "extensions"))
    dl = f"{label}.descriptor"
    d = _obj(v["descriptor"], dl, ("dtype", "layout", "shape", "valid_shape", "strides", "extensions"))
    dtype = _dtype_code(d["dtype"], f"{dl}.dtype")
    layout = _layout_code(d["layout"], f"{dl}.layout")
    rows, cols = (_int(x, f"{dl}.shape[{i}]", 0, _I32[1])
                  for i, x in enumerate(_list(d["shape"], f"{dl}.shape", 2)))
    vrows, vcols = (_int(x, f"{dl}.valid_shape[{i}]", 0, _I32[1])
                    for i, x in enumerate(_list(d["valid_shape"], f"{dl}.valid_shape", 2)))
    strides = _list(d["strides"], f"{dl}.strides")
    if strides != [cols, 1]:
        _fail(f"{dl}.strides", f"{strides} is not ptojax's Shared payload order (element "
              f"r*columns+c, expected {[cols, 1]})")
    dext = _ext(d["extensions"], f"{dl}.extensions")
    if dext is None:
        _fail(f"{dl}.extensions", f"needs a {EXT!r} entry: the schema has no place for the "
              "Shared tile's capacity")
    el = f"{dl}.extensions.{EXT}"
    _obj(dext, el, ("capacity_bytes",))
    f: dict[str, Any] = {"sid": sid, "dtype": dtype, "layout": layout, "rows": rows, "cols": cols,
                         "valid_rows": vrows, "valid_cols": vcols,
                         "capacity": _int(dext["capacity_bytes"], f"{el}.capacity_bytes", 0, _I32[1]),
                         "allocation_mask": _int(v["allocation_mask"], f"{label}.allocation_mask", 0, 0xF)}
    _int(v["generation"], f"{label}.generation", 0, 1 << 63)
    vext = _ext(v["extensions"], f"{label}.extensions")
    if vext is None:
        _fail(f"{label}.extensions", f"needs a {EXT!r} entry: the schema has no place for the "
              "Shared tile's initialized mask, published and contents-defined flags")
    vl = f"{label}.extensions.{EXT}"
    _obj(vext, vl, ("initialized_mask", "published", "contents_defined", "words_tail"),
         ("record", "defined_tail"))
    f["initialized_mask"] = _int(vext["initialized_mask"], f"{vl}.initialized_mask", 0, 0xF)
    f["published"] = _bool(vext["published"], f"{vl}.published")
    f["contents_defined"] = _bool(vext["contents_defined"], f"{vl}.contents_defined")
    record = (_record_index(vext["record"], f"{vl}.record", cfg.shared_slots)
              if "record" in vext else None)
    data = _list(v["data"], f"{label}.data")
    dfn = _list(v["defined"], f"{label}.defined")
    if len(data) > WS:
        _fail(f"{label}.data", f"{len(data)} payload Words do not fit cfg.shared_words={WS}")
    if len(dfn) != len(data):
        _fail(f"{label}.defined", f"has {len(dfn)} entries for {len(data)} payload Words")
    n = len(data)
    words = np.zeros(WS, np.uint64)
    words[:n] = np.array([_int(x, f"{label}.data[{i}]", 0, _U64) for i, x in enumerate(data)],
                         dtype=np.uint64)
    defined = np.zeros(WS, bool)
    defined[:n] = np.array([_bool(x, f"{label}.defined[{i}]") for i, x in enumerate(dfn)], dtype=bool)
    _put_sparse(words, vext["words_tail"], f"{vl}.words_tail", WS, n, "cfg.shared_words")
    _put_bits(defined, vext.get("defined_tail", []), f"{vl}.defined_tail", WS, n, "cfg.shared_words")
    f["words"], f["defined"] = words, defined
    return record, f


def _read_shared(v, label: str, cfg: MachineConfig) -> dict:
    """SharedTiles leaves as numpy arrays."""
    R, WS = cfg.shared_slots, cfg.shared_words
    assert WS is not None       # MachineConfig sets it (tile_words when None)
    sh = {k: np.full(R, _SHARED_FREE.get(k, 0), dtype=bool if k in _SHARED_BOOLS else np.int32)
          for k in _SHARED_SCALARS}
    sh["words"] = np.zeros((R, WS), np.uint64)
    sh["defined"] = np.zeros((R, WS), bool)
    v = _obj(v, label, ("tiles", "generations", "extensions"))
    tiles = _obj(v["tiles"], f"{label}.tiles")
    if len(tiles) > R:
        _fail(f"{label}.tiles", f"{len(tiles)} Shared tiles do not fit cfg.shared_slots={R}")
    for k, g in _obj(v["generations"], f"{label}.generations").items():
        _int(g, f"{label}.generations.{k}", 0, 1 << 63)
    owner: dict[int, str] = {}          # record index -> what claims it
    placed, unplaced = [], []
    for name, tv in tiles.items():
        tl = f"{label}.tiles[{name!r}]"
        sid = _shared_sid(name, tl)
        record, f = _read_shared_tile(tv, sid, tl, cfg)
        if record is None:
            unplaced.append((sid, f))
            continue
        if record in owner:
            _fail(f"{tl}.extensions.{EXT}.record", f"record {record} is also held by {owner[record]}")
        owner[record] = name
        placed.append((record, f))
    ext = _ext(v["extensions"], f"{label}.extensions")
    free_records = []
    if ext is not None:
        el = f"{label}.extensions.{EXT}"
        _obj(ext, el, ("free_records",))
        for i, fr in enumerate(_list(ext["free_records"], f"{el}.free_records")):
            fl = f"{el}.free_records[{i}]"
            fr = _obj(fr, fl, ("record", "fields", "words"), ("defined",))
            record = _record_index(fr["record"], f"{fl}.record", R)
            if record in owner:
                _fail(f"{fl}.record", f"record {record} is also held by {owner[record]}")
            owner[record] = f"free record entry {i}"
            fields = _obj(fr["fields"], f"{fl}.fields", optional=_SHARED_SCALARS)
            if fields.get("sid", -1) != -1:
                _fail(f"{fl}.fields.sid", "a free record holds sid -1")
            vals = {}
            for k, val in fields.items():
                vals[k] = (_bool(val, f"{fl}.fields.{k}") if k in _SHARED_BOOLS
                           else _int(val, f"{fl}.fields.{k}", *_I32))
            words, defined = np.zeros(WS, np.uint64), np.zeros(WS, bool)
            _put_sparse(words, fr["words"], f"{fl}.words", WS, 0, "cfg.shared_words")
            _put_bits(defined, fr.get("defined", []), f"{fl}.defined", WS, 0, "cfg.shared_words")
            free_records.append((record, vals, words, defined))
    # tiles without a record index take the lowest unclaimed records, in SharedTileID order
    spare = (r for r in range(R) if r not in owner)
    for sid, f in sorted(unplaced, key=lambda x: x[0]):
        r = next(spare, None)
        if r is None:
            _fail(f"{label}.tiles", f"no record of cfg.shared_slots={R} left for S{sid}")
        placed.append((r, f))
    for r, f in placed:
        for k, val in f.items():
            sh[k][r] = val
    for r, vals, words, defined in free_records:
        for k, val in vals.items():
            sh[k][r] = val
        sh["words"][r], sh["defined"][r] = words, defined
    return sh


def _read_block(v, label: str) -> dict:
    """Block leaves as numpy arrays (the reset block when inactive with no extension)."""
    v = _obj(v, label, ("active", "block_id", "start_pc", "instruction_count", "attributes",
                        "extensions"))
    active = _bool(v["active"], f"{label}.active")
    if v["block_id"] is not None:
        _int(v["block_id"], f"{label}.block_id", -(1 << 63), _U64)
    start_pc = v["start_pc"]
    if start_pc is not None:
        _int(start_pc, f"{label}.start_pc", 0, _U64)
    _int(v["instruction_count"], f"{label}.instruction_count", 0, 1 << 63)
    _obj(v["attributes"], f"{label}.attributes")
    with jax.enable_x64(True):
        template = {k: np.asarray(x) for k, x in empty_block().items()}
    raw = _ext(v["extensions"], f"{label}.extensions")
    if raw is None:
        if active:
            _fail(f"{label}.extensions", f"an open block needs a {EXT!r} entry (its latched "
                  "header); the schema's attributes are a view, not the header state")
        return template
    el = f"{label}.extensions.{EXT}"
    _obj(raw, el, tuple(template))
    out = {}
    for k, tmpl in template.items():
        a = raw[k]
        try:
            arr = np.array(a, dtype=object)
        except ValueError:
            arr = None
        if arr is None or arr.shape != tmpl.shape:
            _fail(f"{el}.{k}", f"must have shape {list(tmpl.shape)}")
        flat = arr.reshape(-1).tolist()
        vals: list[bool] | list[int]
        if tmpl.dtype == bool:
            vals = [_bool(x, f"{el}.{k}") for x in flat]
        else:
            info = np.iinfo(tmpl.dtype)
            vals = [_int(x, f"{el}.{k}", int(info.min), int(info.max)) for x in flat]
        out[k] = np.array(vals, dtype=tmpl.dtype).reshape(tmpl.shape)
    if bool(out["active"]) != active:
        _fail(f"{label}.active", f"{active} disagrees with extensions.{EXT}.active")
    want_pc = int(out["pc"]) if active else None
    if start_pc != want_pc:
        _fail(f"{label}.start_pc", f"{start_pc} disagrees with the header's BPC {want_pc}")
    return out


def _read_config(st: dict, cfg: Optional[MachineConfig], artifact: dict) -> MachineConfig:
    """The State's sizes and rules: `cfg`, else the sizes recorded in
    state.extensions.ptojax and the rules in artifact.semantics and .profile
    (to_arch_state writes both), each defaulting to MachineConfig()'s."""
    top = _ext(st["extensions"], "state.extensions")
    if top is not None:
        tl = f"state.extensions.{EXT}"
        fmt = _obj(top, tl).get("format")
        if isinstance(fmt, bool) or fmt not in EXT_FORMATS:
            _fail(f"{tl}.format", f"unsupported ptojax extension format {fmt!r}; "
                  f"expected one of {EXT_FORMATS}")
        keys: tuple[str, ...] = ("format", "gm_bytes", "hand_slots", "tile_words")
        if fmt >= 2:
            keys += ("shared_slots", "shared_words")
        _obj(top, tl, keys, ("pool_pages", "pool_slot_bits"))
        # MachineConfig(**src) keywords (all ints here; the signature mixes str and int)
        src: Optional[dict[str, Any]] = {k: _int(top[k], f"{tl}.{k}", 1, 1 << 30) for k in keys[1:]}
    else:
        src = None
    if cfg is None:
        try:
            cfg = MachineConfig(**src) if src is not None else MachineConfig()
        except ValueError as e:
            _fail(f"state.extensions.{EXT}", str(e))
        for key, names in (("semantics", SEMANTICS), ("profile", PROFILES)):
            if key in artifact:
                if artifact[key] not in names:
                    _fail(f"envelope.artifact.{key}", f"unknown {key} {artifact[key]!r}; "
                          f"expected one of {names}")
                cfg = cfg.replace(**{key: artifact[key]})
    elif not isinstance(cfg, MachineConfig):
        raise TypeError(f"cfg must be a MachineConfig, got {type(cfg).__name__}")
    return cfg


def _pool_shape(st: dict, cfg: MachineConfig) -> tuple[int, bool]:
    """(pages, 64-bit slots) of each PE's payload pool: as recorded (an envelope
    ptojax wrote), else those of `cfg` (state.pool_pages_for, slots64)."""
    top = _ext(st["extensions"], "state.extensions") or {}
    pages, s64 = cfg.pool_pages, cfg.pool_slots64
    if "pool_pages" in top:
        pages = _int(top["pool_pages"], f"state.extensions.{EXT}.pool_pages", 1, 1 << 30)
    if "pool_slot_bits" in top:
        bits = _int(top["pool_slot_bits"], f"state.extensions.{EXT}.pool_slot_bits", 32, 64)
        if bits not in (32, 64):
            _fail(f"state.extensions.{EXT}.pool_slot_bits", f"{bits}: expected 32 or 64")
        s64 = bits == 64
    return pages, s64


def _read_scalar(v, pe: int, cfg: MachineConfig) -> tuple[np.ndarray, int, int, int]:
    """state.scalar: (the four GPR files, TPC, TILE_CAPACITY, the numeric flags:
    NV, DZ, OF, UF, NX each a boolean or 0/1, an absent one clear)."""
    sc = _obj(v, "state.scalar", ("registers", "pc", "tpc", "flags", "mode", "extensions"))
    regs = _obj(sc["registers"], "state.scalar.registers")
    tpc = _int(sc["tpc"], "state.scalar.tpc", 0, _U64)
    _int(sc["pc"], "state.scalar.pc", 0, _U64)
    flags = 0
    for k, fv in _obj(sc["flags"], "state.scalar.flags").items():
        if k not in tables.NUMERIC_FLAGS:
            _fail(f"state.scalar.flags.{k}", f"unknown flag; expected one of "
                  f"{', '.join(tables.NUMERIC_FLAGS)} (CORE_STATE[36:32])")
        if not isinstance(fv, (bool, int)) or fv not in (0, 1):
            _fail(f"state.scalar.flags.{k}", "must be a boolean (or 0 / 1)")
        flags |= int(fv) << tables.NUMERIC_FLAGS.index(k)
    _str(sc["mode"], "state.scalar.mode")
    gpr = np.zeros((tables.NUM_PES, tables.NUM_GPRS), np.uint64)
    sext = _ext(sc["extensions"], "state.scalar.extensions")
    if sext is not None:
        el = f"state.scalar.extensions.{EXT}"
        _obj(sext, el, ("gpr",))
        rows = _list(sext["gpr"], f"{el}.gpr", tables.NUM_PES)
        for p, row in enumerate(rows):
            for i, x in enumerate(_list(row, f"{el}.gpr[{p}]", tables.NUM_GPRS)):
                gpr[p, i] = _int(x, f"{el}.gpr[{p}][{i}]", 0, _U64)
    tile_capacity = cfg.tile_capacity
    for name, val in regs.items():
        label = f"state.scalar.registers.{name}"
        if name == TILE_CAPACITY_REGISTER:
            tile_capacity = _int(val, label, 0, _U64)
            continue
        if name not in tables.GPR_NAMES:
            _fail(label, f"unknown register {name!r}; expected one of "
                  f"{', '.join(tables.GPR_NAMES)} or {TILE_CAPACITY_REGISTER}")
        i = tables.GPR_NAMES.index(name)
        val = _int(val, label, 0, _U64)
        if sext is not None and int(gpr[pe, i]) != val:
            _fail(label, f"{val:#x} disagrees with extensions.{EXT}.gpr[{pe}][{i}] = "
                  f"{int(gpr[pe, i]):#x}")
        gpr[pe, i] = val
    return gpr, tpc, tile_capacity, flags


def _read_memory(v, G: int) -> np.ndarray:
    """state.memory: the GM bytes."""
    mem = _obj(v, "state.memory", ("cells", "regions", "extensions"))
    gm = np.zeros(G, np.uint8)
    for i, r in enumerate(_list(mem["regions"], "state.memory.regions")):
        rl = f"state.memory.regions[{i}]"
        r = _obj(r, rl, ("base", "size", "permissions", "name", "extensions"))
        base = _int(r["base"], f"{rl}.base", 0, _U64)
        size = _int(r["size"], f"{rl}.size", 1, _U64)
        if r["permissions"] not in ("r", "w", "x", "rw", "rx", "wx", "rwx"):
            _fail(f"{rl}.permissions", f"{r['permissions']!r} is not an rwx subset")
        _str(r["name"], f"{rl}.name")
        _obj(r["extensions"], f"{rl}.extensions")
        if base + size > G:
            _fail(rl, f"[{base:#x}, {base + size:#x}) does not fit cfg.gm_bytes={G}")
    for addr, val in _obj(mem["cells"], "state.memory.cells").items():
        label = f"state.memory.cells[{addr!r}]"
        if not _CELL_ADDRESS.match(addr):
            _fail(label, "address must be lowercase hex 0x... without leading zeros")
        a = int(addr, 16)
        if a >= G:
            _fail(label, f"address does not fit cfg.gm_bytes={G}")
        gm[a] = _int(val, label, 0, 255)
    _obj(mem["extensions"], "state.memory.extensions")
    return gm


def _read_fault(v) -> tuple[str, int]:
    """state.fault: (its code name, its address)."""
    fl = _obj(v, "state.fault", ("pending", "kind", "code", "address", "instruction",
                                 "message", "recoverable", "extensions"))
    code = _str(fl["code"], "state.fault.code")
    if code not in tables.FAULTS:
        _fail("state.fault.code", f"unknown fault {code!r}; expected one of {', '.join(tables.FAULTS)}")
    if _bool(fl["pending"], "state.fault.pending") != (code != "Fault_None"):
        _fail("state.fault.pending", f"{fl['pending']} disagrees with code {code}")
    fault_address = 0 if fl["address"] is None else _int(fl["address"], "state.fault.address", 0, _U64)
    for k in ("kind", "instruction", "message"):
        _str(fl[k], f"state.fault.{k}")
    _bool(fl["recoverable"], "state.fault.recoverable")
    _obj(fl["extensions"], "state.fault.extensions")
    return code, fault_address


def _read_local_files(tile, pe: int, cfg: MachineConfig) -> dict:
    """Tiles leaves as numpy arrays: state.tile is PE pe_id's file, the others travel
    in extensions (reset when absent)."""
    P, S, W = tables.NUM_PES, cfg.local_slots, cfg.max_tile_words
    t = {k: np.full((P, S), _FREE_DEFAULTS.get(k, 0), dtype=bool if k == "allocated" else np.int32)
         for k in _TILE_SCALARS}
    t["words"] = np.zeros((P, S, W), np.uint64)
    t["defined"] = np.zeros((P, S, W), bool)
    tl = _obj(tile, "state.tile", ("registers", "extensions"))
    text = _ext(tl["extensions"], "state.tile.extensions")
    el = f"state.tile.extensions.{EXT}"
    if text is not None:
        _obj(text, el, ("free_slots",), ("local_files",))
    files = {pe: (tl["registers"], "state.tile.registers",
                  None if text is None else text["free_slots"], f"{el}.free_slots")}
    if text is not None:
        if "local_files" in text:
            lf = _list(text["local_files"], f"{el}.local_files", P)
            for p, v in enumerate(lf):
                fl = f"{el}.local_files[{p}]"
                if p == pe:
                    if v is not None:
                        _fail(fl, f"must be null: PE {pe}'s Local file is state.tile.registers "
                              "(pe_id)")
                    continue
                v = _obj(v, fl, ("registers", "free_slots"))
                files[p] = (v["registers"], f"{fl}.registers", v["free_slots"], f"{fl}.free_slots")
    for p, (regs, rlabel, free, flabel) in sorted(files.items()):
        tp = {k: a[p] for k, a in t.items()}        # views of PE p's file
        seen = set()
        for name, v in _obj(regs, rlabel).items():
            _read_tile(v, name, f"{rlabel}[{name!r}]", cfg, tp)
            seen.add(name)
        if free is not None:
            for name, v in _obj(free, flabel).items():
                label = f"{flabel}[{name!r}]"
                if name in seen:
                    _fail(label, f"tile {name} is both allocated and free")
                _read_free(v, name, label, cfg, tp)
    return t


def from_arch_state(d: dict, cfg: Optional[MachineConfig] = None) -> State:
    """The State described by a `pto.asl-model.arch-state.v1` envelope.

    `state.tile` becomes PE `pe_id`'s Local file, `tile.extensions.ptojax.local_files`
    the other PEs' (reset when absent), `state.shared.tiles` the Shared records.
    `cfg` gives the State's sizes (GM bytes, hand slots, payload Words, Shared
    records and their Words); by default the sizes recorded in
    `state.extensions.ptojax`, else MachineConfig(). Raises ValueError on a
    malformed envelope or on content that does not fit `cfg`.
    """
    env = _obj(d, "envelope", ("schema", "kind", "state", "artifact", "metadata"))
    if env["schema"] != SCHEMA_ID:
        _fail("envelope.schema", f"unsupported schema {env['schema']!r}; expected {SCHEMA_ID!r}")
    if env["kind"] not in KINDS:
        _fail("envelope.kind", f"unsupported kind {env['kind']!r}; expected one of {KINDS}")
    _obj(env["artifact"], "envelope.artifact")
    _obj(env["metadata"], "envelope.metadata")
    st = _obj(env["state"], "state", ("scalar", "block", "tile", "shared", "memory", "fault",
                                      "pe_id", "thread_id", "cycle", "extensions"))
    pe = _int(st["pe_id"], "state.pe_id", 0, tables.NUM_PES - 1)
    _int(st["thread_id"], "state.thread_id", 0, 1 << 63)
    _int(st["cycle"], "state.cycle", 0, 1 << 63)
    cfg = _read_config(st, cfg, env["artifact"])

    gpr, tpc, tile_capacity, flags = _read_scalar(st["scalar"], pe, cfg)
    gm = _read_memory(st["memory"], cfg.gm_bytes)
    code, fault_address = _read_fault(st["fault"])
    t = pool_rows(_read_local_files(st["tile"], pe, cfg), *_pool_shape(st, cfg), cfg.tile_words)
    # ---- Shared tiles: the Core's records
    sh = _read_shared(st["shared"], "state.shared", cfg)

    blk = _read_block(st["block"], "state.block")

    with jax.enable_x64(True):
        tiles = Tiles(**{k: jnp.asarray(v) for k, v in t.items()})
        shared = SharedTiles(**{k: jnp.asarray(v) for k, v in sh.items()})
        block = Block(**{k: jnp.asarray(v) for k, v in blk.items()})
        return State(gm=jnp.asarray(gm), gpr=jnp.asarray(gpr),
                     pc=jnp.asarray(tpc, jnp.uint64),
                     fault=jnp.asarray(tables.FAULTS.index(code), jnp.int32),
                     fault_address=jnp.asarray(fault_address, jnp.uint64),
                     numeric_flags=jnp.asarray(flags, jnp.int32),
                     tile_capacity=jnp.asarray(tile_capacity, jnp.uint64),
                     tiles=tiles, shared=shared, block=block, rules=Rules.of(cfg))
