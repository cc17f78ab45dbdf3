"""The header commands of the reference model (encoding.md 4.3-4.9): one
handler per command, called by run.execute when the word decodes as it. Each
returns the fault it raises when it issues (its checks carry the step ids of
the executor's twins in ops/commands.py) or None after latching its fields
into the open block."""

from __future__ import annotations

from typing import Optional

from .. import tables
from ..state import MAX_IOS, MAX_IOT
from . import transport
from .decode import Decoded
from .state import Binding, Machine
from .transport import BUNDLE_CONTROL, TILE_LEGALITY, Fault


def in_header(m: Machine) -> bool:
    return m.block.active


def b_datr(m: Machine, cmd: Decoded, word: int, address: int, pe: int) -> Optional[Fault]:
    """B.DATR: once per header; latch the raw fields."""
    b = m.block
    if not in_header(m) or b.datr_present:
        return BUNDLE_CONTROL                   # HDR.3 datr_once
    b.datr_present = True
    b.datr = [cmd["Layout"], cmd["DataType"], cmd["PadValueOrByteId"], cmd["CMode"],
              cmd["RMode"], cmd["Sat"], cmd["Canonicalize"]]
    return None


def b_dim(m: Machine, cmd: Decoded, word: int, address: int, pe: int) -> Optional[Fault]:
    """B.DIM: LBn = (GPR[RegSrc] + uimm17) mod 2^16, write-once per block."""
    b = m.block
    n = (word >> 12) & 7
    if not in_header(m) or b.lb_present[n]:
        return BUNDLE_CONTROL                   # HDR.4 dim_once
    b.lb[n] = (transport.gpr(m, pe, cmd["RegSrc"]) + cmd["uimm17"]) & 0xFFFF
    b.lb_present[n] = True
    return None


def b_ior(m: Machine, cmd: Decoded, word: int, address: int, pe: int) -> Optional[Fault]:
    """B.IOR: once per header; latch RegDst, RegSrc0..2 (read at completion)."""
    b = m.block
    if not in_header(m) or b.ior_present:
        return BUNDLE_CONTROL                   # HDR.5 ior_once
    b.ior_present = True
    b.ior = [cmd["RegDst"], cmd["RegSrc0"], cmd["RegSrc1"], cmd["RegSrc2"]]
    return None


def b_iot(m: Machine, cmd: Decoded, word: int, address: int, pe: int) -> Optional[Fault]:
    """B.IOT: PEMode 000 is a strict no-op; else append one ordered binding.

    The mask is compared with the earlier B.IOT bindings only (the model's
    BundleTileMaskCanAppend); B.IOS masks are checked when a B.IOS is issued.
    """
    b = m.block
    mask = tables.PEMODE_MASK[cmd["PEMode"]]
    if mask == 0:
        if in_header(m):
            b.zero_seen = True
        return None
    if not in_header(m) or b.iot_closed:
        return BUNDLE_CONTROL                   # HDR.6 iot_open
    if any(x.mask != mask for x in b.iots):
        return TILE_LEGALITY                    # HDR.6 iot_mask
    if cmd.has("DstTile") and 0 <= b.op < len(tables.OPS) and \
            tables.OPS[b.op][0] in ("TMOV.L2S.INSERT", "TMOV.L2S.PUBLISH"):
        return TILE_LEGALITY                    # HDR.6 iot_l2s_destination
    if len(b.iots) >= MAX_IOT:
        return TILE_LEGALITY                    # HDR.6 iot_count
    dst = cmd.has("DstTile")
    binding = Binding(dst_valid=dst, dst_hand=cmd["DstTile"] if dst else 0,
                      size_code=cmd["SizeCode"] if dst else 0, mask=mask,
                      src0_valid=cmd.has("SrcTile0"), src1_valid=cmd.has("SrcTile1"),
                      src0=cmd.values.get("SrcTile0", 0), src1=cmd.values.get("SrcTile1", 0),
                      last=bool(cmd["L"]))
    b.iots.append(binding)
    if binding.last:
        b.iot_closed = True
    return None


def b_ios(m: Machine, cmd: Decoded, word: int, address: int, pe: int) -> Optional[Fault]:
    """B.IOS: PEMode 000 no-op; mask equal to every B.IOT/B.IOS; distinct SharedTID; at most 4."""
    b = m.block
    mask = tables.PEMODE_MASK[cmd["PEMode"]]
    if mask == 0:
        if in_header(m):
            b.zero_seen = True
        return None
    if not in_header(m):
        return BUNDLE_CONTROL                   # HDR.7 ios_open
    if any(x.mask != mask for x in b.iots) or any(r[2] != mask for r in b.ios):
        return TILE_LEGALITY                    # HDR.7 ios_mask
    if any(r[0] == cmd["SharedTID"] for r in b.ios) or len(b.ios) >= MAX_IOS:
        return BUNDLE_CONTROL                   # HDR.7 ios_sid_count
    b.ios.append([cmd["SharedTID"], cmd["SizeCode"], mask])
    return None


def fpatr_fields_legal(cmd: Decoded) -> bool:
    """B.FPATR field combinations: RowMaxInit needs RowMaxEn; GroupMaxEn iff
    GroupNCode != 0; MaxAbsEn needs RowMaxEn or GroupMaxEn."""
    row_max, group_max = cmd["RowMaxEn"], cmd["GroupMaxEn"]
    if cmd["RowMaxInit"] and not row_max:
        return False
    if bool(group_max) != (cmd["GroupNCode"] != 0):
        return False
    return not (cmd["MaxAbsEn"] and not row_max and not group_max)


def b_fpatr(m: Machine, cmd: Decoded, word: int, address: int, pe: int) -> Optional[Fault]:
    """B.FPATR: once, only in a matrix header, before any B.IOR/B.IOT/B.IOS."""
    b = m.block
    op = tables.OPS[b.op] if 0 <= b.op < len(tables.OPS) else None
    if (not in_header(m) or b.fpatr_present or (op is not None and op[1] != "CUBE")
            or b.ior_present or b.iots or b.ios):
        return BUNDLE_CONTROL                   # HDR.8 fpatr_place
    if not fpatr_fields_legal(cmd):
        return TILE_LEGALITY                    # HDR.8 fpatr_fields
    b.fpatr_present = True
    b.fpatr = word
    return None


def b_catr(m: Machine, cmd: Decoded, word: int, address: int, pe: int) -> Optional[Fault]:
    """B.CATR: once per header; latch the raw word (DR/trap act at completion)."""
    b = m.block
    if not in_header(m) or b.catr_present:
        return BUNDLE_CONTROL                   # HDR.9 catr_once
    b.catr_present = True
    b.catr = word
    return None
