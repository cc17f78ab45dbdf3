"""ptojax.interop: State <-> pto.asl-model.arch-state.v1 envelopes.

Schema validity of to_arch_state output (jsonschema, when importable), lossless
round trips (every State leaf, dtype and shape included; every PE's view of a
State with distinct Local files on several PEs and Shared records), the mapping
itself, a hypothesis round trip over random machine contents, and malformed
input. States come from pj.reference.run (no XLA compile) or direct leaf edits
(the Shared records), so the file stays fast.
"""

import copy
import json
import pathlib
from importlib import resources

import jax
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ptojax as pj
from ptojax import tables
from ptojax.interop import SCHEMA_ID, from_arch_state, schema, to_arch_state
from ptojax.state import (MAX_IOS, MAX_IOT, MachineConfig, own_words, pool_extent, pool_top,
                          slot_window, state_leaves, tile_words, write_tile_words)

try:
    import jsonschema
except ImportError:      # pragma: no cover - the test extra installs it
    jsonschema = None

SMALL = pj.preset("small")
TINY = pj.preset("tiny")


# ----------------------------------------------------------------- helpers


def assert_same_state(a, b):
    la, lb = state_leaves(a), state_leaves(b)
    assert la.keys() == lb.keys()
    for k in la:
        assert la[k].dtype == lb[k].dtype, (k, la[k].dtype, lb[k].dtype)
        assert la[k].shape == lb[k].shape, (k, la[k].shape, lb[k].shape)
        assert np.array_equal(la[k], lb[k]), k


def check_schema(d):
    if jsonschema is None:
        pytest.skip("jsonschema is not installed")
    jsonschema.validate(d, schema(), cls=jsonschema.Draft202012Validator)


def poke(s, **fields):
    """Replace top-level State fields with numpy values of the same dtype."""
    with jax.enable_x64(True):
        return s.replace(**{k: jax.numpy.asarray(np.asarray(v, np.asarray(getattr(s, k)).dtype))
                            for k, v in fields.items()})


def poke_sub(s, part, **fields):
    """Replace leaves of s.tiles, s.shared or s.block with numpy values of the same dtype."""
    sub = getattr(s, part)
    with jax.enable_x64(True):
        new = sub.replace(**{k: jax.numpy.asarray(np.asarray(v, np.asarray(getattr(sub, k)).dtype))
                             for k, v in fields.items()})
    return s.replace(**{part: new})


def ok(s, text, **kw):
    r = pj.reference.run(s, pj.asm.assemble(text), **kw)
    assert r.fault == "Fault_None", r.fault
    return r.state


CUBE_LOAD = """
BSTART.TLOAD FP16
B.DATR {ND2M16, DTYPE_NONE, Max}
B.DIM zero, 3, ->LB0
B.DIM zero, 2, ->LB1
B.IOR a0, a1
B.IOT mask=1000, last, ->M<1>
BSTOP
"""
CUBE_STORE = """
BSTART.TSTORE FP16
B.DATR {M162ND, DTYPE_NONE, Null}
B.DIM zero, 3, ->LB0
B.DIM zero, 2, ->LB1
B.IOR a2, a1
B.IOT M#1, mask=1000, last
BSTOP
"""
ORDINARY = """
BSTART.TLOAD U32
B.DIM zero, 2, ->LB0
B.DIM zero, 2, ->LB1
B.DIM zero, 2, ->LB2
B.IOR x2, x3
B.IOT mask=1111, last, ->T<1>
BSTOP
BSTART.TSTORE U32
B.IOR a3, x3
B.IOT T#1, mask=1111, last
BSTOP
"""
OPEN_BLOCK = """
BSTART.TLOAD FP16
B.DATR {ND2N8, DTYPE_NONE, Zero}
B.DIM zero, 4, ->LB0
B.DIM a4, 1, ->LB1
B.IOR a0, a1
B.IOT mask=1111, ->N<2>
"""


def fp16_input(cfg=SMALL):
    s = pj.reset(cfg)
    x = np.array([[1, 2, 3], [4, 5, 6]], np.float16)
    s = pj.write_memory(s, 0x100, x.view(np.uint8).reshape(-1))
    s = pj.write_gpr(s, "a0", 0x100)
    s = pj.write_gpr(s, "a1", 6)
    return pj.write_gpr(s, "a2", 0x300)


@pytest.fixture(scope="module")
def states():
    out = {"reset_asl": pj.reset(), "reset_tiny": pj.reset(TINY)}
    s = fp16_input()
    out["cube_load_store"] = ok(s, CUBE_LOAD + CUBE_STORE)

    o = pj.reset(SMALL)
    o = pj.write_memory(o, 0x100, bytes([1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0]))
    for name, v in (("x2", 0x100), ("x3", 12), ("a3", 0x200)):
        o = pj.write_gpr(o, name, v)
    for pe in (1, 2, 3):
        o = pj.write_gpr(o, "s0", 0x1111 * pe, pe=pe)
    out["ordinary_load_store"] = ok(o, ORDINARY)

    bad = pj.write_gpr(s, "a0", 0x101)                       # misaligned FP16 base
    r = pj.reference.run(bad, pj.asm.assemble(CUBE_LOAD))
    assert r.fault == "Fault_DataAlignment" and r.fault_address == 0x101
    out["fault_abandon"] = r.state
    r = pj.reference.run(bad, pj.asm.assemble(CUBE_LOAD), on_fault="hold")
    assert r.fault == "Fault_DataAlignment" and bool(np.asarray(r.state.block.active))
    out["fault_hold"] = r.state

    ob = pj.write_gpr(out["cube_load_store"], "a4", 1)
    ob = ok(ob, OPEN_BLOCK)
    assert bool(np.asarray(ob.block.active))
    out["open_block"] = ob

    # stale state: a free slot with a leftover descriptor (a free slot owns no
    # payload Words), an allocated tile with nonzero Words past its storage
    # region (but inside its own pool Words), TILE_CAPACITY changed
    st_ = out["cube_load_store"]
    t = {k: np.asarray(v).copy() for k, v in st_.tiles.items()}
    t["rows"][0, 1] = 9                                       # PE0's file
    t["layout"][0, 1] = tables.TILE_LAYOUT_CODE["CUBE_N8"]
    hs = SMALL.hand_slots
    m1 = 2 * hs                                               # slot of M#1
    words, defined = tile_words(t, 0, m1)
    assert own_words(t, 0, m1)[0].size > 200
    words[100] = (1 << 64) - 1          # FP16: one slot a Word, sign-extended
    defined[200] = True
    write_tile_words(t, 0, m1, words, defined)
    st_ = poke_sub(st_, "tiles", **{k: t[k] for k in ("words", "defined", "rows", "layout")})
    out["stale"] = poke(st_, tile_capacity=4096, pc=0xFFFF_FFFF_FFFF_FFFC,
                        numeric_flags=np.int32(tables.flag_bits(["NV", "OF", "NX"])))

    out["multi_pe"] = multi_pe_state()
    out["shared"] = with_shared_records(out["multi_pe"])
    out["shared_stale"] = with_stale_free_record(out["shared"])
    return out


