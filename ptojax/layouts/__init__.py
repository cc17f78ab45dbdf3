"""CUBE CELL layouts (ADR 0069): geometry, payload index maps, conversions."""

from .geometry import (CELL_SHAPES, CubeGeometry, cell_shape, cube_dtype,
                       descriptor_legal, geometry, m16_b4_position, payload_index)
from .kernels import cube_to_nd, nd_to_cube, storage_words

__all__ = ["CELL_SHAPES", "CubeGeometry", "cell_shape", "cube_dtype", "descriptor_legal",
           "geometry", "m16_b4_position", "payload_index", "nd_to_cube", "cube_to_nd",
           "storage_words"]
