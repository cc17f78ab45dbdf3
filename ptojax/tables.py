"""Value tables of the PTO slice: DataType, Layout, PadValue, faults, PE modes.

Pure data (no JAX): every other module, the reference model included, looks
values up here by spec name or by code. Source: spec/encoding.md section 5 and
spec/state-and-transport.md A.3, A.9, B.5.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Optional


# ---------------------------------------------------------------- DataType


@dataclass(frozen=True)
class DataType:
    code: int
    name: str
    bits: int            # logical element width
    kind: str            # "float" | "signed" | "unsigned"
    packed4: bool        # 4-bit X2 type, two elements per GM byte
    cube_class: Optional[str]  # "b32" | "b16" | "b8" | "b4" | None (not CUBE-legal)

    @property
    def signed(self) -> bool:
        return self.kind == "signed"

    @property
    def is_integer(self) -> bool:
        return self.kind in ("signed", "unsigned")

    @property
    def element_bytes(self) -> int:
        """GM access size (and alignment) of one element; 1 for 4-bit types."""
        return max(1, self.bits // 8)


def _dt(code: int, name: str, bits: int, kind: str, cube: Optional[str]) -> DataType:
    return DataType(code, name, bits, kind, bits == 4, cube)


DATATYPES: tuple[DataType, ...] = (
    _dt(0, "FP64", 64, "float", None),
    _dt(1, "FP32", 32, "float", "b32"),
    _dt(2, "TF32", 32, "float", "b32"),
    _dt(3, "HF32", 32, "float", "b32"),
    _dt(4, "FP16", 16, "float", "b16"),
    _dt(5, "BF16", 16, "float", "b16"),
    _dt(6, "HiF8", 8, "float", "b8"),
    _dt(7, "E4M3", 8, "float", "b8"),
    _dt(8, "E5M2", 8, "float", "b8"),
    _dt(9, "E3M2", 8, "float", "b8"),
    _dt(10, "E2M3", 8, "float", "b8"),
    _dt(11, "E2M1X2", 4, "float", "b4"),
    _dt(12, "E1M2X2", 4, "float", "b4"),
    _dt(13, "E8M0", 8, "float", "b8"),
    _dt(14, "HiF4X2", 4, "float", None),
    _dt(16, "S64", 64, "signed", None),
    _dt(17, "S32", 32, "signed", "b32"),
    _dt(18, "S16", 16, "signed", "b16"),
    _dt(19, "S8", 8, "signed", "b8"),
    _dt(20, "S4X2", 4, "signed", "b4"),
    _dt(24, "U64", 64, "unsigned", None),
    _dt(25, "U32", 32, "unsigned", "b32"),
    _dt(26, "U16", 16, "unsigned", "b16"),
    _dt(27, "U8", 8, "unsigned", "b8"),
    _dt(28, "U4X2", 4, "unsigned", "b4"),
)

DTYPE_NONE = 31  # B.DATR sentinel "keep the BSTART type"; not a dtype
RESERVED_DTYPE_CODES = (15, 21, 22, 23, 29, 30)

DTYPE_BY_CODE: dict[int, DataType] = {d.code: d for d in DATATYPES}
DTYPE_BY_NAME: dict[str, DataType] = {d.name: d for d in DATATYPES}
_DTYPE_BY_UPPER = {d.name.upper(): d for d in DATATYPES}


def dtype(spec: DataType | int | str) -> DataType:
    """Look a DataType up by spec name ("FP16"), code (4) or DataType."""
    if isinstance(spec, DataType):
        return spec
    if isinstance(spec, bool):
        raise TypeError(f"dtype must be a spec name or code, got {spec!r}")
    if isinstance(spec, int):
        if spec in DTYPE_BY_CODE:
            return DTYPE_BY_CODE[spec]
        raise ValueError(
            f"DataType code {spec} is not assigned; assigned codes are "
            f"{sorted(DTYPE_BY_CODE)}")
    if isinstance(spec, str):
        d = _DTYPE_BY_UPPER.get(spec.upper())
        if d is not None:
            return d
        raise ValueError(
            f"unknown DataType name {spec!r}; expected one of "
            f"{', '.join(DTYPE_BY_NAME)}")
    raise TypeError(f"dtype must be a spec name (str) or code (int), got {type(spec).__name__}")


# ---------------------------------------------------------------- Layout

# B.DATR Layout codes (encoding.md 5.2)
LAYOUT_CODES: dict[int, str] = {
    0: "NORM", 1: "ND2DN", 3: "ND2ZN", 4: "ND2NZ",
    6: "DN2ND", 8: "DN2ZN", 9: "DN2NZ",
    17: "ZN2ND", 18: "ZN2DN", 20: "ZN2NZ",
    21: "ND2M32", 22: "ND2M16", 23: "ND2N8",
    24: "M322ND", 25: "M162ND", 26: "N82ND",
    27: "NZ2ND", 28: "NZ2DN", 30: "NZ2ZN",
}
LAYOUT_CODE_BY_NAME = {v: k for k, v in LAYOUT_CODES.items()}
RESERVED_LAYOUT_CODES = tuple(c for c in range(32) if c not in LAYOUT_CODES)

# CUBE conversion codes: B.DATR Layout code -> (direction, descriptor layout)
CUBE_LOAD_CODES = {21: "CUBE_M32", 22: "CUBE_M16", 23: "CUBE_N8"}
CUBE_STORE_CODES = {24: "CUBE_M32", 25: "CUBE_M16", 26: "CUBE_N8"}

# Ordinary codes (NORM and the twelve relayouts): the layout each names for
# the tile (the second half of its name). TLOAD and TSTORE read only this
# half: a relayout TLOAD gives its destination this layout, GM is always
# row-major, and no check reads the first half (docs/spec-notes.md).
ORDINARY_CODE_LAYOUT = {0: "RowMajor", 1: "ColumnMajor", 3: "ZN", 4: "NZ",
                        6: "RowMajor", 8: "ZN", 9: "NZ",
                        17: "RowMajor", 18: "ColumnMajor", 20: "NZ",
                        27: "RowMajor", 28: "ColumnMajor", 30: "ZN"}
RELAYOUT_CODES = tuple(c for c in ORDINARY_CODE_LAYOUT if c != 0)

# Tile descriptor layout (state-and-transport.md A.3). Numbering is ptojax's own
# (the descriptor enumeration is model state, not an encoded field).
TILE_LAYOUTS = ("RowMajor", "ColumnMajor", "ZN", "NZ", "CUBE_M16", "CUBE_M32", "CUBE_N8")
TILE_LAYOUT_CODE = {n: i for i, n in enumerate(TILE_LAYOUTS)}
CUBE_LAYOUTS = ("CUBE_M16", "CUBE_M32", "CUBE_N8")

TILE_LOCATIONS = ("Any", "Vector", "Matrix", "Memory")
TILE_LOCATION_CODE = {n: i for i, n in enumerate(TILE_LOCATIONS)}


def cube_layout(spec: str) -> str:
    """Validate a CUBE descriptor layout name ("CUBE_M16", "CUBE_M32", "CUBE_N8")."""
    if not isinstance(spec, str):
        raise TypeError(f"layout must be a name such as 'CUBE_M16', got {type(spec).__name__}")
    name = spec.upper()
    if name not in CUBE_LAYOUTS:
        raise ValueError(f"unknown CUBE layout {spec!r}; expected one of {', '.join(CUBE_LAYOUTS)}")
    return name


# ---------------------------------------------------------------- PadValue

PADVALUES = ("Zero", "Max", "Min", "Null")  # B.DATR PadValueOrByteId codes 0..3
PADVALUE_CODE = {n: i for i, n in enumerate(PADVALUES)}
PAD_NULL = 3

_ALL64 = (1 << 64) - 1
_TOP64 = 1 << 63

# (Max, Min) carrier words as the model's TilePadValueForDataType returns them
# (state-and-transport.md B.5). Types without a format-derived entry use the
# model's catch-all (all ones / top bit only).
_PAD_MAX_MIN: dict[str, tuple[int, int]] = {
    "FP64": (0x7FEFFFFFFFFFFFFF, 0xFFEFFFFFFFFFFFFF),
    "FP32": (0x7F7FFFFF, 0xFF7FFFFF),
    "TF32": (0x7F7FE000, 0xFF7FE000),
    "HF32": (0x7F7FF000, 0xFF7FF000),
    "FP16": (0x7BFF, 0xFBFF),
    "BF16": (0x7F7F, 0xFF7F),
    "E4M3": (0x7E, 0xFE),
    "E5M2": (0x7B, 0xFB),
    "S8": (0x7F, 0x80),
    "S16": (0x7FFF, 0x8000),
    "S32": (0x7FFFFFFF, 0x80000000),
    "S64": (0x7FFFFFFFFFFFFFFF, 0x8000000000000000),
    "U8": (0xFF, 0),
    "U16": (0xFFFF, 0),
    "U32": (0xFFFFFFFF, 0),
    "U64": (_ALL64, 0),
    "U4X2": (_ALL64, 0),
}


def padvalue(spec: int | str) -> int:
    """PadValue code from a name ("Max") or code (1)."""
    if isinstance(spec, bool):
        raise TypeError("padvalue must be a name or code")
    if isinstance(spec, int):
        if 0 <= spec <= 3:
            return spec
        raise ValueError(f"PadValue code {spec} out of range; expected 0..3 ({', '.join(PADVALUES)})")
    if isinstance(spec, str):
        for i, n in enumerate(PADVALUES):
            if n.lower() == spec.lower():
                return i
        raise ValueError(f"unknown PadValue {spec!r}; expected one of {', '.join(PADVALUES)}")
    raise TypeError(f"padvalue must be a name (str) or code (int), got {type(spec).__name__}")


def pad_word(dt: DataType | int | str, pad: int | str) -> int:
    """The 64-bit carrier word the model writes for PadValue `pad` of dtype `dt`.

    Zero and Null both write 0 (Null additionally leaves the slot undefined).
    Only the low element bits are architectural.
    """
    d = dtype(dt)
    p = padvalue(pad)
    if p in (0, 3):
        return 0
    mx, mn = _PAD_MAX_MIN.get(d.name, (_ALL64, _TOP64))
    return mx if p == 1 else mn


# ---------------------------------------------------------------- Faults

# Fault codes are ptojax's own small integers (the model uses an enumeration);
# the names are the spec's.
FAULTS = (
    "Fault_None",
    "Fault_IllegalInstruction",
    "Fault_TileLegality",
    "Fault_TileAllocation",
    "Fault_BundleControl",
    "Fault_DataAlignment",
    "Fault_DataPage",
    "Fault_InstructionPC",
    "Fault_BundlePostCommit",
    # Not architectural: an operation this version of ptojax does not model yet
    # (e.g. Shared-tile forms before the cooperative issue). Never a silent result.
    "Fault_Unimplemented",
)
FAULT_CODE = {n: i for i, n in enumerate(FAULTS)}
TRAP_NUMBER = {
    "Fault_IllegalInstruction": 4, "Fault_TileLegality": 5, "Fault_TileAllocation": 5,
    "Fault_BundleControl": 5, "Fault_DataAlignment": 34, "Fault_DataPage": 35,
}
MEMORY_FAULTS = ("Fault_DataAlignment", "Fault_DataPage")


# ---------------------------------------------------------------- Numeric status flags

# CORE_STATE[36:32] (asl/arch/state/numeric-status.asl): five sticky bits, bit i
# of the State's numeric_flags is NUMERIC_FLAGS[i]. Reset clears them; a
# successful operation ORs in the flags it raises (in this slice only the matrix
# commit's post-processing and RowMax/GroupMax raise any).
NUMERIC_FLAGS = ("NV", "DZ", "OF", "UF", "NX")


def flag_names(bits: int) -> list[str]:
    """The names of the numeric flags set in `bits`, in NUMERIC_FLAGS order."""
    return [n for i, n in enumerate(NUMERIC_FLAGS) if bits >> i & 1]


def flag_bits(names: Iterable[str]) -> int:
    """The bits of numeric flag names (ValueError for an unknown name)."""
    out = 0
    for n in names:
        if n not in NUMERIC_FLAGS:
            raise ValueError(f"unknown numeric flag {n!r}; expected one of {NUMERIC_FLAGS}")
        out |= 1 << NUMERIC_FLAGS.index(n)
    return out


# Ordered-check step ids: "<list>.<step> <name>", the key both models share.
# The executor names each entry of its `ordered_fault` lists by one; the oracle
# carries the same id on the check it makes (a `# <id>` comment on the line
# that returns the fault), so one search for the id finds the spec step, the
# executor's check and the oracle's (tests/test_step_ids.py checks both sides).
STEP_LISTS = {
    "HDR": "encoding.md 4.3-4.9 (header commands, checked when each issues)",
    "DSP": "docs/execution-model.md, Completion (dispatch of a completed block)",
    "C5": "state-and-transport.md C.5 (CUBE TLOAD)",
    "C6": "state-and-transport.md C.6 (CUBE TSTORE)",
    "C7": "state-and-transport.md C.7 (ordinary Local TLOAD)",
    "C8": "state-and-transport.md C.8 (ordinary Local TSTORE)",
    "CAS": "state-and-transport.md D.4 (MGATHER.CAS)",
    "MM": "matrix.md B.6 and docs/matmul-decisions.md (TMATMUL/TGEMV; 7s: Shared sources, "
          "docs/shared-decisions.md 5)",
    "SH3": "docs/shared-decisions.md 3 (Shared TLOAD)",
    "SH4": "docs/shared-decisions.md 4 (Shared TSTORE, TSTORE.SPART)",
    "MV": "docs/tmov.md 2 (TMOV Function 2, the Local tile copy)",
    "MS": "docs/tmov.md 3 (TMOV Functions 9..12, Local to and from Shared)",
}
STEP_ID = r"(?:%s)\.[0-9]+[a-z]? [a-z][a-z0-9_]*" % "|".join(STEP_LISTS)


# ---------------------------------------------------------------- PEs, sizes, GPRs

NUM_PES = 4
NUM_GPRS = 24
LOCAL_TILES = 64
HAND_SLOTS = 16
HANDS = ("T", "U", "M", "N")
SHARED_TILES = 256
CELL_BYTES = 128
TILE_CAPACITY_RESET = 262144

# B.FPATR GroupNCode (0..9) -> columns a GroupMax group covers (0: no GroupMax)
FPATR_GROUP_N = (0, 8, 16, 32, 48, 64, 80, 96, 112, 128)

# PEMode (3 bits) -> 4-bit PE mask written PE0 first (bit 3 = PE0).
PEMODE_MASK = (0b0000, 0b1000, 0b0100, 0b0010, 0b0001, 0b1100, 0b1110, 0b1111)


def pe_bit(pe: int) -> int:
    """The mask bit of PE `pe` (PE0 is the most significant of the four)."""
    return 1 << (3 - pe)


def mask_str(mask: int) -> str:
    return format(mask & 0xF, "04b")


# SizeCode -> TSize bytes per participating PE; B.IOT 1..10, B.IOS 1..12.
def size_code_bytes(code: int) -> int:
    if not 1 <= code <= 12:
        raise ValueError(f"SizeCode {code} has no TSize; expected 1..12")
    return 128 << (code - 1)


GPR_NAMES = ("zero", "sp", "a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7", "ra",
             "s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8",
             "x0", "x1", "x2", "x3")


def gpr_index(spec: int | str) -> int:
    """GPR index from an int 0..23 or an assembly name (a0, s3, x2, zero...)."""
    if isinstance(spec, bool):
        raise TypeError("GPR must be an index or a name")
    if isinstance(spec, int):
        if 0 <= spec < NUM_GPRS:
            return spec
        raise ValueError(f"GPR index {spec} out of range; expected 0..{NUM_GPRS - 1}")
    if isinstance(spec, str):
        s = spec.strip().lower()
        if s in GPR_NAMES:
            return GPR_NAMES.index(s)
        if s.startswith("r") and s[1:].isdigit() and int(s[1:]) < NUM_GPRS:
            return int(s[1:])
        raise ValueError(f"unknown GPR {spec!r}; expected one of {', '.join(GPR_NAMES)} or r0..r23")
    raise TypeError(f"GPR must be an int or a name, got {type(spec).__name__}")


def tile_name(index: int) -> str:
    """Assembly spelling of a Local TileIndex: 0 -> T#1, 33 -> M#2."""
    return f"{HANDS[index // HAND_SLOTS]}#{index % HAND_SLOTS + 1}"