def multi_pe_state():
    """Distinct Local files: PE0 M#1 (CUBE TLOAD on PE0), PE2 T#1 (TLOAD run on PE2),
    PE1 reset, PE3 a free slot with a stale descriptor field."""
    s = ok(fp16_input(), CUBE_LOAD)
    s = pj.write_memory(s, 0x400, bytes([9, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 6, 0, 0, 0]))
    for name, v in (("x2", 0x400), ("x3", 12), ("a3", 0x500)):
        s = pj.write_gpr(s, name, v, pe=2)
    s = ok(s, ORDINARY, pe=2)
    cols = np.asarray(s.tiles.cols).copy()
    cols[3, 0] = 4
    return poke_sub(s, "tiles", cols=cols)


# Shared records written as leaves (the Shared TLOAD is tested elsewhere):
# record 0 = S5, FP16 8x16 in a 256-byte TSize, complete and published;
# record 1 free; record 2 = S200, U32 4x8 (128 bytes), valid 3x6, quarters of
# PE0 and PE2 initialized, a stale Word past its storage; record 3 = S0, U4X2
# 4x16 (32 bytes), allocated to PE2+PE3, PE3's quarter initialized.
SHARED_RECORDS = [
    dict(record=0, sid=5, allocation_mask=0b1111, initialized_mask=0b1111, published=True,
         contents_defined=True, dtype="FP16", capacity=256, rows=8, cols=16, valid_rows=8,
         valid_cols=16),
    dict(record=2, sid=200, allocation_mask=0b1111, initialized_mask=0b1010, published=False,
         contents_defined=False, dtype="U32", capacity=128, rows=4, cols=8, valid_rows=3,
         valid_cols=6),
    dict(record=3, sid=0, allocation_mask=0b0011, initialized_mask=0b0001, published=False,
         contents_defined=False, dtype="U4X2", capacity=32, rows=4, cols=16, valid_rows=4,
         valid_cols=16),
]


def with_shared_records(s):
    sh = {k: np.asarray(v).copy() for k, v in s.shared.items()}
    rng = np.random.default_rng(7)
    for r in SHARED_RECORDS:
        i = r["record"]
        for k, v in r.items():
            if k != "record":
                sh[k][i] = tables.DTYPE_BY_NAME[v].code if k == "dtype" else v
        n = r["rows"] * r["cols"]
        sh["words"][i, :n] = rng.integers(0, 1 << 16, n)
    sh["words"][2, 8:16] = 0                      # PE1's quarter of S200 never written
    sh["words"][2, 24:32] = 0
    sh["words"][2, 40] = 0x1234                   # stale Word past S200's storage
    sh["words"][3, :48] = 0                       # S0: only PE3's quarter written
    # stored definedness (docs/shared-decisions.md 1): what the writes would leave
    sh["defined"][0, :128] = True
    sh["defined"][2, [0, 1, 2, 3, 4, 5, 16, 17, 18, 19, 20, 21]] = True
    sh["defined"][2, 41] = True                   # a stale bit past S200's storage
    sh["defined"][3, 48:64] = True
    return poke_sub(s, "shared", **sh)


def with_stale_free_record(s):
    sh = {k: np.asarray(v).copy() for k, v in s.shared.items()}
    sh["dtype"][5] = tables.DTYPE_BY_NAME["FP32"].code
    sh["rows"][5] = 3
    sh["published"][5] = True
    sh["words"][5, 2] = 7
    return poke_sub(s, "shared", **sh)


STATE_NAMES = ["reset_asl", "reset_tiny", "cube_load_store", "ordinary_load_store",
               "fault_abandon", "fault_hold", "open_block", "stale", "multi_pe", "shared",
               "shared_stale"]


@pytest.fixture(scope="module")
def envelopes(states):
    return {k: to_arch_state(v) for k, v in states.items()}


# ----------------------------------------------------------------- schema and data file


def test_package_schema_is_the_runner_schema():
    """The packaged schema is, byte for byte, the runner's file kept in
    tests/data (its origin: tests/data/README.md)."""
    sch = schema()
    assert sch["$defs"]["stateEnvelope"]["properties"]["schema"]["const"] == SCHEMA_ID
    runner = pathlib.Path(__file__).with_name("data") / "asl-model-arch-state-v1.schema.json"
    packaged = resources.files("ptojax.interop").joinpath("data/asl-model-arch-state-v1.schema.json")
    assert packaged.read_bytes() == runner.read_bytes()
    assert sch == json.loads(runner.read_text(encoding="utf-8"))
    if jsonschema is not None:
        jsonschema.Draft202012Validator.check_schema(sch)


@pytest.mark.parametrize("name", STATE_NAMES)
def test_envelope_is_schema_valid_json(envelopes, name):
    d = envelopes[name]
    check_schema(d)
    assert json.loads(json.dumps(d, allow_nan=False)) == d


