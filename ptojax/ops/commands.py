"""The header commands (encoding.md 4.3-4.9) of the executor: one function per
command giving the fault it raises when it issues (the twins of
the oracle's reference/commands.py, by name and by step id), and what a word
does to the packed block header (`header_step`, `apply_header`).

Every function here sees one word, decoded (`d`, isa.decode_array), and the
open block (`blk`, state.Block); it runs under `lax.scan` in machine.py, so
each check is a boolean and no command branches.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from numpy.typing import NDArray

from .. import tables
from ..indexing import row
from ..isa.decode_array import K
from .common import F, U64, gpr_value, ordered_fault, take
from ..state import BLOCK_FIELDS, MAX_IOS, MAX_IOT, Block, empty_block
from ..storage import pack_block, packed_width, unpack_block

# a decoded word (isa.decode_array.decode): int32/bool scalars by field name, and
# "fp" a dict of the B.FPATR fields, so its values are of two kinds
_Word = Mapping[str, Any]
# what the commands latch that their checks derive (command_faults), and a
# word's update of the packed block: (written, take, reset) (_latch)
_Latched = tuple[jax.Array, jax.Array, jax.Array]
_Update = tuple[jax.Array, jax.Array, jax.Array]

_PEMODE_MASK = np.array(tables.PEMODE_MASK, np.int32)
_CUBE_OP = np.array([engine == "CUBE" for _, engine, _ in tables.OPS])
_L2S = np.array([name in ("TMOV.L2S.INSERT", "TMOV.L2S.PUBLISH") for name, _, _ in tables.OPS])


def b_datr(blk: Block, d: _Word) -> jax.Array:
    """B.DATR: once per header."""
    return ordered_fault(("HDR.3 datr_once", ~blk.active | blk.datr_present, "Fault_BundleControl"))


def dim_target(d: _Word) -> jax.Array:
    """The LB row a B.DIM writes (LB0..LB2)."""
    return jnp.clip(d["dim_target"], 0, 2)


def b_dim(blk: Block, d: _Word) -> jax.Array:
    """B.DIM: each LBn once per header."""
    return ordered_fault(("HDR.4 dim_once", ~blk.active | row(blk.lb_present, dim_target(d)),
                          "Fault_BundleControl"))


def b_ior(blk: Block, d: _Word) -> jax.Array:
    """B.IOR: once per header."""
    return ordered_fault(("HDR.5 ior_once", ~blk.active | blk.ior_present, "Fault_BundleControl"))


def b_iot(blk: Block, d: _Word) -> jax.Array:
    """B.IOT: PEMode 000 a no-op; else an open binding list, the mask of the
    earlier B.IOTs only (4.6; a B.IOS recorded first is the family's check), room."""
    iot_mask = take(_PEMODE_MASK, d["pemode"])
    mismatch = (blk.iot_count > 0) & (iot_mask != blk.iot[0, 3])
    return jnp.where(d["pemode"] == 0, 0, ordered_fault(
        ("HDR.6 iot_open", ~blk.active | blk.iot_closed, "Fault_BundleControl"),
        ("HDR.6 iot_mask", mismatch, "Fault_TileLegality"),
        # a TMOV L2S block's B.IOT names no destination (BindBundleTileIO)
        ("HDR.6 iot_l2s_destination", take(_L2S, blk.op) & d["iot_dst"], "Fault_TileLegality"),
        ("HDR.6 iot_count", blk.iot_count >= MAX_IOT, "Fault_TileLegality")))


def b_ios(blk: Block, d: _Word) -> jax.Array:
    """B.IOS: PEMode 000 a no-op; else the mask of every earlier B.IOT and B.IOS
    (4.7), a SharedTID not yet bound, room."""
    ios_mask = take(_PEMODE_MASK, d["ios_pemode"])
    mismatch = ((blk.iot_count > 0) & (ios_mask != blk.iot[0, 3])) \
        | ((blk.ios_count > 0) & (ios_mask != blk.ios[0, 2]))
    used = jnp.arange(MAX_IOS) < blk.ios_count
    dup_sid = jnp.any(used & (blk.ios[:, 0] == d["ios_sid"]))
    return jnp.where(d["ios_pemode"] == 0, 0, ordered_fault(
        ("HDR.7 ios_open", ~blk.active, "Fault_BundleControl"),
        ("HDR.7 ios_mask", mismatch, "Fault_TileLegality"),
        ("HDR.7 ios_sid_count", dup_sid | (blk.ios_count >= MAX_IOS), "Fault_BundleControl")))


def fpatr_fields_legal(d: _Word) -> jax.Array:
    """B.FPATR field combinations: RowMaxInit needs RowMaxEn; GroupMaxEn iff
    GroupNCode != 0; MaxAbsEn needs RowMaxEn or GroupMaxEn."""
    fp: Mapping[str, jax.Array] = d["fp"]
    return ~(((fp["RowMaxInit"] == 1) & (fp["RowMaxEn"] == 0))
             | ((fp["GroupMaxEn"] == 1) != (fp["GroupNCode"] != 0))
             | ((fp["MaxAbsEn"] == 1) & (fp["RowMaxEn"] == 0) & (fp["GroupMaxEn"] == 0)))


def b_fpatr(blk: Block, d: _Word) -> jax.Array:
    """B.FPATR: once, only in a matrix header, before any B.IOR/B.IOT/B.IOS."""
    return ordered_fault(
        ("HDR.8 fpatr_place", ~blk.active | blk.fpatr_present | ~take(_CUBE_OP, blk.op)
         | blk.ior_present | (blk.iot_count > 0) | (blk.ios_count > 0), "Fault_BundleControl"),
        ("HDR.8 fpatr_fields", ~fpatr_fields_legal(d), "Fault_TileLegality"))


def b_catr(blk: Block, d: _Word) -> jax.Array:
    """B.CATR: once per header."""
    return ordered_fault(("HDR.9 catr_once", ~blk.active | blk.catr_present, "Fault_BundleControl"))


def command_faults(blk: Block, d: _Word) -> tuple[tuple[jax.Array, ...], _Latched]:
    """Every command's fault for this word, in the fault select's order (B.DATR,
    B.DIM, B.IOR, B.CATR, B.FPATR, B.IOT, B.IOS), and what the commands latch
    that their checks derive: (B.DIM's target row, the B.IOT and B.IOS PE masks)."""
    faults = tuple(f(blk, d) for f in (b_datr, b_dim, b_ior, b_catr, b_fpatr, b_iot, b_ios))
    return faults, (dim_target(d), take(_PEMODE_MASK, d["pemode"]),
                    take(_PEMODE_MASK, d["ios_pemode"]))


def _latch(blk: Block, d: _Word, word: jax.Array, gpr_row: jax.Array, pc: jax.Array, t: jax.Array,
           iot_mask: jax.Array, ios_mask: jax.Array) -> _Update:
    """What the word does to the packed block: (the value each entry would take,
    which entries take it, which return to their reset value). Header commands
    write their own fields, BSTART writes the fields it opens and resets the
    rest, BSTOP resets every field."""
    active = blk.active
    kind = d["kind"]
    is_: Callable[[str], jax.Array] = lambda name: kind == K[name]
    # each command updates only its own fields: `written` holds the value every
    # field would take from this word, `latch` marks the ones this word's kind
    # (and row) writes
    word32 = jnp.asarray(word, jnp.uint32)
    dim_val = ((gpr_value(gpr_row, d["dim_reg"]) + d["dim_imm"].astype(U64)) & U64(0xFFFF)).astype(jnp.int32)
    iot_row = jnp.stack([d["iot_dst"].astype(jnp.int32), jnp.where(d["iot_dst"], d["dst_hand"], 0),
                         jnp.where(d["iot_dst"], d["size_code"], 0), iot_mask,
                         d["iot_src0"].astype(jnp.int32), d["iot_src1"].astype(jnp.int32),
                         jnp.where(d["iot_src0"], d["src0"], 0), jnp.where(d["iot_src1"], d["src1"], 0)])
    # the binding and dimension rows are written once here, and _WRITTEN_FROM spreads
    # them over every row position (no broadcast table is materialized)
    true = jnp.bool_(True)
    written = pack_block(Block(
        active=true, pc=pc, op=d["op"], dtype=d["dtype"], datr_present=true, datr=d["datr"],
        lb=dim_val[None], lb_present=jnp.ones(1, bool), ior_present=true,
        ior=d["ior"], iot_count=blk.iot_count + 1, iot_closed=blk.iot_closed | (d["last"] == 1),
        iot=iot_row[None], ios_count=blk.ios_count + 1,
        ios=jnp.stack([d["ios_sid"], d["ios_size"], ios_mask])[None],
        zero_seen=true, fpatr_present=true, fpatr=word32, catr_present=true,
        catr=word32))[_WRITTEN_FROM]
    at_row = jnp.where(_LATCH_GROUP == _G_LB, t,
                       jnp.where(_LATCH_GROUP == _G_IOT, blk.iot_count, blk.ios_count))
    recorded = jnp.where(kind == K["B.IOT"], d["pemode"] != 0, d["ios_pemode"] != 0)
    zero_bind = ((kind == K["B.IOT"]) & (d["pemode"] == 0)) \
        | ((kind == K["B.IOS"]) & (d["ios_pemode"] == 0))
    latch = ((_LATCH_KIND == kind) & ((_LATCH_ROW < 0) | (_LATCH_ROW == at_row))
             & (~_LATCH_RECORDS | recorded)) | (_LATCH_ZERO & zero_bind & active)
    # BSTOP closes the block, BSTART opens a fresh one
    opens = _OPENED & is_("BSTART")
    return written, latch | opens, (is_("BSTOP") | is_("BSTART")) & ~opens


def header_step(packed: jax.Array, word: jax.Array, d: _Word, gpr_row: jax.Array,
                pc: jax.Array) -> tuple[jax.Array, jax.Array, _Update]:
    """What one word (decoded: `d`) does to the block header (packed: storage.pack_block).

    Returns (fault of the word, completes, and the word's update of the block:
    `_latch`'s (written, take, reset), which `apply_header` applies). A completing
    word (BSTOP, or BSTART with a block open) is assumed to commit; phase 2
    decides its real fault. GPRs are only read here (no op in the slice writes
    them), so header processing never depends on a commit's effects.
    """
    blk = unpack_block(packed)
    active = blk.active
    kind = d["kind"]
    is_: Callable[[str], jax.Array] = lambda name: kind == K[name]
    illegal = is_("NONE") | d["illegal"]

    # ---- header commands (encoding.md 4.x): their own faults
    (f_datr, f_dim, f_ior, f_catr, f_fpatr, f_iot, f_ios), latched = command_faults(blk, d)

    completes = (is_("BSTOP") | is_("BSTART")) & active & ~illegal
    # an odd continuation/fall-through PC (only reachable from a hand-made State)
    odd_pc = (is_("BSTART") | (is_("BSTOP") & active)) & ((pc & U64(1)) == 1)
    fault = jnp.select(
        [illegal, odd_pc, is_("B.DATR"), is_("B.DIM"), is_("B.IOR"), is_("B.CATR"), is_("B.FPATR"),
         is_("B.IOT"), is_("B.IOS"), is_("BSTOP") & ~active],
        [F["Fault_IllegalInstruction"], F["Fault_InstructionPC"], f_datr, f_dim, f_ior, f_catr, f_fpatr,
         f_iot, f_ios, F["Fault_BundleControl"]], 0).astype(jnp.int32)

    # ---- header latching
    return fault, completes, _latch(blk, d, word, gpr_row, pc, *latched)


def apply_header(packed: jax.Array, update: _Update, applies: jax.Array) -> jax.Array:
    """The packed block after a word whose `update` (header_step) `applies`:
    one select per entry, so a scan step writes the block once."""
    written, take, reset = update
    return jnp.where(applies & take, written, jnp.where(applies & reset, empty_block_words(), packed))


def _latch_tables() -> tuple[NDArray[np.int32], NDArray[np.int32], NDArray[np.int32], NDArray[np.bool_],
                             NDArray[np.bool_], NDArray[np.bool_], NDArray[np.int32]]:
    """Per packed Block entry: the command kind that writes it, its row group and
    row (B.DIM target, B.IOT or B.IOS row; -1 none), whether it is written only
    by a recorded (nonzero PEMode) binding, whether it is zero_seen, whether a
    BSTART sets it, and where `_latch`'s one-row-per-group block holds its value."""
    writer = {"datr_present": "B.DATR", "datr": "B.DATR", "lb": "B.DIM", "lb_present": "B.DIM",
              "ior_present": "B.IOR", "ior": "B.IOR", "iot_count": "B.IOT", "iot_closed": "B.IOT",
              "iot": "B.IOT", "ios_count": "B.IOS", "ios": "B.IOS", "fpatr_present": "B.FPATR",
              "fpatr": "B.FPATR", "catr_present": "B.CATR", "catr": "B.CATR"}
    groups = {"lb": _G_LB, "lb_present": _G_LB, "iot": _G_IOT, "ios": _G_IOS}
    rows: list[int | np.integer[Any]]      # np.repeat's row numbers, or -1
    kind, group, rows, records, zero, opened = [], [], [], [], [], []
    written_from, at = [], 0    # position of each entry in the block packed with one row per group
    for name, shape, dtype in BLOCK_FIELDS:
        n = packed_width(name, shape, dtype)
        kind += [K[writer[name]] if name in writer else -1] * n
        group += [groups.get(name, 0)] * n
        rows += (list(np.repeat(np.arange(shape[0]), n // shape[0])) if name in groups else [-1] * n)
        records += [writer.get(name) in ("B.IOT", "B.IOS")] * n
        zero += [name == "zero_seen"] * n
        opened += [name in ("active", "pc", "op", "dtype")] * n
        width = n // shape[0] if name in groups else n
        written_from += [at + k % width for k in range(n)]
        at += width
    return (np.array(kind, np.int32), np.array(group, np.int32), np.array(rows, np.int32),
            np.array(records), np.array(zero), np.array(opened), np.array(written_from, np.int32))


_G_LB, _G_IOT, _G_IOS = 1, 2, 3
(_LATCH_KIND, _LATCH_GROUP, _LATCH_ROW, _LATCH_RECORDS, _LATCH_ZERO, _OPENED,
 _WRITTEN_FROM) = _latch_tables()


@functools.lru_cache(maxsize=1)
def empty_block_words() -> np.ndarray:
    """The packed Block with every entry at its reset value. Computed on first
    use, not at import: importing ptojax must not start a JAX backend, since
    jax.distributed.initialize (`ptojax fuzz --distributed`) has to come first."""
    with jax.ensure_compile_time_eval(), jax.enable_x64(True):
        return np.asarray(pack_block(empty_block()))
