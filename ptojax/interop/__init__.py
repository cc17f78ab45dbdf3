"""Interop with the reference runner's state format (docs/interop.md).

`to_arch_state(state, cfg=None)` / `from_arch_state(d, cfg=None)` convert a
ptojax State to and from the `pto.asl-model.arch-state.v1` envelope of the
public PTO-ISA/asl-model runner, losslessly; `schema()` is that envelope's
JSON Schema and `validate(d)` checks a dict against it (needs `jsonschema`).
"""

from .arch_state import to_arch_state
from .arch_state_read import from_arch_state
from .envelope import EXT, KINDS, SCHEMA_ID, schema, validate

__all__ = ["SCHEMA_ID", "KINDS", "EXT", "to_arch_state", "from_arch_state", "schema", "validate"]