@pytest.mark.parametrize("name", STATE_NAMES)
def test_round_trip_is_lossless(states, envelopes, name):
    s = states[name]
    d = json.loads(json.dumps(envelopes[name]))
    assert_same_state(s, from_arch_state(d, pj.state.config_of(s)))
    assert_same_state(s, from_arch_state(d))          # sizes from extensions.ptojax
    assert to_arch_state(from_arch_state(d)) == envelopes[name]


# ----------------------------------------------------------------- the mapping


def test_scalar_registers_memory_and_pc(states, envelopes):
    d = envelopes["ordinary_load_store"]["state"]
    s = states["ordinary_load_store"]
    regs = d["scalar"]["registers"]
    assert list(regs)[:24] == list(tables.GPR_NAMES)
    assert regs["x2"] == 0x100 and regs["x3"] == 12 and regs["a3"] == 0x200 and regs["zero"] == 0
    assert regs["TILE_CAPACITY"] == tables.TILE_CAPACITY_RESET
    assert d["scalar"]["pc"] == d["scalar"]["tpc"] == int(np.asarray(s.pc)) == 4 * 11
    assert d["pe_id"] == 0
    assert d["scalar"]["extensions"]["ptojax"]["gpr"][2][tables.gpr_index("s0")] == 0x2222
    gm = np.asarray(s.gm)
    assert d["memory"]["regions"] == [{"base": 0, "size": 4096, "permissions": "rw", "name": "GM",
                                       "extensions": {}}]
    assert d["memory"]["cells"] == {f"0x{a:x}": int(gm[a]) for a in np.flatnonzero(gm)}
    assert d["memory"]["cells"]["0x200"] == 1 and d["memory"]["cells"]["0x210"] == 4
    # another PE's file as the scalar view
    d2 = to_arch_state(s, pe=2)["state"]
    assert d2["pe_id"] == 2 and d2["scalar"]["registers"]["s0"] == 0x2222
    assert_same_state(s, from_arch_state(to_arch_state(s, pe=2)))


def test_numeric_flags_travel_in_scalar_flags(states, envelopes):
    # CORE_STATE[36:32] by name in state.scalar.flags (the schema's flags object)
    assert envelopes["reset_tiny"]["state"]["scalar"]["flags"] == {
        "NV": False, "DZ": False, "OF": False, "UF": False, "NX": False}
    assert envelopes["stale"]["state"]["scalar"]["flags"] == {
        "NV": True, "DZ": False, "OF": True, "UF": False, "NX": True}
    d = copy.deepcopy(envelopes["reset_tiny"])
    d["state"]["scalar"]["flags"] = {"UF": 1}            # absent names are clear
    assert int(np.asarray(from_arch_state(d).numeric_flags)) == tables.flag_bits(["UF"])


def test_local_tile_registers(envelopes):
    regs = envelopes["cube_load_store"]["state"]["tile"]["registers"]
    assert list(regs) == ["M#1"]
    m1 = regs["M#1"]
    assert m1["descriptor"] == {
        "dtype": "FP16", "layout": "CUBE_M16", "shape": [16, 4], "valid_shape": [2, 3],
        "strides": [],
        "extensions": {"ptojax": {"location": "Matrix", "capacity_bytes": 128,
                                  "allocation_mask": 0b1000, "cube_k_repeat": 1,
                                  "cube_n_repeat": 1, "cube_cell_count": 1,
                                  "cube_storage_bytes": 128, "pool_base": 0}}}
    assert len(m1["data"]) == len(m1["defined"]) == 64 and all(m1["defined"])
    assert [m1["data"][i] for i in (0, 1, 2, 4, 5, 6)] == [0x3C00, 0x4000, 0x4200, 0x4400, 0x4500, 0x4600]
    assert m1["data"][3] == 0x7BFF and m1["generation"] == 0
    assert m1["extensions"]["ptojax"] == {"defined_valid_elements": 6, "words_tail": [],
                                          "defined_tail": []}
    t1 = envelopes["ordinary_load_store"]["state"]["tile"]["registers"]["T#1"]
    assert t1["descriptor"]["layout"] == "RowMajor" and t1["descriptor"]["strides"] == [2, 1]
    assert t1["descriptor"]["shape"] == [16, 2] and t1["data"][:4] == [1, 2, 3, 4]
    assert t1["descriptor"]["extensions"]["ptojax"]["allocation_mask"] == 0b1111


def test_stale_payload_and_free_slots_travel_in_extensions(envelopes):
    tile = envelopes["stale"]["state"]["tile"]
    free = tile["extensions"]["ptojax"]["free_slots"]
    assert free == {"T#2": {"fields": {"layout": tables.TILE_LAYOUT_CODE["CUBE_N8"], "rows": 9},
                            "words": [], "defined": []}}
    ext = tile["registers"]["M#1"]["extensions"]["ptojax"]
    assert ext["words_tail"] == [[100, (1 << 64) - 1]] and ext["defined_tail"] == [200]
    assert envelopes["stale"]["state"]["scalar"]["registers"]["TILE_CAPACITY"] == 4096


def test_free_slot_payload_is_rejected(envelopes):
    """A free slot owns no pool Words in ptojax's State: stale Words given for one
    are refused, with where they were."""
    d = copy.deepcopy(envelopes["stale"])
    d["state"]["tile"]["extensions"]["ptojax"]["free_slots"]["T#2"]["words"] = [[5, 0xDEADBEEF]]
    with pytest.raises(ValueError, match="free slot T#2 of PE 0.*owns no storage"):
        from_arch_state(d)


def test_local_files_of_every_pe(states):
    """state.tile is the chosen PE's file; the other three travel in local_files."""
    s = states["multi_pe"]
    envs = [to_arch_state(s, pe=p) for p in range(4)]
    regs = [sorted(d["state"]["tile"]["registers"]) for d in envs]
    assert regs == [["M#1"], [], ["T#1"], []]
    t1 = envs[2]["state"]["tile"]["registers"]["T#1"]
    assert t1["data"][:4] == [9, 8, 7, 6]
    assert t1["descriptor"]["extensions"]["ptojax"]["allocation_mask"] == 0b1111
    assert envs[3]["state"]["tile"]["extensions"]["ptojax"]["free_slots"] == {
        "T#1": {"fields": {"cols": 4}, "words": [], "defined": []}}
    for p, d in enumerate(envs):
        check_schema(d)
        lf = d["state"]["tile"]["extensions"]["ptojax"]["local_files"]
        assert len(lf) == 4 and lf[p] is None
        for q in range(4):
            if q != p:      # PE q's file is the same object in every view
                mine = envs[q]["state"]["tile"]
                assert lf[q] == {"registers": mine["registers"],
                                 "free_slots": mine["extensions"]["ptojax"]["free_slots"]}
        assert_same_state(s, from_arch_state(json.loads(json.dumps(d))))
        assert to_arch_state(from_arch_state(d), pe=p) == d


