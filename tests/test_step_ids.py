"""The spec step ids (tables.STEP_ID) are the key the two models share: every
entry of the executor's ordered check lists names one, the oracle carries the
same id on its twin check, and both raise the same fault there. One search for
an id finds the spec step (tables.STEP_LISTS), the executor's entry and the
oracle's check."""

import re
from pathlib import Path

import jax.numpy as jnp
import pytest

from ptojax import tables
from ptojax.ops.common import ordered_fault

PKG = Path(__file__).resolve().parents[1] / "ptojax"
EXECUTOR = sorted((PKG / "ops").glob("*.py"))
ORACLE = sorted((PKG / "reference").glob("*.py"))
ID = tables.STEP_ID
# the oracle's fault constants (reference/transport.py, reference/run.py)
CONSTANTS = {"TILE_LEGALITY": "Fault_TileLegality", "TILE_ALLOCATION": "Fault_TileAllocation",
             "BUNDLE_CONTROL": "Fault_BundleControl", "ILLEGAL": "Fault_IllegalInstruction",
             "UNIMPLEMENTED": "Fault_Unimplemented", "None": "Fault_None"}


def executor_entries() -> list:
    """(id, fault name, file) of every ordered_fault entry: ("<id>", cond, "<fault>")."""
    entry = re.compile(r'\(\s*"(%s)",(.*?),\s*"(Fault_\w+)"\)' % ID, re.S)
    out = []
    for path in EXECUTOR:
        text = path.read_text()
        for m in entry.finditer(text):
            out.append((m.group(1), m.group(3), path.name))
    return out


def oracle_tags() -> list:
    """(id, fault name, file:line) of every `# <id>` tag in the oracle: the fault
    of the `return` on the tagged line, or of the first one after a comment line."""
    tag = re.compile(r"#\s*(%s)" % ID)
    ret = re.compile(r"return\s+(\w+)")
    out = []
    for path in ORACLE:
        lines = path.read_text().splitlines()
        for n, line in enumerate(lines):
            m = tag.search(line)
            if not m:
                continue
            code = line[:m.start()]
            r = ret.search(code) if code.strip() else next(
                (ret.search(x) for x in lines[n + 1:] if ret.search(x)), None)
            out.append((m.group(1), CONSTANTS.get(r.group(1)) if r else None,
                        f"{path.name}:{n + 1}"))
    return out


def test_every_executor_entry_has_a_unique_id():
    entries = executor_entries()
    calls = sum(p.read_text().count("ordered_fault(") for p in EXECUTOR) - 1   # less the def
    ids = [e[0] for e in entries]
    assert len(ids) >= 40
    assert len(set(ids)) == len(ids), [i for i in ids if ids.count(i) > 1]
    # every list and every id prefix is used
    assert {i.split(".")[0] for i in ids} == set(tables.STEP_LISTS)
    assert calls <= len(entries)


def test_every_id_is_on_both_sides_with_the_same_fault():
    executor = {i: fault for i, fault, _ in executor_entries()}
    oracle = oracle_tags()
    assert {i for i, _, _ in oracle} == set(executor)
    for i, fault, where in oracle:
        assert fault == executor[i], (i, where, fault, executor[i])


def test_an_id_is_found_by_one_search():
    for i in {e[0] for e in executor_entries()}:
        hits = {p.parent.name for p in EXECUTOR + ORACLE if i in p.read_text()}
        assert hits == {"ops", "reference"}, (i, hits)


def test_ordered_fault_takes_the_first_holding_entry_and_refuses_a_missing_id():
    f = tables.FAULT_CODE
    code = ordered_fault(("MM.1 fpatr_present", jnp.bool_(False), "Fault_BundleControl"),
                         ("MM.3 gate", jnp.bool_(True), "Fault_TileLegality"),
                         ("MM.10 destination", jnp.bool_(True), "Fault_TileAllocation"))
    assert int(code) == f["Fault_TileLegality"]
    with pytest.raises(ValueError, match="not a step id"):
        ordered_fault((jnp.bool_(True), "Fault_TileLegality", "x"))
    with pytest.raises(ValueError, match="not a step id"):
        ordered_fault(("gate", jnp.bool_(True), "Fault_TileLegality"))
