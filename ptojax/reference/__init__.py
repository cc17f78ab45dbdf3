"""Independent scalar reference model ("oracle") of ptojax.

Plain Python (ints, lists, bytearray), written from the spec digests and
docs/execution-model.md, independently of the JAX implementation:

- `run(state, words, pe=0, *, on_fault="abandon", cfg=None) -> RunResult`:
  PE `pe`'s view (its GPRs and Local file; the Core's Shared registers).
- `run_core(state, words, *, on_fault="abandon", cfg=None) -> RunResult`: the
  four PEs execute the stream together (docs/shared-decisions.md section 2).
- `run_leaves(state, words, pe=0, *, on_fault, cfg, core=False) -> (leaves,
  executed)`: either, with the final State as numpy leaves (no JAX arrays):
  what a campaign compares.
- `layouts`: CUBE CELL geometry and ND <-> CUBE conversions (cell_shape,
  geometry, legal, payload_index, nd_to_cube, cube_to_nd).
- `cas_check`: does some legal serialization of the MGATHER.CAS lanes explain
  an observed State (explains, run_in_order)?
"""

from . import cas_check, layouts
from .layouts import cell_shape, cube_to_nd, geometry, legal, nd_to_cube, payload_index
from .run import run, run_core, run_leaves

__all__ = ["run", "run_core", "run_leaves", "layouts", "cas_check", "cell_shape", "geometry", "legal", "payload_index",
           "nd_to_cube", "cube_to_nd"]
