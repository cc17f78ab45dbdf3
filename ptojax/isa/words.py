"""Instruction words as numpy arrays: which encoding each word is, and its fields.

The host-side twin of decode_array.py (which is traced JAX code): a campaign
reads and rewrites whole batches of words at once, to count coverage (the
operation and DataType of every BSTART, the Layout of every B.DATR) and to
mutate fields of existing words (fuzz/variants.py). Encodings and field
positions come from the catalog (forms.ENCODINGS), never retyped.
"""

from __future__ import annotations

from typing import cast

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .forms import ENCODINGS, Field

NONE = -1                            # a word no encoding matches
MNEMONICS = tuple(e.form.mnemonic for e in ENCODINGS)
_MASKS = np.array([e.mask for e in ENCODINGS], np.uint32)
_MATCHES = np.array([e.match for e in ENCODINGS], np.uint32)
START_OP = tuple((e.variant or e.form.mnemonic[len("BSTART."):])
                 if e.form.mnemonic.startswith("BSTART.") else None for e in ENCODINGS)
# encoding -> its fields; (encoding, field name) -> position in FIELDS
FIELDS: tuple[tuple[int, Field], ...] = tuple((i, f) for i, e in enumerate(ENCODINGS)
                                              for f in e.form.fields)
FIELDS_OF = tuple(tuple(j for j, (i, _) in enumerate(FIELDS) if i == e) for e in range(len(ENCODINGS)))
FIELD_NAMES = tuple(f"{MNEMONICS[i]}.{f.name}" for i, f in FIELDS)


def encodings(words: ArrayLike) -> NDArray[np.int16]:
    """int16 array of the words' shape: the index into forms.ENCODINGS of each
    word's winning encoding (decode priority order), NONE where none matches."""
    w = np.asarray(words, np.uint32)
    out = np.full(w.shape, NONE, np.int16)
    for i in range(len(ENCODINGS) - 1, -1, -1):      # the first match wins: write it last
        out[(w & _MASKS[i]) == _MATCHES[i]] = i
    return out


def field_of(encoding: int, name: str) -> Field:
    return ENCODINGS[encoding].form.field(name)


def extract(words: ArrayLike, field: Field) -> NDArray[np.int64]:
    """The value (int64) of `field` in every word (meaningful where the word's
    encoding has that field)."""
    w = np.asarray(words, np.uint32).astype(np.int64)
    v = np.zeros(w.shape, np.int64)
    for ilsb, vlsb, width in field.pieces:
        v |= ((w >> ilsb) & ((1 << width) - 1)) << vlsb
    return v


def insert(words: ArrayLike, field: Field, values: ArrayLike) -> NDArray[np.uint32]:
    """`words` (uint32) with `values` (cut to the field's width) in `field`."""
    w = np.asarray(words, np.uint32).astype(np.int64)
    v = np.asarray(values, np.int64)
    for ilsb, vlsb, width in field.pieces:
        m = (1 << width) - 1
        w = (w & ~(m << ilsb)) | (((v >> vlsb) & m) << ilsb)
    return w.astype(np.uint32)


def start_fields() -> tuple[NDArray[np.int16], list[str], Field]:
    """(encoding indices of the BSTART encodings, their operation names, the
    DataType field every BSTART shares)."""
    idx = [i for i, op in enumerate(START_OP) if op is not None]
    fields = {ENCODINGS[i].form.field("DataType").pieces for i in idx}
    assert len(fields) == 1, "BSTART encodings place DataType differently"
    return np.array(idx, np.int16), [cast(str, START_OP[i]) for i in idx], ENCODINGS[idx[0]].form.field("DataType")
