"""Host-side views of tiles (`pj.read_tile`) that print and draw themselves."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import cast

import numpy as np
from numpy.typing import NDArray

from . import tables
from .layouts.carriers import model_slots, shows_carriers
from .state import State, check_int, check_state, tile_words


@dataclass(frozen=True)
class TileView:
    """One Local tile as numpy data (docs/architecture.md, "Public API").

    words/defined hold one 64-bit Word per element slot of the storage region
    (rows x columns slots) in the model's slot order: CUBE payload order for
    CUBE layouts, the layout's own index for ordinary ones (RowMajor
    r*columns + c, ColumnMajor, ZN, NZ: layouts.ordinary). `words` are the
    model's slot contents: a 4-bit ordinary tile's are its packed carriers
    (16 elements a Word, zero after the last: layouts.carriers), while
    `defined[e]` is logical element e's bit, as the model prints them;
    `element` reads through either.
    """
    index: int
    allocated: bool
    layout: str
    dtype: str
    rows: int
    columns: int
    valid_rows: int
    valid_columns: int
    capacity_bytes: int
    location: str
    pe_mask: int
    k_repeat: int
    n_repeat: int
    cell_count: int
    storage_bytes: int
    defined_valid_elements: int
    words: NDArray[np.uint64]
    defined: NDArray[np.bool_]

    @property
    def name(self) -> str:
        return tables.tile_name(self.index)

    @property
    def contents_defined(self) -> bool:
        return self.allocated and self.defined_valid_elements == self.valid_rows * self.valid_columns

    @property
    def element_bits(self) -> int:
        return tables.dtype(self.dtype).bits

    def slot(self, row: int, col: int) -> int:
        """Payload slot of logical (row, col) of this tile."""
        if self.layout in tables.CUBE_LAYOUTS:
            from .layouts.geometry import payload_index_of, CELL_SHAPES
            # a CUBE tile's type has a cube class (None would fail the lookup, KeyError)
            cr, cc = CELL_SHAPES[(self.layout, cast(str, tables.dtype(self.dtype).cube_class))]
            return int(payload_index_of(self.layout, cr, cc, self.element_bits == 4,
                                        self.k_repeat, row, col))
        from .layouts.ordinary import payload_index
        return int(payload_index(self.layout, self.dtype, self.rows, self.columns, row, col))

    @property
    def elements_per_word(self) -> int:
        """Logical elements a Word of `words` holds: 64 / bits for a tile shown
        in packed carriers (layouts.carriers.shows_carriers), else 1."""
        shown = shows_carriers(self.layout, self.dtype, self.rows, self.columns)
        return 64 // self.element_bits if self.allocated and shown else 1

    def element(self, row: int, col: int) -> int:
        """Raw low element bits at logical (row, col)."""
        e, k = self.slot(row, col), self.elements_per_word
        return (int(self.words[e // k]) >> (self.element_bits * (e % k))) & ((1 << self.element_bits) - 1)

    def to_nd(self) -> NDArray[np.uint64]:
        """The valid region as a [valid_rows, valid_columns] uint64 matrix of raw element bits."""
        out = np.zeros((self.valid_rows, self.valid_columns), np.uint64)
        for r in range(self.valid_rows):
            for c in range(self.valid_columns):
                out[r, c] = self.element(r, c)
        return out

    def summary(self) -> str:
        if not self.allocated:
            return f"{self.name} (tile {self.index}): free"
        s = (f"{self.name} (tile {self.index}): {self.layout} {self.dtype} "
             f"{self.rows}x{self.columns}, valid {self.valid_rows}x{self.valid_columns}, "
             f"{self.capacity_bytes} B, {self.location}, mask {tables.mask_str(self.pe_mask)}")
        if self.layout in tables.CUBE_LAYOUTS:
            s += (f", K_repeat {self.k_repeat} N_repeat {self.n_repeat}, "
                  f"{self.cell_count} cells ({self.storage_bytes} B)")
        s += f", defined {self.defined_valid_elements}/{self.valid_rows * self.valid_columns}"
        return s

    def render(self, max_rows: int = 16, max_cols: int = 16) -> str:
        """Text picture of the storage region: valid values, '·' pad, '?' undefined."""
        lines = [self.summary()]
        if not self.allocated:
            return "\n".join(lines)
        hexw = max(1, self.element_bits // 4)
        for r in range(min(self.rows, max_rows)):
            cells = []
            for c in range(min(self.columns, max_cols)):
                i = self.slot(r, c)
                if i >= len(self.words) or not self.defined[i]:
                    cells.append("?" * hexw)
                elif r < self.valid_rows and c < self.valid_columns:
                    cells.append(format(self.element(r, c), f"0{hexw}x"))
                else:
                    cells.append("·" * hexw)
            lines.append(" ".join(cells) + (" …" if self.columns > max_cols else ""))
        if self.rows > max_rows:
            lines.append("…")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.render()


def read_tile(s: State, index: int, pe: int = 0) -> TileView:
    """The Local tile at TileIndex `index` (0..63) of PE `pe`'s register file."""
    check_state(s)
    index = check_int("index", index, 0, tables.LOCAL_TILES - 1)
    pe = check_int("pe", pe, 0, tables.NUM_PES - 1)
    hand_slots = s.tiles.allocated.shape[-1] // 4
    hand, k = divmod(index, tables.HAND_SLOTS)
    if k >= hand_slots:   # past the configured bound: never allocated
        return TileView(index, False, "RowMajor", "U64", 0, 0, 0, 0, 0, "Any", 0, 0, 0, 0, 0, 0,
                        np.zeros(0, np.uint64), np.zeros(0, bool))
    t = s.tiles
    i = hand * hand_slots + k
    g = {f: int(np.asarray(getattr(t, f)[pe, i])) for f in (
        "dtype", "layout", "location", "capacity", "rows", "cols", "valid_rows", "valid_cols",
        "k_repeat", "n_repeat", "cell_count", "storage_bytes", "mask", "defined_valid")}
    alloc = bool(np.asarray(t.allocated[pe, i]))
    window = tile_words(t, pe, i)
    n = min(g["rows"] * g["cols"], window[0].shape[0]) if alloc else 0
    return TileView(
        index=index, allocated=alloc, layout=tables.TILE_LAYOUTS[g["layout"]],
        dtype=tables.DTYPE_BY_CODE[g["dtype"]].name, rows=g["rows"], columns=g["cols"],
        valid_rows=g["valid_rows"], valid_columns=g["valid_cols"],
        capacity_bytes=g["capacity"], location=tables.TILE_LOCATIONS[g["location"]],
        pe_mask=g["mask"], k_repeat=g["k_repeat"], n_repeat=g["n_repeat"],
        cell_count=g["cell_count"], storage_bytes=g["storage_bytes"],
        defined_valid_elements=g["defined_valid"],
        words=model_slots(window[0][:n], tables.TILE_LAYOUTS[g["layout"]], g["dtype"], g["rows"], g["cols"]),
        defined=window[1][:n].astype(bool))


