"""Decode one 32-bit command word of the ptojax slice (encoding.md section 1).

`decode(word)` walks the form table in decode priority order (`forms.match`),
extracts every field of the winning form and checks its `one-of` constraints.
A word that matches no form, or whose winning form rejects a field value,
decodes to a `Command` whose `fault` is ``"Fault_IllegalInstruction"`` (the
decode-stage fault of the spec); `decode` itself never raises for a 32-bit
value.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Mapping, Optional, SupportsIndex

from . import forms

ILLEGAL = "Fault_IllegalInstruction"

_SOURCE_INDEX: Mapping[str, int] = forms.CATALOG.get("source_form_index", {})


def _field_bits(form: forms.Form) -> int:
    bits = 0
    for f in form.fields:
        bits |= f.insert((1 << f.width) - 1)
    return bits


# Bits of each encoding that are neither fixed by the mask nor part of a field
# (B.IOT forms 9 and 11 leave [8:7] undefined; encoding.md section 9 item 11).
_FREE_BITS = {id(e): ~(e.mask | _field_bits(e.form)) & 0xFFFFFFFF for e in forms.ENCODINGS}


@dataclass(frozen=True)
class Command:
    """One decoded command word.

    word        the 32-bit word
    mnemonic    form mnemonic ("BSTART.TLOAD", "B.IOT", ...); "" when no form matches
    form_id     catalog form id ("b_iot_32_efa0fe3fe49a"); "" when no form matches
    variant     encoding variant name: "" or "TSTORE.SPART"
    fields      field name -> value (every field of the form, fixed ones included)
    fault       None, or "Fault_IllegalInstruction" (no form / constraint failed)
    form_index  the form's index in the source catalog (40 = BSTART.TLOAD), or None
    free_bits   bits of the word that the form neither fixes nor assigns to a
                field (only B.IOT forms 9 and 11 have such bits: [8:7]); decoders
                ignore them
    """

    word: int
    mnemonic: str
    form_id: str
    variant: str
    fields: dict[str, int] = field(hash=False)
    fault: Optional[str]
    form_index: Optional[int] = None
    free_bits: int = 0

    @property
    def ok(self) -> bool:
        return self.fault is None

    @property
    def form(self) -> Optional[forms.Form]:
        return forms.FORMS_BY_ID.get(self.form_id)

    @property
    def name(self) -> str:
        """Mnemonic with the variant folded in ("BSTART.TSTORE.SPART")."""
        if self.variant and self.mnemonic.startswith("BSTART."):
            return "BSTART." + self.variant
        return self.mnemonic

    def __getitem__(self, key: str) -> int:
        return self.fields[key]


def check_word(word: SupportsIndex) -> int:
    """Validate a command word: an integer (not bool) in 0..2**32-1."""
    if isinstance(word, bool):
        raise TypeError("a command word must be an int, not bool")
    try:
        w = operator.index(word)
    except TypeError:
        raise TypeError(f"a command word must be an int, got {type(word).__name__}") from None
    if not 0 <= w <= 0xFFFFFFFF:
        raise ValueError(f"command word {w:#x} out of range 0..0xffffffff")
    return w


def decode(word: SupportsIndex) -> Command:
    """Decode a 32-bit command word. Never raises for an int in 0..2**32-1."""
    w = check_word(word)
    enc = forms.match(w)
    if enc is None:
        return Command(w, "", "", "", {}, ILLEGAL)
    form = enc.form
    values = {f.name: f.extract(w) for f in form.fields}
    fault = None if form.constraint_ok(values) else ILLEGAL
    return Command(w, form.mnemonic, form.form_id, enc.variant, values, fault,
                   _SOURCE_INDEX.get(form.form_id), w & _FREE_BITS[id(enc)])