def test_shared_tiles(states, envelopes):
    s = states["shared"]
    sh = envelopes["shared"]["state"]["shared"]
    assert list(sh["tiles"]) == ["S5", "S200", "S0"]          # record order
    assert sh["generations"] == {} and sh["extensions"] == {"ptojax": {"free_records": []}}
    words = np.asarray(s.shared.words)
    s5 = sh["tiles"]["S5"]
    assert s5["descriptor"] == {"dtype": "FP16", "layout": "RowMajor", "shape": [8, 16],
                                "valid_shape": [8, 16], "strides": [16, 1],
                                "extensions": {"ptojax": {"capacity_bytes": 256}}}
    assert s5["allocation_mask"] == 0b1111 and s5["generation"] == 0
    assert s5["data"] == [int(x) for x in words[0, :128]] and all(s5["defined"])
    assert s5["extensions"]["ptojax"] == {"record": 0, "initialized_mask": 0b1111,
                                          "published": True, "contents_defined": True,
                                          "words_tail": [], "defined_tail": []}
    s200 = sh["tiles"]["S200"]
    assert s200["descriptor"]["shape"] == [4, 8] and s200["descriptor"]["valid_shape"] == [3, 6]
    assert s200["data"] == [int(x) for x in words[2, :32]]
    # the stored bits: quarters of 8 U32 elements, PE0's and PE2's inside valid 3x6
    assert [i for i, b in enumerate(s200["defined"]) if b] == [0, 1, 2, 3, 4, 5, 16, 17, 18, 19, 20, 21]
    assert s200["extensions"]["ptojax"] == {"record": 2, "initialized_mask": 0b1010,
                                            "published": False, "contents_defined": False,
                                            "words_tail": [[40, 0x1234]], "defined_tail": [41]}
    s0 = sh["tiles"]["S0"]
    assert s0["descriptor"]["dtype"] == "U4X2" and s0["allocation_mask"] == 0b0011
    assert [i for i, b in enumerate(s0["defined"]) if b] == list(range(48, 64))
    # the envelope's view agrees with pj.read_shared
    for sid, rec in ((5, s5), (200, s200), (0, s0)):
        v = pj.read_shared(s, sid)
        assert rec["defined"] == v.defined.tolist()
        # `data` is the stored Words; the view shows a 4-bit record's as its packed carriers
        if v.elements_per_word == 1:
            assert rec["data"] == [int(x) for x in v.words]
        assert rec["allocation_mask"] == v.allocation_mask
    stale = envelopes["shared_stale"]["state"]["shared"]["extensions"]["ptojax"]["free_records"]
    assert stale == [{"record": 5, "fields": {"published": True,
                                              "dtype": tables.DTYPE_BY_NAME["FP32"].code, "rows": 3},
                      "words": [[2, 7]], "defined": []}]


def test_shared_records_without_record_index_take_the_lowest_free_records(envelopes):
    d = copy.deepcopy(envelopes["shared"])
    tiles = d["state"]["shared"]["tiles"]
    del tiles["S200"]["extensions"]["ptojax"]["record"]
    del tiles["S0"]["extensions"]["ptojax"]["record"]
    s = from_arch_state(d)
    assert np.asarray(s.shared.sid).tolist() == [5, 0, 200, -1, -1, -1, -1, -1]
    assert pj.read_shared(s, 200).words.tolist() == tiles["S200"]["data"]
    check_schema(d)


def test_format_1_envelopes_still_import(states, envelopes):
    """Before the PE axis: one Local file (PE pe_id's), no Shared records."""
    d = copy.deepcopy(envelopes["cube_load_store"])
    top = d["state"]["extensions"]["ptojax"]
    top["format"] = 1
    del top["shared_slots"], top["shared_words"]
    del d["state"]["tile"]["extensions"]["ptojax"]["local_files"]
    d["state"]["shared"]["extensions"] = {}
    s = from_arch_state(d, SMALL)
    assert_same_state(states["cube_load_store"], s)
    s = from_arch_state(d)                                     # default Shared sizes
    assert pj.state.config_of(s).shared_slots == MachineConfig().shared_slots


def test_fault(envelopes):
    f = envelopes["fault_abandon"]["state"]["fault"]
    assert f["pending"] and f["code"] == "Fault_DataAlignment" and f["address"] == 0x101
    assert f["kind"] == "memory" and f["recoverable"]
    assert f["extensions"]["ptojax"]["trap_number"] == 34
    assert not envelopes["fault_abandon"]["state"]["block"]["active"]
    none = envelopes["cube_load_store"]["state"]["fault"]
    assert not none["pending"] and none["code"] == "Fault_None" and none["address"] is None
    held = envelopes["fault_hold"]["state"]
    assert held["fault"]["pending"] and held["block"]["active"] and held["block"]["start_pc"] == 0