@dataclass(frozen=True)
class SharedTileView(TileView):
    """One Shared register (S0..S255) as numpy data; `index` is its SharedTileID.

    words/defined cover the rows x columns elements in the register's layout
    order (RowMajor r*columns + c, or the ColumnMajor/ZN/NZ a relayout TLOAD
    gave it); a 4-bit record's words are its packed carriers, as a Local
    tile's (the model's record is a copy of the Local TileInfo). `defined` is
    each element's stored definedness bit (TileLogicalElementDefined, as the
    model prints it): what the moves into the record left there
    (docs/shared-decisions.md sections 1 and 3, docs/tmov.md section 3), apart
    from whether a read of it gives the stored Word (an uninitialized quarter
    reads `sid XOR e`); `defined_valid_elements` counts the defined elements of
    the valid rectangle.
    """
    allocation_mask: int = 0
    initialized_mask: int = 0
    published: bool = False
    record_defined: bool = False

    @property
    def name(self) -> str:
        return f"S{self.index}"

    @property
    def contents_defined(self) -> bool:
        return self.allocated and self.record_defined

    def summary(self) -> str:
        if not self.allocated:
            return f"{self.name}: unallocated"
        return (f"{self.name}: {self.layout} {self.dtype} {self.rows}x{self.columns}, valid "
                f"{self.valid_rows}x{self.valid_columns}, {self.capacity_bytes} B per PE, allocated "
                f"{tables.mask_str(self.allocation_mask)}, initialized "
                f"{tables.mask_str(self.initialized_mask)}, "
                f"{'published' if self.published else 'unpublished'}")


