"""Interop with the reference runner's state format (docs/interop.md).

`to_arch_state(state, cfg=None)` / `from_arch_state(d, cfg=None)` convert a
ptojax State to and from the `pto.asl-model.arch-state.v1` envelope of the
public PTO-ISA/asl-model runner, losslessly; `schema()` is that envelope's
JSON Schema and `validate(d)` checks a dict against it (needs `jsonschema`).
"""

from .arch_state import (EXT, KINDS, SCHEMA_ID, from_arch_state, schema, to_arch_state,
                         validate)

__all__ = ["SCHEMA_ID", "KINDS", "EXT", "to_arch_state", "from_arch_state", "schema", "validate"]