def test_open_block(states, envelopes):
    b = envelopes["open_block"]["state"]["block"]
    start = 4 * (7 + 7)                       # after the CUBE load and store programs
    assert b["active"] and b["start_pc"] == start and b["block_id"] is None
    a = b["attributes"]
    assert a["operation"] == "TLOAD" and a["engine"] == "TLSU" and a["dtype"] == "FP16"
    assert a["B.DATR"]["layout"] == "ND2N8" and a["B.DATR"]["dtype"] == "DTYPE_NONE"
    assert a["B.DATR"]["pad"] == "Zero"
    assert a["B.DIM"] == {"LB0": 4, "LB1": 2}
    assert a["B.IOR"] == {"dst": "zero", "src0": "a0", "src1": "a1", "src2": "zero"}
    assert a["B.IOT"] == [{"mask": "1111", "last": False, "dst": "N<2>", "src": []}]
    assert not a["iot_closed"] and "B.IOS" not in a
    raw = b["extensions"]["ptojax"]
    assert set(raw) == set(states["open_block"].block.keys()) and raw["pc"] == start
    assert not envelopes["cube_load_store"]["state"]["block"]["active"]
    assert envelopes["cube_load_store"]["state"]["block"]["attributes"] == {}


def test_envelope_kind_and_metadata(states):
    s = states["reset_tiny"]
    d = to_arch_state(s, TINY.replace(profile="ieee"), kind="initial_state")
    assert d["schema"] == SCHEMA_ID and d["kind"] == "initial_state"
    assert d["metadata"]["machine_config"]["profile"] == "ieee"
    assert d["artifact"]["model"] == "ptojax"
    check_schema(d)
    assert_same_state(s, from_arch_state(d, TINY))


def test_export_argument_errors(states):
    s = states["reset_tiny"]
    with pytest.raises(ValueError, match="does not match the State"):
        to_arch_state(s, SMALL)
    with pytest.raises(ValueError, match="does not match the State"):
        to_arch_state(s, TINY.replace(shared_slots=5))
    with pytest.raises(ValueError, match="kind"):
        to_arch_state(s, kind="snapshot")
    with pytest.raises(ValueError, match="pe"):
        to_arch_state(s, pe=4)
    batch = jax.tree_util.tree_map(lambda a: np.stack([a, a]), s)
    with pytest.raises(ValueError, match="batch"):
        to_arch_state(batch)


def test_foreign_envelope_without_ptojax_extensions():
    """What a runner snapshot carries is enough for everything but tiles/open blocks."""
    d = {"schema": SCHEMA_ID, "kind": "initial_state", "artifact": {}, "metadata": {},
         "state": {
             "scalar": {"registers": {"sp": 0x800, "a0": 7}, "pc": 0x40, "tpc": 0x40,
                        "flags": {}, "mode": "", "extensions": {}},
             "block": {"active": False, "block_id": None, "start_pc": None,
                       "instruction_count": 0, "attributes": {}, "extensions": {}},
             "tile": {"registers": {}, "extensions": {}},
             "shared": {"tiles": {}, "generations": {}, "extensions": {}},
             "memory": {"cells": {"0x0": 1, "0xff": 2}, "regions": [
                 {"base": 0, "size": 4096, "permissions": "rwx", "name": "", "extensions": {}}],
                 "extensions": {}},
             "fault": {"pending": False, "kind": "", "code": "Fault_None", "address": None,
                       "instruction": "", "message": "", "recoverable": False, "extensions": {}},
             "pe_id": 1, "thread_id": 0, "cycle": 12, "extensions": {}}}
    check_schema(d)
    s = from_arch_state(d, SMALL)
    want = pj.reset(SMALL)
    want = pj.write_memory(want, 0, b"\x01")
    want = pj.write_memory(want, 0xFF, b"\x02")
    want = pj.write_gpr(want, "sp", 0x800, pe=1)
    want = pj.write_gpr(want, "a0", 7, pe=1)
    want = poke(want, pc=0x40)
    assert_same_state(want, s)


# ----------------------------------------------------------------- hypothesis round trip


@st.composite
def machine_contents(draw):
    """Random GM/GPR/pc/fault contents plus a seed for random tiles and block."""
    n = TINY.gm_bytes
    gm_writes = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, 255)), max_size=40))
    dense = draw(st.booleans())
    gpr = draw(st.lists(st.integers(0, (1 << 64) - 1), min_size=96, max_size=96))
    pc = draw(st.integers(0, (1 << 64) - 1))
    fault = draw(st.integers(0, len(tables.FAULTS) - 1))
    fault_address = draw(st.integers(0, (1 << 64) - 1) | st.just(0))
    tile_capacity = draw(st.integers(0, (1 << 64) - 1))
    seed = draw(st.integers(0, 2 ** 32 - 1))
    return gm_writes, dense, gpr, pc, fault, fault_address, tile_capacity, seed


def random_words(rng, shape, p=0.3):
    return np.where(rng.random(shape) < p,
                    rng.integers(0, 1 << 63, shape, dtype=np.uint64) * np.uint64(2)
                    + rng.integers(0, 2, shape, dtype=np.uint64), 0).astype(np.uint64)


def random_shared(s, rng):
    """Random Shared records: held ones (distinct sids, any record positions) with
    random descriptors, masks, flags and Words; free ones canonical or stale."""
    R, WS = np.asarray(s.shared.words).shape
    codes = sorted(tables.DTYPE_BY_CODE)
    sh = {k: np.asarray(v).copy() for k, v in s.shared.items()}
    held = rng.random(R) < 0.6
    sh["sid"] = np.where(held, rng.choice(tables.SHARED_TILES, R, replace=False), -1).astype(np.int32)
    sh["dtype"] = np.where(held, rng.choice(codes, R), sh["dtype"]).astype(np.int32)
    sh["layout"] = np.where(held, rng.integers(0, len(tables.TILE_LAYOUTS), R),
                            sh["layout"]).astype(np.int32)
    for k in ("allocation_mask", "initialized_mask"):
        sh[k] = np.where(held, rng.integers(0, 16, R), 0).astype(np.int32)
    for k in ("published", "contents_defined"):
        sh[k] = held & (rng.random(R) < 0.5)
    for k in ("capacity", "rows", "cols", "valid_rows", "valid_cols"):
        sh[k] = np.where(held, rng.integers(0, 40, R), 0).astype(np.int32)
    sh["capacity"] = np.where(held & (rng.random(R) < 0.5), 64 << rng.integers(0, 13, R),
                              sh["capacity"]).astype(np.int32)
    sh["words"] = np.where(held[:, None], random_words(rng, (R, WS)), 0).astype(np.uint64)
    sh["defined"] = held[:, None] & (rng.random((R, WS)) < 0.4)
    stale = ~held & (rng.random(R) < 0.3)           # free records that are not canonical
    sh["rows"] = np.where(stale, rng.integers(-5, 40, R), sh["rows"]).astype(np.int32)
    sh["published"] = sh["published"] | (stale & (rng.random(R) < 0.5))
    sh["words"] = np.where(stale[:, None], random_words(rng, (R, WS), 0.05), sh["words"])
    sh["defined"] = sh["defined"] | (stale[:, None] & (rng.random((R, WS)) < 0.05))
    return poke_sub(s, "shared", **sh)