def _valid_slots(layout: str, g: Mapping[str, int], n: int) -> NDArray[np.bool_]:
    """bool[n]: which of a record's first n element slots hold its valid rectangle."""
    from .layouts.ordinary import indexable, payload_index
    rows, cols, dt = g["rows"], g["cols"], tables.DTYPE_BY_CODE[g["dtype"]].name
    out = np.zeros(n, bool)
    if rows < 1 or cols < 1 or layout not in ("RowMajor", "ColumnMajor", "ZN", "NZ") \
            or not indexable(layout, dt, rows, cols):
        return out
    r, c = np.meshgrid(np.arange(min(g["valid_rows"], rows)), np.arange(min(g["valid_cols"], cols)),
                       indexing="ij")
    e = np.asarray(payload_index(layout, dt, rows, cols, r, c)).ravel()
    out[e[e < n]] = True
    return out


def read_shared(s: State, shared_id: int) -> SharedTileView:
    """The Shared register S<shared_id> (0..255) of the Core as a SharedTileView."""
    check_state(s)
    sid = check_int("shared_id", shared_id, 0, tables.SHARED_TILES - 1)
    sh = s.shared
    hit = np.flatnonzero(np.asarray(sh.sid) == sid)
    if hit.size == 0:
        return SharedTileView(sid, False, "RowMajor", "U64", 0, 0, 0, 0, 0, "Any", 0, 0, 0, 0, 0, 0,
                              np.zeros(0, np.uint64), np.zeros(0, bool))
    i = int(hit[0])
    g = {f: int(np.asarray(getattr(sh, f)[i])) for f in (
        "allocation_mask", "initialized_mask", "dtype", "layout", "capacity", "rows", "cols",
        "valid_rows", "valid_cols")}
    n = min(g["rows"] * g["cols"], sh.words.shape[-1])
    defined = np.asarray(sh.defined[i, :n]).astype(bool)
    valid = _valid_slots(tables.TILE_LAYOUTS[g["layout"]], g, n)
    return SharedTileView(
        index=sid, allocated=True, layout=tables.TILE_LAYOUTS[g["layout"]],
        dtype=tables.DTYPE_BY_CODE[g["dtype"]].name, rows=g["rows"], columns=g["cols"],
        valid_rows=g["valid_rows"], valid_columns=g["valid_cols"], capacity_bytes=g["capacity"],
        location="Any", pe_mask=g["allocation_mask"], k_repeat=0, n_repeat=0, cell_count=0,
        storage_bytes=0, defined_valid_elements=int(np.sum(defined & valid)),
        words=model_slots(np.asarray(sh.words[i, :n]), tables.TILE_LAYOUTS[g["layout"]], g["dtype"],
                          g["rows"], g["cols"]), defined=defined,
        allocation_mask=g["allocation_mask"], initialized_mask=g["initialized_mask"],
        published=bool(np.asarray(sh.published[i])),
        record_defined=bool(np.asarray(sh.contents_defined[i])))
