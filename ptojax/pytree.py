"""`pytree_dataclass`: chex's dataclass (a jax pytree), spelled so that type
checkers see the dataclass it is.

chex.dataclass builds an ordinary dataclass and registers it with jax; mypy
does not know that and reports every keyword construction as unknown.
`typing.dataclass_transform` tells it, without changing what runs.
"""

from __future__ import annotations

from typing import TypeVar, dataclass_transform

import chex

T = TypeVar("T")


@dataclass_transform()
def pytree_dataclass(cls: type[T]) -> type[T]:
    """chex.dataclass(cls): a mutable-by-replace dataclass that jax maps over."""
    return chex.dataclass(cls)  # type: ignore[no-any-return]