def random_tiles_and_block(s, rng):
    P, S = np.asarray(s.tiles.base).shape
    W = np.asarray(s.tiles.words).shape[-1]
    codes = sorted(tables.DTYPE_BY_CODE)
    t = {k: np.asarray(v).copy() for k, v in s.tiles.items()}
    t["allocated"] = rng.random((P, S)) < 0.5
    t["dtype"] = rng.choice(codes, (P, S)).astype(np.int32)
    t["layout"] = rng.integers(0, len(tables.TILE_LAYOUTS), (P, S)).astype(np.int32)
    t["location"] = rng.integers(0, len(tables.TILE_LOCATIONS), (P, S)).astype(np.int32)
    for k in ("capacity", "rows", "cols", "valid_rows", "valid_cols", "k_repeat", "n_repeat",
              "cell_count", "storage_bytes", "defined_valid"):
        t[k] = rng.integers(0, 40, (P, S)).astype(np.int32)
    t["mask"] = rng.integers(0, 16, (P, S)).astype(np.int32)
    # payload only in the allocated tiles' own pool Words, placed as allocation
    # places them (a free slot owns none)
    t["words"], t["defined"] = np.zeros_like(t["words"]), np.zeros_like(t["defined"])
    for p in range(P):
        for slot in np.flatnonzero(t["allocated"][p]):
            t["base"][p, slot] = pool_top(t["allocated"][p] & (np.arange(S) < slot),
                                          t["capacity"][p], t["dtype"][p], t["base"][p], W, np,
                                          t["words"].dtype == np.uint64)
            s64 = t["words"].dtype == np.uint64
            n = int(pool_extent(t["capacity"][p, slot], t["dtype"][p, slot], W, np, s64))
            slot_window(t, p, slot)[0][:n] = random_words(rng, (n,)).astype(t["words"].dtype)
            write_tile_words(t, p, slot, tile_words(t, p, slot)[0], rng.random(W) < 0.5)
    b = {k: np.asarray(v).copy() for k, v in s.block.items()}
    b["active"] = np.asarray(rng.random() < 0.5)
    b["pc"] = np.asarray(rng.integers(0, 1 << 63, dtype=np.uint64) * np.uint64(2))
    b["op"] = np.asarray(rng.integers(-1, len(tables.OPS) + 2), np.int32)
    b["dtype"] = np.asarray(rng.integers(0, 32), np.int32)
    for k in ("datr_present", "ior_present", "iot_closed", "zero_seen", "fpatr_present",
              "catr_present"):
        b[k] = np.asarray(rng.random() < 0.5)
    b["datr"] = rng.integers(0, 40, 7).astype(np.int32)
    b["lb"] = rng.integers(0, 1 << 16, 3).astype(np.int32)
    b["lb_present"] = rng.random(3) < 0.5
    b["ior"] = rng.integers(0, 30, 4).astype(np.int32)
    b["iot_count"] = np.asarray(rng.integers(0, MAX_IOT + 1), np.int32)
    b["iot"] = rng.integers(0, 70, (MAX_IOT, 8)).astype(np.int32)
    b["ios_count"] = np.asarray(rng.integers(0, MAX_IOS + 1), np.int32)
    b["ios"] = rng.integers(0, 300, (MAX_IOS, 3)).astype(np.int32)
    b["fpatr"] = np.asarray(rng.integers(0, 1 << 32), np.uint32)
    b["catr"] = np.asarray(rng.integers(0, 1 << 32), np.uint32)
    s = poke_sub(s, "tiles", **t)
    s = random_shared(s, rng)
    return poke_sub(s, "block", **b)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(machine_contents())
def test_hypothesis_round_trip(contents):
    gm_writes, dense, gpr, pc, fault, fault_address, tile_capacity, seed = contents
    rng = np.random.default_rng(seed)
    s = pj.reset(TINY)
    gm = (rng.integers(0, 256, TINY.gm_bytes) if dense else np.zeros(TINY.gm_bytes)).astype(np.uint8)
    for a, v in gm_writes:
        gm[a] = v
    s = poke(s, gm=gm, gpr=np.array(gpr, np.uint64).reshape(4, 24), pc=pc, fault=fault,
             fault_address=fault_address, tile_capacity=tile_capacity)
    if seed % 2:
        s = random_tiles_and_block(s, rng)
    d = to_arch_state(s, pe=seed % 4)
    check_schema(d)
    assert_same_state(s, from_arch_state(json.loads(json.dumps(d)), TINY))
    assert_same_state(s, from_arch_state(json.loads(json.dumps(to_arch_state(s, pe=(seed >> 2) % 4)))))


# ----------------------------------------------------------------- malformed input


def _set(path, value):
    def f(d):
        obj = d
        for k in path[:-1]:
            obj = obj[k]
        obj[path[-1]] = value
    return f


def _del(path):
    def f(d):
        obj = d
        for k in path[:-1]:
            obj = obj[k]
        del obj[path[-1]]
    return f


def _rename_tile(old, new):
    def f(d):
        regs = d["state"]["tile"]["registers"]
        regs[new] = regs.pop(old)
    return f


