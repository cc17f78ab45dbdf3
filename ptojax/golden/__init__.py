"""Golden results computed by running the real bundles (`pj.golden`).

- `matmul` (bundle.py): one matrix bundle (TMATMUL*/TGEMV*, at most one tile
  of rows);
- `gemm` (tiling.py): a product of any size, split into the tiles and K
  chunks a compiler would emit, all tiles of a chunk run at once
  (pj.batch.run); with core=True as ADR 0100's cooperative TMATMULs on the
  Core's four PEs (cooperative.py: the sequence of one row group).

`pj.ops.matmul` is the first name of `matmul`, kept for its callers.
"""

from .bundle import MatmulFault, MatmulResult, matmul
from .tiling import gemm

__all__ = ["matmul", "gemm", "MatmulFault", "MatmulResult"]
