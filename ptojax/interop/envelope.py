"""What both directions of the `pto.asl-model.arch-state.v1` interop share
(docs/interop.md): the envelope's identity, ptojax's extension keys and the
leaves it keeps there, the schema, and a tile's slot strides.
arch_state.py writes envelopes (to_arch_state), arch_state_read.py reads them
(from_arch_state).
"""

from __future__ import annotations

import json
import re
from importlib import resources

from .. import tables

SCHEMA_ID = "pto.asl-model.arch-state.v1"
KINDS = ("initial_state", "state_snapshot")
EXT = "ptojax"                 # key of ptojax's entries in every "extensions" object
EXT_FORMAT = 2                 # version of what ptojax puts under that key
# format 1 (before the per-PE Local files and Shared records): still read; its one
# Local file is PE pe_id's, the other PEs' files and the Shared records are reset.
EXT_FORMATS = (1, 2)
GM_REGION_NAME = "GM"
TILE_CAPACITY_REGISTER = "TILE_CAPACITY"

I32 = (-(1 << 31), (1 << 31) - 1)
SHARED_NAME = re.compile(r"^S(0|[1-9][0-9]{0,2})$")
CELL_ADDRESS = re.compile(r"^0x(?:0|[1-9a-f][0-9a-f]*)$")

# Tiles leaves besides the payload: (leaf, name in descriptor.extensions.ptojax)
DESC_EXT = (("location", "location"), ("capacity", "capacity_bytes"),
             ("mask", "allocation_mask"), ("k_repeat", "cube_k_repeat"),
             ("n_repeat", "cube_n_repeat"), ("cell_count", "cube_cell_count"),
             ("storage_bytes", "cube_storage_bytes"))
TILE_SCALARS = ("allocated", "dtype", "layout", "location", "capacity", "rows", "cols",
                 "valid_rows", "valid_cols", "k_repeat", "n_repeat", "cell_count",
                 "storage_bytes", "mask", "defined_valid", "base")
# an allocated tile's place in its PE's payload pool (state.py): optional, as
# an envelope the model wrote has none (its tiles are then placed in slot order)
POOL_BASE = "pool_base"
FREE_DEFAULTS = {"allocated": False, "dtype": tables.DTYPE_BY_NAME["U64"].code,
                  "layout": tables.TILE_LAYOUT_CODE["RowMajor"],
                  "location": tables.TILE_LOCATION_CODE["Any"]}

# SharedTiles leaves besides the payload, and a free record's canonical values
SHARED_SCALARS = ("sid", "allocation_mask", "initialized_mask", "published", "contents_defined",
                   "dtype", "layout", "capacity", "rows", "cols", "valid_rows", "valid_cols")
SHARED_BOOLS = ("published", "contents_defined")
SHARED_FREE = {"sid": -1, "published": False, "contents_defined": False,
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


def slot_strides(layout: str, rows: int, cols: int) -> list:
    """Element strides in payload slots: affine layouts only, [] for CELL/fractal order."""
    if layout == "RowMajor":
        return [cols, 1]
    if layout == "ColumnMajor":
        return [1, rows]
    return []
