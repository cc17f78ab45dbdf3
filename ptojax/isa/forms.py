"""The command-form table, loaded from the spec's catalog data.

`FORMS` is in decode priority order (more mask bits first, then ascending
form_id); every in-scope encoding variant is its own `Encoding` entry that
points back to its form.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

_DATA = "command-forms.json"


def pack(word: int, plan: Iterable[tuple[int, int, int, int]], values: Sequence[int]) -> int:
    """`word` with `values` placed in their fields. `plan` lists every field
    piece as (index into values, value lsb, piece mask, instruction lsb), so
    the positions are looked up once, where the plan is made; the one place
    field bits are packed (Field.insert, the encoders, the assembler)."""
    for i, vlsb, mask, ilsb in plan:
        word |= (values[i] >> vlsb & mask) << ilsb
    return word


@dataclass(frozen=True)
class Field:
    name: str
    pieces: tuple[tuple[int, int, int], ...]   # (instruction_lsb, value_lsb, width)
    width: int

    def extract(self, word: int) -> int:
        v = 0
        for ilsb, vlsb, w in self.pieces:
            v |= ((word >> ilsb) & ((1 << w) - 1)) << vlsb
        return v

    def plan(self, index: int = 0) -> tuple[tuple[int, int, int, int], ...]:
        """This field's pieces as `pack` places them, the value being values[index]."""
        return tuple((index, vlsb, (1 << w) - 1, ilsb) for ilsb, vlsb, w in self.pieces)

    def insert(self, value: int) -> int:
        return pack(0, self.plan(), (value,))

    def replace(self, word: int, value: int) -> int:
        """`word` with `value` (cut to the field's width) in this field."""
        return (word & ~self.insert((1 << self.width) - 1)) | self.insert(value)


@dataclass(frozen=True)
class Form:
    form_id: str
    mnemonic: str
    asm: str
    fields: tuple[Field, ...]
    constraints: tuple[tuple[str, frozenset[int]], ...]   # (field, legal values)

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"{self.mnemonic} has no field {name!r}")

    def constraint_ok(self, values: Mapping[str, int]) -> bool:
        return all(values[f] in legal for f, legal in self.constraints)


@dataclass(frozen=True)
class Encoding:
    form: Form
    mask: int
    match: int
    variant: str          # "" for the base encoding, else the variant's name
    function: int | None  # the variant's Function, when it names one


def _load() -> tuple[dict[str, Any], dict[str, Form], tuple[Encoding, ...]]:
    # the catalog as JSON gives it (nested dicts, lists, strings and numbers)
    raw: dict[str, Any] = json.loads(resources.files(__package__).joinpath("data", _DATA).read_text())
    forms: dict[str, Form] = {}
    encodings: list[Encoding] = []
    for rec in raw["forms"]:
        fields = tuple(
            Field(f["name"], tuple((p["instruction_lsb"], p["value_lsb"], p["width"]) for p in f["pieces"]),
                  f["width"])
            for f in rec["fields"])
        cons = tuple((c["field"], frozenset(c["values"])) for c in rec["constraints"]
                     if c["operator"] == "one-of")
        form = Form(rec["form_id"], rec["mnemonic"], rec["asm"], fields, cons)
        forms[form.form_id] = form
        for e in rec["encoding"]:
            encodings.append(Encoding(form, int(e["mask"], 16), int(e["match"], 16), "", None))
        for v in rec.get("encoding_variants") or []:
            for e in v["encoding"]:
                encodings.append(Encoding(form, int(e["mask"], 16), int(e["match"], 16),
                                          v["name"], v.get("function")))
    encodings.sort(key=lambda e: (-bin(e.mask).count("1"), e.form.form_id, e.variant))
    return raw, forms, tuple(encodings)


CATALOG, FORMS_BY_ID, ENCODINGS = _load()


def forms_named(mnemonic: str) -> list[Form]:
    return [f for f in FORMS_BY_ID.values() if f.mnemonic == mnemonic]


def match(word: int) -> Encoding | None:
    """The winning encoding of a 32-bit word, or None when no form matches."""
    word &= 0xFFFFFFFF
    for e in ENCODINGS:
        if word & e.mask == e.match:
            return e
    return None