# Matrix/CMode/RMode names used by the assembler (encoding.md 4.3, 5.5).
CMODES = ("EQ", "NE", "LT", "GT", "LE", "GE")
RMODES = ("Default", "RNE", "RTZ", "RTM", "RTP", "RNA", "RTO", "RHB")


# ---------------------------------------------------------------- operations

# Block operations started by the in-slice BSTART forms: (name, engine, Function).
# The index in this tuple is the operation id kept in State.block.op.
OPS: tuple[tuple[str, str, int], ...] = (
    ("TLOAD", "TLSU", 0), ("TSTORE", "TLSU", 1), ("TSTORE.SPART", "TLSU", 14),
    ("MGATHER.CAS", "TLSU", 8),
    ("TMATMUL", "CUBE", 0), ("TMATMUL.BIAS", "CUBE", 1), ("TMATMUL.ACC", "CUBE", 2),
    ("TMATMULMX", "CUBE", 4), ("TMATMULMX.BIAS", "CUBE", 5), ("TMATMULMX.ACC", "CUBE", 6),
    ("TGEMV", "CUBE", 16), ("TGEMV.BIAS", "CUBE", 17), ("TGEMV.ACC", "CUBE", 18),
    ("TGEMVMX", "CUBE", 20), ("TGEMVMX.BIAS", "CUBE", 21), ("TGEMVMX.ACC", "CUBE", 22),
    ("TMOV", "TLSU", 2), ("TMOV.L2S.INSERT", "TLSU", 9), ("TMOV.L2S.PUBLISH", "TLSU", 10),
    ("TMOV.S2L.BROADCAST", "TLSU", 11), ("TMOV.S2L.EXTRACT", "TLSU", 12),
)
OP_ID = {name: i for i, (name, _, _) in enumerate(OPS)}
ENGINE_CODE = {"TLSU": 0b00010, "CUBE": 0b00110}
