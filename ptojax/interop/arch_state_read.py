"""`from_arch_state`: a `pto.asl-model.arch-state.v1` envelope read back into
a State (docs/interop.md), every field checked with the path it came from;
the inverse of arch_state.to_arch_state.
"""

from __future__ import annotations

from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

from .. import tables
from ..state import (PROFILES, SEMANTICS, Block, MachineConfig, Rules, SharedTiles, State, Tiles,
                     empty_block)
from .fields import (U64 as _U64, bool_ as _bool, dtype_code as _dtype_code, fail as _fail,
                     int_ as _int, layout_code as _layout_code, list_ as _list,
                     location_code as _location_code, obj as _obj, put_bits as _put_bits,
                     put_sparse as _put_sparse, slot as _slot, str_ as _str)
from .envelope import (SCHEMA_ID, KINDS, EXT, EXT_FORMATS, TILE_CAPACITY_REGISTER, I32,
                       SHARED_NAME, CELL_ADDRESS, DESC_EXT, TILE_SCALARS, POOL_BASE,
                       FREE_DEFAULTS, SHARED_SCALARS, SHARED_BOOLS, SHARED_FREE, slot_strides)
from .pool_rows import pool_rows


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
    rows, cols = (_int(x, f"{dl}.shape[{i}]", 0, I32[1])
                  for i, x in enumerate(_list(d["shape"], f"{dl}.shape", 2)))
    vrows, vcols = (_int(x, f"{dl}.valid_shape[{i}]", 0, I32[1])
                    for i, x in enumerate(_list(d["valid_shape"], f"{dl}.valid_shape", 2)))
    strides = _list(d["strides"], f"{dl}.strides")
    want = slot_strides(tables.TILE_LAYOUTS[layout], rows, cols)
    if strides != want:
        _fail(f"{dl}.strides", f"{strides} is not ptojax's slot order for "
              f"{tables.TILE_LAYOUTS[layout]} {rows}x{cols} (expected {want})")
    dext = _ext(d["extensions"], f"{dl}.extensions")
    if dext is None:
        _fail(f"{dl}.extensions", f"needs a {EXT!r} entry: the schema has no place for the "
              "tile's location, capacity, allocation mask and CUBE geometry")
    el = f"{dl}.extensions.{EXT}"
    _obj(dext, el, [ext for _, ext in DESC_EXT], (POOL_BASE,))
    fields = {"allocated": True, "dtype": dtype, "layout": layout, "rows": rows, "cols": cols,
              "valid_rows": vrows, "valid_cols": vcols,
              "base": _int(dext.get(POOL_BASE, -1), f"{el}.{POOL_BASE}", -1, I32[1])}
    for leaf, ext in DESC_EXT:
        if leaf == "location":
            fields[leaf] = _location_code(dext[ext], f"{el}.{ext}")
        else:
            fields[leaf] = _int(dext[ext], f"{el}.{ext}", 0, 0xF if leaf == "mask" else I32[1])
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
                                   0, I32[1])
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
    fl = _obj(v["fields"], f"{label}.fields", optional=TILE_SCALARS)
    if fl.get("allocated", False) is not False:
        _fail(f"{label}.fields.allocated", "a free slot cannot be allocated")
    for k, val in fl.items():
        if k == "allocated":
            continue
        t[k][slot] = _int(val, f"{label}.fields.{k}", *I32)
    _put_sparse(t["words"][slot], v["words"], f"{label}.words", cfg.max_tile_words, 0)
    _put_bits(t["defined"][slot], v["defined"], f"{label}.defined", cfg.max_tile_words, 0)


def _shared_sid(name, label: str) -> int:
    m = SHARED_NAME.match(name) if isinstance(name, str) else None
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
    rows, cols = (_int(x, f"{dl}.shape[{i}]", 0, I32[1])
                  for i, x in enumerate(_list(d["shape"], f"{dl}.shape", 2)))
    vrows, vcols = (_int(x, f"{dl}.valid_shape[{i}]", 0, I32[1])
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
                         "capacity": _int(dext["capacity_bytes"], f"{el}.capacity_bytes", 0, I32[1]),
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
    sh = {k: np.full(R, SHARED_FREE.get(k, 0), dtype=bool if k in SHARED_BOOLS else np.int32)
          for k in SHARED_SCALARS}
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
            fields = _obj(fr["fields"], f"{fl}.fields", optional=SHARED_SCALARS)
            if fields.get("sid", -1) != -1:
                _fail(f"{fl}.fields.sid", "a free record holds sid -1")
            vals = {}
            for k, val in fields.items():
                vals[k] = (_bool(val, f"{fl}.fields.{k}") if k in SHARED_BOOLS
                           else _int(val, f"{fl}.fields.{k}", *I32))
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
        if not CELL_ADDRESS.match(addr):
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
    t = {k: np.full((P, S), FREE_DEFAULTS.get(k, 0), dtype=bool if k == "allocated" else np.int32)
         for k in TILE_SCALARS}
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
