"""The oracle's side of a family (ptojax/families.py): what each of its family
modules exports as `FAMILY`, and the Fault its completion returns.

run.py's tile_operation completes a block from these records alone: the
zero-mask no-op first, then, unless the block's B.DATR selects the CUBE
transport, the routed family whose `selects` takes it, else the default
family (transport).
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Callable
from typing import TYPE_CHECKING, Optional

from .. import families

if TYPE_CHECKING:
    from .state import Block, Machine


@dataclass(frozen=True)
class Fault:
    """A completion's fault: its tables.FAULTS name and, for a memory fault, the
    data address (transport.py's module docstring)."""
    name: str
    address: Optional[int] = None     # data address of a memory fault, else None (= word PC)


@dataclass(frozen=True)
class Family:
    """One family as the oracle runs it.

    complete(m, b, op, pe) -> Optional[Fault]: the block `b` of operation `op`
      (its tables.OPS entry) completed as PE `pe` on machine `m`;
    selects(b, op) -> bool: the blocks it completes (None: the default family).
    """
    spec: families.Family
    complete: Callable[[Machine, Block, tuple[str, str, int], int], Optional[Fault]]
    selects: Optional[Callable[[Block, tuple[str, str, int]], bool]] = None

    @property
    def name(self) -> str:
        return self.spec.name
