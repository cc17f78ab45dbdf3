"""ptojax: an executable, batched, bit-exact model of the PTO tile ISA's CUBE slice."""

from . import tables
from .state import MachineConfig, PRESETS, State, preset, read_gpr, read_memory, reset, write_gpr, write_memory
from .tileview import SharedTileView, TileView, read_shared, read_tile
from .result import RunResult
from .machine import run, run_core
from . import layouts
from .isa import asm
from . import batch
from . import reference
from . import interop
from . import ops
from . import golden
from .version import __version__  # noqa: F401  (pj.__version__)

__all__ = ["MachineConfig", "PRESETS", "State", "preset", "reset", "write_memory", "read_memory",
           "write_gpr", "read_gpr", "read_tile", "TileView", "read_shared", "SharedTileView", "RunResult", "run",
           "run_core", "layouts",
           "asm", "batch", "reference", "interop", "tables", "ops", "golden"]
