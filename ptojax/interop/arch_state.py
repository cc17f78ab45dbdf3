"""ptojax State <-> `pto.asl-model.arch-state.v1` envelope (docs/interop.md).

`to_arch_state(state, cfg=None, pe=p)` writes one State as a plain-JSON dict
that validates against the asl-model runner's schema (data/NOTICE): PE p's
single-PE view (the ASL model's view). `from_arch_state(d, cfg=None)`
(arch_state_read.py) reads it back. The architectural fields go where the schema puts them (memory cells,
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

from typing import Any, Optional, cast

import numpy as np

from .. import tables
from ..state import MachineConfig, State, check_state, config_of, max_tile_words
from .envelope import (SCHEMA_ID, KINDS, EXT, EXT_FORMAT, GM_REGION_NAME,
                       TILE_CAPACITY_REGISTER, DESC_EXT, TILE_SCALARS, POOL_BASE,
                       FREE_DEFAULTS, SHARED_SCALARS, SHARED_BOOLS, SHARED_FREE, slot_strides)
from .pool_rows import slot_rows


def _name(table, i):
    """Spec name of code `i` in a tuple/dict table, or the raw int when unassigned."""
    if isinstance(table, dict):
        return table.get(i, i)
    return table[i] if 0 <= i < len(table) else i


def _sparse(a: np.ndarray, start: int) -> list:
    """[[offset, value], ...] of the nonzero entries of a[start:] (offsets absolute)."""
    nz = np.flatnonzero(a[start:]) + start
    return [[int(i), int(a[i])] for i in nz]




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
        f = {k: int(t[k][pe, slot]) for k in TILE_SCALARS}
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
                    for leaf, ext in DESC_EXT}
            dext[POOL_BASE] = f["base"]
            vext = {"defined_valid_elements": f["defined_valid"],
                    "words_tail": _sparse(words[slot], n),
                    "defined_tail": [int(i) for i in np.flatnonzero(defined[slot, n:]) + n]}
            regs[name] = {
                "descriptor": {"dtype": tables.DTYPE_BY_CODE[f["dtype"]].name, "layout": layout,
                               "shape": [f["rows"], f["cols"]],
                               "valid_shape": [f["valid_rows"], f["valid_cols"]],
                               "strides": slot_strides(layout, f["rows"], f["cols"]),
                               "extensions": {EXT: dext}},
                "data": [int(x) for x in words[slot, :n].tolist()],
                "defined": [bool(x) for x in defined[slot, :n].tolist()],
                "generation": 0,
                "extensions": {EXT: vext}}
        else:
            stale = {k: v for k, v in f.items() if v != FREE_DEFAULTS.get(k, 0)}
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
        f = {k: (bool(sh[k][r]) if k in SHARED_BOOLS else int(sh[k][r])) for k in SHARED_SCALARS}
        sid = f["sid"]
        if sid == -1:
            stale = {k: v for k, v in f.items() if v != SHARED_FREE.get(k, 0)}
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