M1 = ("state", "tile", "registers", "M#1")
BLOCK = ("state", "block")
BAD = {
    "wrong schema id": (_set(("schema",), "pto.asl-model.arch-state.v2"), "unsupported schema"),
    "wrong kind": (_set(("kind",), "execution_result"), "unsupported kind"),
    "missing state": (_del(("state",)), "missing required field.*state"),
    "extra envelope key": (_set(("extra",), 1), "unexpected field.*extra"),
    "missing scalar": (_del(("state", "scalar")), "missing required field.*scalar"),
    "missing tpc": (_del(("state", "scalar", "tpc")), "missing required field.*tpc"),
    "pc not an int": (_set(("state", "scalar", "tpc"), "0x10"), "tpc: must be an integer"),
    "pc past 64 bits": (_set(("state", "scalar", "tpc"), 1 << 64), "out of range"),
    "bool register": (_set(("state", "scalar", "registers", "a0"), True), "must be an integer"),
    "unknown register": (_set(("state", "scalar", "registers", "x99"), 1), "unknown register"),
    "unknown flag": (_set(("state", "scalar", "flags", "ZF"), True), "unknown flag"),
    "flag not 0/1": (_set(("state", "scalar", "flags", "NX"), 2), "must be a boolean"),
    "negative register": (_set(("state", "scalar", "registers", "a0"), -1), "out of range"),
    "register vs extension": (_set(("state", "scalar", "registers", "a0"), 5), "disagrees"),
    "gpr extension size": (_set(("state", "scalar", "extensions", "ptojax", "gpr"), [[0] * 24] * 3),
                           "must have 4 entries"),
    "pe_id": (_set(("state", "pe_id"), 4), "pe_id: 4 out of range"),
    "cell address spelling": (_set(("state", "memory", "cells", "0x0A"), 1), "lowercase hex"),
    "cell past GM": (_set(("state", "memory", "cells", "0x1000"), 1), "does not fit cfg.gm_bytes"),
    "cell not a byte": (_set(("state", "memory", "cells", "0x10"), 256), "out of range 0..255"),
    "region past GM": (_set(("state", "memory", "regions", 0, "size"), 8192), "does not fit"),
    "region permissions": (_set(("state", "memory", "regions", 0, "permissions"), "rwz"), "rwx"),
    "unknown fault": (_set(("state", "fault", "code"), "Fault_Bogus"), "unknown fault"),
    "pending vs code": (_set(("state", "fault", "pending"), True), "disagrees with code"),
    "tile name": (_rename_tile("M#1", "M#17"), "tile register name"),
    "tile past hand_slots": (_rename_tile("M#1", "M#9"), "does not fit cfg.hand_slots"),
    "unknown dtype": (_set(M1 + ("descriptor", "dtype"), "FP12"), "unknown DataType"),
    "unknown layout": (_set(M1 + ("descriptor", "layout"), "Diagonal"), "unknown tile layout"),
    "shape rank": (_set(M1 + ("descriptor", "shape"), [16, 4, 1]), "must have 2 entries"),
    "strides": (_set(M1 + ("descriptor", "strides"), [4, 1]), "slot order"),
    "missing descriptor key": (_del(M1 + ("descriptor", "valid_shape")), "valid_shape"),
    "descriptor extension": (_set(M1 + ("descriptor", "extensions"), {}), "needs a 'ptojax' entry"),
    "location": (_set(M1 + ("descriptor", "extensions", "ptojax", "location"), "L1"),
                 "unknown tile location"),
    "mask width": (_set(M1 + ("descriptor", "extensions", "ptojax", "allocation_mask"), 16),
                   "out of range 0..15"),
    "defined length": (_set(M1 + ("defined",), [True]), "has 1 entries for 64"),
    "data not uint64": (_set(M1 + ("data", 0), 1 << 64), "out of range"),
    "tail offset": (_set(M1 + ("extensions", "ptojax", "words_tail"), [[1 << 20, 1]]),
                    "does not fit cfg.tile_words"),
    "value extension": (_del(M1 + ("extensions", "ptojax", "defined_valid_elements")),
                        "defined_valid_elements"),
    "block without header": (_set(BLOCK + ("extensions",), {}), "open block needs"),
    "block header key": (_del(BLOCK + ("extensions", "ptojax", "iot")), "missing required field.*iot"),
    "block header shape": (_set(BLOCK + ("extensions", "ptojax", "lb"), [1, 2]), r"shape \[3\]"),
    "block header bool": (_set(BLOCK + ("extensions", "ptojax", "zero_seen"), 0), "must be a boolean"),
    "block start_pc": (_set(BLOCK + ("start_pc",), 4), "disagrees with the header"),
    "block active": (_set(BLOCK + ("active",), False), "disagrees with extensions"),
    "shared tile fields": (_set(("state", "shared", "tiles", "S1"), {}), "missing required field"),
    "extension format": (_set(("state", "extensions", "ptojax", "format"), 3), "format"),
    "extension format bool": (_set(("state", "extensions", "ptojax", "format"), True), "format"),
    "extension sizes": (_del(("state", "extensions", "ptojax", "shared_slots")),
                        "missing required field.*shared_slots"),
    "local_files length": (_set(("state", "tile", "extensions", "ptojax", "local_files"), [None] * 3),
                           "must have 4 entries"),
    "local_files own PE": (_set(("state", "tile", "extensions", "ptojax", "local_files", 0),
                                {"registers": {}, "free_slots": {}}), "must be null"),
    "local_files entry": (_set(("state", "tile", "extensions", "ptojax", "local_files", 1), {}),
                          r"local_files\[1\]: missing required field"),
    "local_files tile": (_set(("state", "tile", "extensions", "ptojax", "local_files", 2,
                               "registers", "M#9"), {}), r"local_files\[2\].registers\['M#9'\]"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_malformed_envelope_raises_value_error(envelopes, case):
    mutate, match = BAD[case]
    d = copy.deepcopy(envelopes["open_block"])
    mutate(d)
    with pytest.raises(ValueError, match=match):
        from_arch_state(d, SMALL)


def _move_tile(old, new):
    def f(d):
        tiles = d["state"]["shared"]["tiles"]
        tiles[new] = tiles.pop(old)
    return f


def _more_shared_tiles(n, free_record=None):
    def f(d):
        if free_record is not None:      # a stale free record claims this record
            d["state"]["shared"]["extensions"]["ptojax"]["free_records"] = [
                {"record": free_record, "fields": {"rows": 1}, "words": []}]
        tiles = d["state"]["shared"]["tiles"]
        for i in range(n):
            t = copy.deepcopy(tiles["S5"])
            del t["extensions"]["ptojax"]["record"]
            tiles[f"S{10 + i}"] = t
    return f


S5 = ("state", "shared", "tiles", "S5")
S5X = S5 + ("extensions", "ptojax")
FREE_RECORDS = ("state", "shared", "extensions", "ptojax", "free_records")
BAD_SHARED = {
    "sid past 255": (_move_tile("S5", "S256"), "not S0..S255"),
    "sid spelling": (_move_tile("S5", "S05"), "not S0..S255"),
    "not a sid": (_move_tile("S5", "T#1"), "Shared tile name"),
    "more tiles than records": (_more_shared_tiles(6),
                                "9 Shared tiles do not fit cfg.shared_slots=8"),
    "no record left": (_more_shared_tiles(5, free_record=6),
                       "no record of cfg.shared_slots=8 left for S14"),
    "allocation mask": (_set(S5 + ("allocation_mask",), 16), "allocation_mask: 16 out of range 0..15"),
    "initialized mask": (_set(S5X + ("initialized_mask",), -1), "initialized_mask: -1 out of range"),
    "published not bool": (_set(S5X + ("published",), 1), "published: must be a boolean"),
    "record past slots": (_set(S5X + ("record",), 8), "record 8 does not fit cfg.shared_slots=8"),
    "record twice": (_set(S5X + ("record",), 2), "record 2 is also held by"),
    "free record twice": (_set(FREE_RECORDS, [{"record": 3, "fields": {}, "words": []}]),
                          "record 3 is also held by S0"),
    "free record sid": (_set(FREE_RECORDS, [{"record": 7, "fields": {"sid": 4}, "words": []}]),
                        "a free record holds sid -1"),
    "free record word": (_set(FREE_RECORDS, [{"record": 7, "fields": {}, "words": [[1024, 1]]}]),
                         "does not fit cfg.shared_words=1024"),
    "defined tail offset": (_set(S5X + ("defined_tail",), [1024]), "does not fit cfg.shared_words"),
    "defined tail below data": (_set(S5X + ("defined_tail",), [3]), "defined_tail"),
    "free record defined": (_set(FREE_RECORDS, [{"record": 7, "fields": {}, "words": [],
                                                 "defined": [1024]}]),
                            "does not fit cfg.shared_words=1024"),
    "data too long": (_set(S5 + ("data",), [0] * 1025), "do not fit cfg.shared_words=1024"),
    "strides": (_set(S5 + ("descriptor", "strides"), [1, 8]), "Shared payload order"),
    "missing capacity": (_set(S5 + ("descriptor", "extensions"), {}), "capacity"),
    "missing tile extension": (_set(S5 + ("extensions",), {}), "initialized mask"),
    "tail offset": (_set(S5X + ("words_tail",), [[5000, 1]]), "does not fit cfg.shared_words"),
    "shared dtype": (_set(S5 + ("descriptor", "dtype"), "FP12"), "unknown DataType"),
    "generation": (_set(("state", "shared", "generations", "S5"), -1), "out of range"),
}


@pytest.mark.parametrize("case", sorted(BAD_SHARED))
def test_malformed_shared_tiles_raise_value_error(envelopes, case):
    mutate, match = BAD_SHARED[case]
    d = copy.deepcopy(envelopes["shared"])
    mutate(d)
    with pytest.raises(ValueError, match=match):
        from_arch_state(d, SMALL)


def test_export_rejects_malformed_shared_records(states):
    s = states["shared"]
    sid = np.asarray(s.shared.sid).copy()
    sid[2] = 5
    with pytest.raises(ValueError, match="sid 5 is also held by record 0"):
        to_arch_state(poke_sub(s, "shared", sid=sid))
    sid[2] = 256
    with pytest.raises(ValueError, match="sid 256 is neither"):
        to_arch_state(poke_sub(s, "shared", sid=sid))
    mask = np.asarray(s.shared.initialized_mask).copy()
    mask[0] = 17
    with pytest.raises(ValueError, match="not a 4-bit mask"):
        to_arch_state(poke_sub(s, "shared", initialized_mask=mask))
    dt = np.asarray(s.shared.dtype).copy()
    dt[0] = 15
    with pytest.raises(ValueError, match="dtype code 15"):
        to_arch_state(poke_sub(s, "shared", dtype=dt))


def test_not_an_object_and_sizes_that_do_not_fit(envelopes):
    with pytest.raises(ValueError, match="must be an object"):
        from_arch_state([], SMALL)
    d = envelopes["cube_load_store"]
    with pytest.raises(ValueError, match="do not fit cfg.tile_words=32"):
        from_arch_state(d, MachineConfig(tile_words=32, hand_slots=4))
    with pytest.raises(ValueError, match="does not fit cfg.gm_bytes"):
        from_arch_state(d, MachineConfig(gm_bytes=1024, tile_words=1024, hand_slots=4))
    # a larger machine holds the same content
    big = from_arch_state(d, MachineConfig(gm_bytes=8192, tile_words=2048, hand_slots=8))
    v = pj.read_tile(big, 32)
    assert v.layout == "CUBE_M16" and v.valid_rows == 2 and int(v.words[0]) == 0x3C00
    d = envelopes["shared"]
    with pytest.raises(ValueError, match="do not fit cfg.shared_words=64"):
        from_arch_state(d, SMALL.replace(shared_words=64))
    with pytest.raises(ValueError, match="record 3 does not fit cfg.shared_slots=3"):
        from_arch_state(d, SMALL.replace(shared_slots=3))
    big = from_arch_state(d, SMALL.replace(shared_slots=12, shared_words=2048))
    assert np.asarray(big.shared.sid).tolist() == [5, -1, 200, 0] + [-1] * 8
    assert pj.read_shared(big, 200).words.tolist() == d["state"]["shared"]["tiles"]["S200"]["data"]
    with pytest.raises(TypeError):
        from_arch_state(d, "small")
