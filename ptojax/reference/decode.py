"""Command-word decoder of the reference model (encoding.md section 1).

Reads the catalog records in ptojax/isa/data/command-forms.json with json and
decodes a 32-bit word by the catalog rule: forms (and their encoding variants)
in order of descending popcount(mask), then ascending form_id; the first with
(word & mask) == match wins; every `one-of` constraint must then hold, else
Fault_IllegalInstruction. No match at all is also Fault_IllegalInstruction.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Iterable
from typing import Optional

_FORMS_PATH = Path(__file__).resolve().parent.parent / "isa" / "data" / "command-forms.json"


@dataclass(frozen=True)
class Form:
    form_id: str
    mnemonic: str
    handler: str                     # catalog semantic_handler
    # ((name, ((instruction_lsb, value_lsb, width), ...)), ...)
    fields: tuple[tuple[str, tuple[tuple[int, int, int], ...]], ...]
    constraints: tuple[tuple[str, frozenset[int]], ...]   # ((field, allowed values frozenset), ...)


@dataclass(frozen=True)
class Encoding:
    mask: int
    match: int
    form: Form
    variant: Optional[str]           # encoding_variants name ("TSTORE.SPART") or None


@dataclass(frozen=True)
class Decoded:
    """A decoded command: its form, the encoding variant and the field values."""
    form: Form
    variant: Optional[str]
    values: dict[str, int] = field(default_factory=dict)

    @property
    def mnemonic(self) -> str:
        return self.form.mnemonic

    def has(self, name: str) -> bool:
        return name in self.values

    def __getitem__(self, name: str) -> int:
        return self.values[name]


def _field_value(word: int, pieces: Iterable[tuple[int, int, int]]) -> int:
    v = 0
    for lsb, value_lsb, width in pieces:
        v |= ((word >> lsb) & ((1 << width) - 1)) << value_lsb
    return v


def _load_encodings(path: Path = _FORMS_PATH) -> tuple[Encoding, ...]:
    data = json.loads(path.read_text())
    encodings = []
    for rec in data["forms"]:
        if rec.get("length_bits") != 32:
            continue
        fields = tuple((f["name"], tuple((p["instruction_lsb"], p["value_lsb"], p["width"])
                                         for p in f["pieces"])) for f in rec["fields"])
        constraints = tuple((c["field"], frozenset(c["values"])) for c in rec["constraints"]
                            if c["operator"] == "one-of")
        unsupported = [c for c in rec["constraints"] if c["operator"] != "one-of"]
        if unsupported:
            raise ValueError(f"form {rec['form_id']}: unsupported constraint {unsupported[0]}")
        form = Form(rec["form_id"], rec["mnemonic"], rec["semantic_handler"], fields, constraints)
        for enc in rec["encoding"]:
            encodings.append(Encoding(int(enc["mask"], 16), int(enc["match"], 16), form, None))
        for var in rec.get("encoding_variants", ()):
            for enc in var["encoding"]:
                encodings.append(Encoding(int(enc["mask"], 16), int(enc["match"], 16), form,
                                          var["name"]))
    # Priority: more mask bits first, then ascending form_id (the catalog rule).
    encodings.sort(key=lambda e: (-bin(e.mask).count("1"), e.form.form_id))
    return tuple(encodings)


ENCODINGS: tuple[Encoding, ...] = _load_encodings()


def decode(word: int) -> Optional[Decoded]:
    """Decode one 32-bit word: a Decoded, or None for Fault_IllegalInstruction
    (no form matches, or a constraint of the matching form fails)."""
    word &= 0xFFFFFFFF
    for enc in ENCODINGS:
        if word & enc.mask == enc.match:
            values = {name: _field_value(word, pieces) for name, pieces in enc.form.fields}
            for name, allowed in enc.form.constraints:
                if values.get(name) not in allowed:
                    return None
            return Decoded(enc.form, enc.variant, values)
    return None
