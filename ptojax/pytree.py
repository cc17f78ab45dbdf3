"""`pytree_dataclass`: chex's dataclass (a jax pytree), spelled so that type
checkers see the dataclass it is.

chex.dataclass builds an ordinary dataclass and registers it with jax; mypy
does not know that and reports every keyword construction as unknown.
`typing.dataclass_transform` tells it, without changing what runs.
`PytreeDataclass`, a base of such classes for type checkers only (at run time
it is `object`, the base they had), tells it what chex adds: `replace` and the
read-only Mapping of field name to value (`t["words"]`, `t.items()`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast, dataclass_transform

import chex

if TYPE_CHECKING:
    class PytreeDataclass(Mapping[str, Any]):     # values: the fields', arrays or nested pytrees
        """What chex.dataclass adds to a class (mappable_dataclass)."""
        def replace(self, **changes: Any) -> Self: ...
        def __getitem__(self, key: str, /) -> Any: ...
        def __iter__(self) -> Iterator[str]: ...
        def __len__(self) -> int: ...
else:
    PytreeDataclass = object

T = TypeVar("T")


@dataclass_transform(kw_only_default=True)
def pytree_dataclass(cls: type[T]) -> type[T]:
    """chex.dataclass(cls): a mutable-by-replace dataclass that jax maps over
    (constructed by keyword only, as chex's mappable dataclasses are)."""
    return cast("type[T]", chex.dataclass(cls))
