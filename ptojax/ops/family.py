"""The executor's side of a family (ptojax/families.py): what each family
module exports as `FAMILY`, and what its completion returns.

dispatch.py composes the families from these records alone: the default
family (transport) runs on every block the routed ones do not select, each
routed family runs on the blocks its `selects` takes, traced only when the
program's effects name its group, and each family's effects are gated by its
own enable, so exactly one applies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple, Optional

import jax

from .. import families
from ..state import State
from .header import Header


class RowWrite(NamedTuple):
    """A Shared write of one record's Words and their definedness (row `index`
    of SharedTiles.words / .defined, when `do`), applied after the completion
    (shared_transport.apply_row_write): the completion's conditionals then
    carry one row, not the whole file."""
    # the field shadows tuple.index, a method in typeshed's tuple: mypy calls that an override
    index: jax.Array  # type: ignore[assignment]
    do: jax.Array
    words: jax.Array            # uint64[shared_words]
    defined: jax.Array          # bool[shared_words]


class Context(NamedTuple):
    """What a completion needs beside the State view, its header and its PE."""
    effects: frozenset[str]     # static: the effect groups the program can have
    cas_seed: jax.Array | int   # traced: the "permuted" MGATHER.CAS lane order's seed (0: none given)


class Completion(NamedTuple):
    """A family's verdict and the view its effects were applied to (only where
    `enable` held and no check failed); `write`: a Shared row write still to
    apply (RowWrite), None for the families without one."""
    fault: jax.Array            # int32 tables.FAULTS index, 0 = none
    address: jax.Array          # uint64 _FaultAddress of a memory fault, else 0
    state: State                # the State view (its tiles a storage.PeFile)
    write: Optional[RowWrite] = None


@dataclass(frozen=True)
class Family:
    """One family as the executor runs it.

    complete(view, h, pe, cfg, enable, ctx) -> Completion;
    selects(h) -> bool: the blocks it completes of those routed past the
      zero-mask no-op and the CUBE-transport selection (None: the default);
    idle(view) -> the write it returns where it does not run (None: no write).
    """
    spec: families.Family
    complete: Callable[..., Completion]
    selects: Optional[Callable[[Header], jax.Array]] = None
    idle: Optional[Callable[[State], RowWrite]] = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def effect(self) -> Optional[str]:
        return self.spec.effect
