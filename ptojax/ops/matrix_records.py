"""The matrix family's decoded block: the records matrix.py builds from the
header and the operands, and matrix_product.py reads for the product (both
import them from here, so neither imports the other's records).
"""

from __future__ import annotations

from typing import NamedTuple

import jax


class Block(NamedTuple):
    """The block's form, element types and Shared groups, decoded from its header."""
    is_acc: jax.Array
    is_bias: jax.Array
    is_gemv: jax.Array
    M: jax.Array
    N: jax.Array
    K: jax.Array
    a_type: jax.Array
    b_type: jax.Array
    acc_type: jax.Array
    types_legal: jax.Array
    sa_on: jax.Array                # A / B carry MX scales
    sb_on: jax.Array
    n_shared: jax.Array
    shared_on: jax.Array            # B (and maybe A) from Shared records
    left_shared: jax.Array          # A from a Shared record too
    a_local: jax.Array
    b_local: jax.Array
    coop: jax.Array                 # ADR 0100's group-M split over the Core
    G: jax.Array
    m_per_pe: jax.Array
    Mi: jax.Array                   # this PE's rows
    row0: jax.Array                 # its first Shared-A row
    active: jax.Array


class Local(NamedTuple):
    """The Local operands (step 7) that the checks and the element map read."""
    a_slot: jax.Array
    sa_slot: jax.Array
    b_slot: jax.Array
    sb_slot: jax.Array
    c_slot: jax.Array
    bias_slot: jax.Array
    a_lay: jax.Array
    a_cr: jax.Array
    a_cc: jax.Array
    b_cr: jax.Array
    b_k_repeat: jax.Array
    sa_cols: jax.Array
    sb_cols: jax.Array
    d_lay: jax.Array                # D's M layout
    kb: jax.Array                   # MX scale blocks along K
    sources_legal: jax.Array


class Shared(NamedTuple):
    """The Shared operands (check 7s): record indices and stored row lengths."""
    a: jax.Array
    sa: jax.Array
    b: jax.Array
    sb: jax.Array
    a_cols: jax.Array
    sa_cols: jax.Array
    b_cols: jax.Array
    sb_cols: jax.Array
    trans_a: jax.Array              # A / B stored transposed
    trans_b: jax.Array
    sources_legal: jax.Array


class DGeometry(NamedTuple):
    """D's CUBE M geometry: its layout (0 CUBE_M16, 1 CUBE_M32), CELL rows and
    columns, descriptor geometry (common.cube_geometry), and whether its
    4-bit CELLs are swizzled (an S4X2 D in CUBE_M16)."""
    lay: jax.Array
    cr: jax.Array
    cc: jax.Array
    g: dict[str, jax.Array]
    b4: jax.Array
