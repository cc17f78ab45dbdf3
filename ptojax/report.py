"""The report of one run: what it changed, and how `ptojax run` and the demo print it.

`build_report` compares the State before a run with the result's State: the
Local tiles and Shared registers whose records differ, the changed GM byte
ranges, the fault and where it stopped; `format_report` renders it as text
(tile pictures, hex dumps, a disassembly listing marking the faulting word).
"""

from __future__ import annotations

from typing import cast

import numpy as np

from . import tables
from .isa import asm
from .state import own_words
from .tileview import TileView, read_shared, read_tile


def changed_tiles(before, after) -> list[tuple[int, int]]:
    """(PE, TileIndex 0..63) of the Local tiles whose descriptor or payload differ."""
    P, S = after.tiles.allocated.shape
    hand_slots = S // 4
    diff = np.zeros((P, S), bool)
    for name in after.tiles.keys():
        if name in ("words", "defined"):
            continue
        a, b = np.asarray(getattr(before.tiles, name)), np.asarray(getattr(after.tiles, name))
        diff |= (a != b).reshape(P, S, -1).any(axis=2)
    for pe, slot in np.argwhere(~diff & np.asarray(after.tiles.allocated)):   # its own Words
        diff[pe, slot] = any(not np.array_equal(x, y) for x, y in
                             zip(own_words(before.tiles, pe, slot), own_words(after.tiles, pe, slot)))
    return [(int(pe), int((slot // hand_slots) * tables.HAND_SLOTS + slot % hand_slots))
            for pe, slot in np.argwhere(diff)]


def changed_shared(before, after) -> list[int]:
    """SharedTileIDs whose record differs between two States."""
    a_sid, b_sid = np.asarray(before.shared.sid), np.asarray(after.shared.sid)
    diff = a_sid != b_sid
    for name in after.shared.keys():
        ne = np.asarray(getattr(before.shared, name)) != np.asarray(getattr(after.shared, name))
        diff |= ne.reshape(ne.shape[0], -1).any(axis=1)
    return sorted({int(x) for x in np.concatenate([a_sid[diff], b_sid[diff]]) if x >= 0})


def index_ranges(idx: np.ndarray, gap: int = 0) -> list[tuple[int, int]]:
    """[start, end) ranges covering the ascending indices `idx`; indices <= `gap` apart merge."""
    ranges: list[list[int]] = []
    for i in idx.tolist():
        if ranges and i - ranges[-1][1] <= gap:
            ranges[-1][1] = i + 1
        else:
            ranges.append([i, i + 1])
    return [(a, b) for a, b in ranges]


def changed_ranges(before: np.ndarray, after: np.ndarray, gap: int = 16) -> list[tuple[int, int]]:
    """[start, end) ranges covering every changed byte; changes <= `gap` bytes apart merge."""
    return index_ranges(np.flatnonzero(before != after), gap)


def hexdump(data: bytes, base: int, indent: str = "  ") -> str:
    """16 bytes per row, rows aligned to 16-byte addresses; bytes outside `data` blank."""
    lines = []
    end = base + len(data)
    for row in range(base - base % 16, end, 16):
        cells = []
        for a in range(row, row + 16):
            cells.append(f"{data[a - base]:02x}" if base <= a < end else "  ")
            if a % 16 == 7:
                cells.append("")
        lines.append(f"{indent}{row:#06x}: " + " ".join(cells).rstrip())
    return "\n".join(lines)


def tile_json(t: TileView) -> dict:
    d = {"index": t.index, "name": t.name, "allocated": t.allocated, "layout": t.layout,
         "dtype": t.dtype, "rows": t.rows, "columns": t.columns, "valid_rows": t.valid_rows,
         "valid_columns": t.valid_columns, "capacity_bytes": t.capacity_bytes,
         "location": t.location, "pe_mask": tables.mask_str(t.pe_mask), "k_repeat": t.k_repeat,
         "n_repeat": t.n_repeat, "cell_count": t.cell_count, "storage_bytes": t.storage_bytes,
         "defined_valid_elements": t.defined_valid_elements,
         "words": [f"0x{int(w):016x}" for w in t.words],
         "defined": [bool(x) for x in t.defined]}
    return d


def listing(words, start: int, mark: int | None = None, note: str = "") -> list[str]:
    """Disassembly with addresses; word `mark` gets `<- note`."""
    width = max((len(asm.disassemble([w])) for w in words), default=0)
    out = []
    for i, w in enumerate(words):
        text = asm.disassemble([w])
        line = f"  {start + 4 * i:#06x}  {w:08x}  {text}"
        if i == mark:
            line = f"{line.ljust(width + 20)}  <- {note}"
        out.append(line)
    return out


def source_listing(text: str, start: int) -> list[str]:
    """Source lines (comments kept) with the address and word of each command."""
    out, i = [], 0
    for n, line in enumerate(text.splitlines(), 1):
        w = asm.assemble_line(line, n)
        if w is None:
            if line.strip():
                out.append(f"{'':20}{line.strip()}")
            continue
        out.append(f"  {start + 4 * i:#06x}  {w:08x}  {line.strip()}")
        i += 1
    return out


def build_report(before, result, words, *, model: str, config: str, pe,
                 on_fault: str, profile: str = "portable", semantics: str = "adr0100") -> dict:
    """`pe` is the executing PE, or "core" for a pj.run_core stream."""
    after = result.state
    start = int(np.asarray(before.pc))
    faulted = result.fault != "Fault_None"
    fault_word = result.executed if faulted else None
    tiles = [(p, read_tile(after, i, pe=p)) for p, i in changed_tiles(before, after)]
    shared = [read_shared(after, sid) for sid in changed_shared(before, after)]
    gm0, gm1 = np.asarray(before.gm), np.asarray(after.gm)
    memory = [{"address": a, "length": b - a, "before": gm0[a:b].tobytes().hex(),
               "after": gm1[a:b].tobytes().hex()} for a, b in changed_ranges(gm0, gm1)]
    block = after.block
    return {
        "model": model, "config": config, "profile": profile, "semantics": semantics, "pe": pe,
        "on_fault": on_fault,
        "program": [{"address": start + 4 * i, "word": f"0x{w:08x}",
                     "text": asm.disassemble([w])} for i, w in enumerate(words)],
        "fault": result.fault,
        "fault_address": result.fault_address,
        "fault_word": fault_word,
        "fault_pc": start + 4 * cast(int, fault_word) if faulted else None,     # faulted: an int
        "executed": result.executed,
        "numeric_flags": result.numeric_flags,
        "numeric_flags_raised": tables.flag_names(int(np.asarray(after.numeric_flags))
                                                  & ~int(np.asarray(before.numeric_flags))),
        "pc": int(np.asarray(after.pc)),
        "block_open": bool(np.asarray(block.active)),
        "block_pc": int(np.asarray(block.pc)) if bool(np.asarray(block.active)) else None,
        "tiles": [dict(tile_json(t), pe=p) for p, t in tiles],
        "shared": [dict(tile_json(t), allocation_mask=tables.mask_str(t.allocation_mask),
                        initialized_mask=tables.mask_str(t.initialized_mask),
                        published=t.published) for t in shared],
        "memory": memory,
        "_tile_views": tiles,
        "_shared_views": shared,
        "_gm_after": gm1,
    }


def fault_line(rep: dict) -> str:
    n = len(rep["program"])
    if rep["fault"] == "Fault_None":
        return f"Fault_None: {rep['executed']} of {n} words executed, pc {rep['pc']:#x}"
    i = rep["fault_word"]
    where = f"word {i} at pc {rep['fault_pc']:#x}: {rep['program'][i]['text']}"
    if rep["fault_address"] is not None:
        what = f"{rep['fault']} at data address {rep['fault_address']:#x} ({where})"
    else:
        what = f"{rep['fault']} ({where})"
    return f"{what}; {rep['executed']} of {n} words executed before it"


def format_report(rep: dict) -> str:
    who = "the whole Core (PE0..PE3)" if rep["pe"] == "core" else f"PE {rep['pe']}"
    out = [f"program: {len(rep['program'])} words, {rep['model']} model, config {rep['config']}, "
           f"{rep['profile']} profile, {rep['semantics']} semantics, {who}"]
    words = [int(p["word"], 16) for p in rep["program"]]
    start = rep["program"][0]["address"] if words else rep["pc"]
    out += listing(words, start, rep["fault_word"], rep["fault"])
    out.append("")
    out.append(("fault: " if rep["fault"] != "Fault_None" else "result: ") + fault_line(rep))
    if rep["block_open"]:
        why = ("held pending (--on-fault hold)" if rep["fault"] != "Fault_None"
               else "the stream ended inside it")
        out.append(f"block open: BSTART at {rep['block_pc']:#x}, {why}")
    flags = rep["numeric_flags"]
    raised = rep["numeric_flags_raised"]
    out.append("numeric flags (sticky): " + (" ".join(flags) if flags else "none")
               + (f" (raised by this program: {' '.join(raised)})" if raised else ""))
    out.append("")
    views = rep["_tile_views"]
    out.append(f"tiles changed: {len(views)}" if views else "tiles changed: none")
    for p, t in views:
        out += ["  " + (f"PE{p} " if i == 0 else "") + line
                for i, line in enumerate(t.render().splitlines())]
    if rep["_shared_views"]:
        out.append(f"shared registers changed: {len(rep['_shared_views'])}")
        for t in rep["_shared_views"]:
            out.append("  " + t.summary())
    out.append("")
    mem = rep["memory"]
    out.append(f"memory changed: {len(mem)} range{'s' if len(mem) != 1 else ''}"
               if mem else "memory changed: none")
    gm = rep["_gm_after"]
    for m in mem:
        a, n = m["address"], m["length"]
        out.append(f"  {a:#06x}..{a + n - 1:#06x} ({n} bytes; the whole 16-byte rows after the run)")
        lo, hi = a - a % 16, min(len(gm), -(-(a + n) // 16) * 16)
        out.append(hexdump(gm[lo:hi].tobytes(), lo, indent="    "))
    return "\n".join(out)
