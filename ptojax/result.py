"""The result of running a word stream: same type for pj.run and pj.reference.run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from . import tables
from .state import State


@dataclass(frozen=True)
class RunResult:
    """State after the stream, and the fault that stopped it (if any).

    fault: the spec name, "Fault_None" when every word executed.
    fault_address: the data address of a memory fault, else None (the faulting
    word's PC is in `state.fault_address` for every fault, as in the model).
    executed: words executed before the stream stopped (the faulting word is
    not counted).
    """
    state: State
    fault: str
    fault_address: Optional[int]
    executed: int

    @property
    def ok(self) -> bool:
        return self.fault == "Fault_None"

    @property
    def numeric_flags(self) -> list[str]:
        """The sticky numeric status flags the State holds (CORE_STATE[36:32]),
        by name in NV, DZ, OF, UF, NX order; raw bits in state.numeric_flags."""
        import numpy as np
        return tables.flag_names(int(np.asarray(self.state.numeric_flags)))

    @classmethod
    def from_state(cls, state: State, executed: int) -> "RunResult":
        import numpy as np
        name = tables.FAULTS[int(np.asarray(state.fault))]
        addr = int(np.asarray(state.fault_address))
        return cls(state, name, addr if name in tables.MEMORY_FAULTS else None, int(executed))
