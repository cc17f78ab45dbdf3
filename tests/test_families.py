"""The family records (ptojax/families.py) are what both models, the effect
table and the generator derive from (issue 34, item 3): each record has its
module of the same name on both sides exporting `FAMILY` for it, both
dispatches compose exactly the records, in their order, every ordered check
list belongs to one family and its executor module carries that list's ids,
and the generator module and weight a record names exist.
"""

import dataclasses
import importlib
import re
from pathlib import Path

import pytest

import ptojax
from ptojax import families, machine, tables
from ptojax.fuzz.gen.driver import GenConfig
from ptojax.ops import dispatch

reference_run = importlib.import_module("ptojax.reference.run")    # the package names a function run

PKG = Path(ptojax.__file__).resolve().parent
NAMES = [f.name for f in families.FAMILIES]


@pytest.mark.parametrize("side", ["ops", "reference"])
@pytest.mark.parametrize("name", NAMES)
def test_each_side_has_the_family_module(side, name):
    module = importlib.import_module(f"ptojax.{side}.{name}")
    assert module.FAMILY.spec is families.BY_NAME[name]
    assert callable(module.FAMILY.complete)
    # the default family takes what no other selects; every routed one selects
    assert (module.FAMILY.selects is None) == (families.BY_NAME[name] is families.DEFAULT)


def test_both_dispatches_compose_the_records_in_order():
    for side in (dispatch, reference_run):
        assert side.DEFAULT.spec is families.DEFAULT
        assert tuple(f.spec for f in side.ROUTED) == families.ROUTED


def test_records_are_well_formed():
    op_names = {n for n, _, _ in tables.OPS}
    assert len(set(NAMES)) == len(NAMES)
    for f in families.FAMILIES:
        assert f.ops and set(f.ops) <= op_names, f.name
        assert f.selects.strip(), f.name
    # every operation of the slice is completed by some family
    assert set().union(*(f.ops for f in families.FAMILIES)) == op_names


def test_effect_table_derives_from_the_records():
    assert families.DEFAULT.effect is None          # traced by every program
    for f in families.ROUTED:
        assert f.effect in machine.ALL_EFFECTS, f.name
        if f.effect != "SHARED":                    # SHARED: a B.IOS in the words too
            assert machine._EFFECT_OPS[f.effect] == f.ops
    assert machine.ALL_EFFECTS == frozenset(machine._EFFECT_OPS) | {
        f.effect for f in families.ROUTED}


def test_every_check_list_belongs_to_one_family():
    owned = [s for f in families.FAMILIES for s in f.steps]
    assert len(owned) == len(set(owned))
    # HDR: the header commands (ops/commands.py); DSP: dispatch, in the default family
    assert set(owned) | {"HDR", "DSP"} == set(tables.STEP_LISTS)
    for f in families.FAMILIES:
        text = (PKG / "ops" / f"{f.name}.py").read_text()
        for lst in f.steps:
            assert re.search(r'"%s\.[0-9]+[a-z]? ' % lst, text), (f.name, lst)


def test_generator_and_weight_exist():
    weights = {fl.name for fl in dataclasses.fields(GenConfig)}
    for f in families.FAMILIES:
        assert (PKG / "fuzz" / "gen" / f"{f.generator}.py").is_file(), f.name
        assert f.weight is None or f.weight in weights, f.name
