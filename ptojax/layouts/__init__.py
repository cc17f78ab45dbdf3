"""Tile layouts: CUBE CELL layouts (ADR 0069) and the ordinary ND/DN/ZN/NZ
ones: geometry, payload index maps, batched conversions."""

from .geometry import (CELL_SHAPES, CubeGeometry, cell_shape, cube_dtype,
                       descriptor_legal, geometry, m16_b4_position, payload_index)
from .kernels import cube_to_nd, nd_to_cube, storage_words
from .ordinary import (ORDINARY_LAYOUTS, fractal_width, nd_to_ordinary, ordinary_layout,
                       ordinary_to_nd)
from .ordinary import indexable as ordinary_indexable
from .ordinary import payload_index as ordinary_index

__all__ = ["CELL_SHAPES", "CubeGeometry", "cell_shape", "cube_dtype", "descriptor_legal",
           "geometry", "m16_b4_position", "payload_index", "nd_to_cube", "cube_to_nd",
           "storage_words", "ORDINARY_LAYOUTS", "fractal_width", "nd_to_ordinary",
           "ordinary_to_nd", "ordinary_layout", "ordinary_indexable", "ordinary_index"]
