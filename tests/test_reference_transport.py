"""Reference executor: stream rules, header commands, CUBE and ordinary TLOAD/TSTORE.

Golden vectors E1-E6, E9 of state-and-transport.md built as real instruction
words, and one test per check of the ordered lists C.5-C.8. Runs the
reference model alone.
"""

import numpy as np
import pytest

import ptojax as pj
from ptojax import tables
from ptojax.isa.encode import (BSTOP, FPATR0, catr, datr, dim, ior, ios, iot_dst, iot_src, iot_src2,
                               iot_src_dst)
from ptojax.reference import run
from ptojax.state import state_differences
from _bundles import (X2, X3, allocated, bstart, charge, cube_load, cube_store, gm, poke,
                      poke_tiles, run_ok, same_except, small, tile, with_regs, write_gpr,
                      write_memory)

# ----------------------------------------------------------------- encoders (ptojax.isa.encode)


def test_encoders_match_golden_words():
    assert bstart("TLOAD", "FP16") == 0x20011181
    assert datr(22, 31, 1) == 0x09F01B23
    assert dim(0, 3) == 0x00300043 and dim(1, 2) == 0x00201043
    assert iot_dst(2, 1, 1) == 0x0008E313
    assert bstart("TSTORE", "FP16") == 0x20111181
    assert datr(25, 31, 3) == 0x19F01CA3
    assert iot_src(0, pemode=4) == 0x00085813
    assert bstart("TLOAD", "U32") == 0xC8011181 and iot_dst(0, 1, 7) == 0x0008EE13
    assert ior(2, 3) == 0x00310013
    assert dim(0, 7, reg=23) == 0x007B8043
    assert ios(9, 7) == 0x00901E13


# ----------------------------------------------------------------- state helpers


def u16s(*vals):
    return b"".join((v & 0xFFFF).to_bytes(2, "little") for v in vals)


def put_u16(s, addr, *vals):
    return write_memory(s, addr, u16s(*vals))


def u16_at(s, addr):
    return int.from_bytes(gm(s, addr, 2), "little")


def ok(s, words, **kw):
    return run_ok(run, s, words, **kw)      # this module's run: tests/_scenarios.py re-binds it


def expect_fault(s, header, fault, addr=None, completing=BSTOP):
    """Open the block with `header`, then run the completing word alone with
    on_fault="hold": the fault fires with its address, PC stays on the word,
    and nothing but the fault register changes. Returns the opened state."""
    s1 = ok(s, header)
    r = run(s1, [completing], on_fault="hold")
    assert r.fault == fault
    assert r.executed == 0
    word_pc = int(np.asarray(s1.pc))
    assert int(np.asarray(r.state.fault_address)) == (word_pc if addr is None else addr)
    assert r.fault_address == addr
    assert same_except(s1, r.state, "fault", "fault_address")
    # the default "abandon" discards the open block but changes nothing else
    ra = run(s1, [completing])
    assert ra.fault == fault and not bool(np.asarray(ra.state.block.active))
    assert not [k for k in state_differences(s1, ra.state)
                if k.startswith((".gm", ".gpr", ".tiles", ".pc"))]
    return s1


def cube_source(s, layout_code, dt, vr, vc, values, pemode=1, size=1, hand=0):
    """A CUBE tile of hand `hand` loaded from GM 0x200 (then GM is zeroed again)."""
    d = tables.dtype(dt)
    raw = b"".join((v & ((1 << d.bits) - 1)).to_bytes(d.element_bytes, "little")
                   for row in values for v in row)
    s = write_memory(s, 0x200, raw)
    s = with_regs(s, x2=0x200, x3=vc * d.element_bytes)
    s = ok(s, cube_load(layout_code, dt, vr, vc, hand=hand, size=size, pemode=pemode,
                        regs=True))
    s = write_memory(s, 0x200, bytes(len(raw)))
    return with_regs(s, x2=0, x3=0)


# ----------------------------------------------------------------- E1


def test_e1_cube_tload_m16_fp16_max_padding():
    s = put_u16(pj.reset(), 0, 1, 2, 3, 4, 5, 6)
    words = [0x20011181, 0x09F01B23, 0x00300043, 0x00201043, 0x0008E313, 0x00000001]
    r = run(s, words)
    assert r.ok and r.executed == 6 and r.fault_address is None
    st = r.state
    assert allocated(st) == [32] and charge(st) == 128
    t = tile(st, 32)
    assert tables.TILE_LAYOUTS[t["layout"]] == "CUBE_M16"
    assert tables.TILE_LOCATIONS[t["location"]] == "Matrix"
    assert (t["rows"], t["cols"], t["valid_rows"], t["valid_cols"]) == (16, 4, 2, 3)
    assert (t["k_repeat"], t["n_repeat"], t["cell_count"], t["storage_bytes"]) == (1, 1, 1, 128)
    assert t["mask"] == 0b1000 and t["capacity"] == 128 and t["dtype"] == 4
    assert [int(t["words"][i]) for i in (0, 1, 2, 4, 5, 6)] == [1, 2, 3, 4, 5, 6]
    for i in range(64):
        if i not in (0, 1, 2, 4, 5, 6):
            assert int(t["words"][i]) == 0x7BFF and t["defined"][i]
    assert t["defined"][:64].all() and not t["defined"][64:].any()
    assert t["defined_valid"] == 6
    assert int(np.asarray(st.pc)) == 24 and not bool(np.asarray(st.block.active))


# ----------------------------------------------------------------- E2


def e2_state():
    s = small()
    for r in range(13):
        s = put_u16(s, 0x400 + 2 * 21 * r, *[r * 32 + c + 1 for c in range(19)])
    s = with_regs(s, x2=0x400, x3=42)
    return ok(s, cube_load(23, "FP16", 13, 19, size=4, regs=True))


def test_e2_cube_tload_n8_multi_cell():
    t = tile(e2_state(), 0)
    assert (t["rows"], t["cols"], t["k_repeat"], t["n_repeat"], t["cell_count"],
            t["storage_bytes"]) == (16, 24, 2, 3, 6, 768)
    w = [int(x) for x in t["words"]]
    assert (w[0], w[63], w[64], w[340]) == (1, 232, 257, 403)
    assert w[69] == 0 and w[280] == 0 and not t["defined"][69] and not t["defined"][280]
    assert t["defined_valid"] == 247
    assert sum(t["defined"]) == 247


def test_e2_reverse_cube_tstore_n8():
    s = e2_state()
    s = write_memory(s, 0x800, u16s(*[0x5A5A] * 274))
    s = with_regs(s, x2=0x800, x3=42)
    s2 = ok(s, cube_store(26, "FP16", 13, 19, regs=True))
    assert u16_at(s2, 0x800) == 1 and u16_at(s2, 0x800 + 308) == 232
    assert u16_at(s2, 0x800 + 540) == 403
    assert u16_at(s2, 0x800 + 38) == 0x5A5A and u16_at(s2, 0x800 + 546) == 0x5A5A
    assert same_except(s, s2, "gm", "pc")


# ----------------------------------------------------------------- E3


def test_e3_m16_b4_interleave_load():
    s = write_memory(small(), 0x600, bytes([0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE]))
    s = with_regs(s, x2=0x600, x3=8)
    t = tile(ok(s, cube_load(22, "U4X2", 2, 16, regs=True)), 0)
    assert [int(x) for x in t["words"][:16]] == [0, 1, 2, 3, 8, 9, 10, 11,
                                                 4, 5, 6, 7, 12, 13, 14, 15]
    assert [int(x) for x in t["words"][16:32]] == [0] * 16
    assert t["defined_valid"] == 32


@pytest.mark.parametrize("layout,dt,vr,vc,size,poke,base,stride,idx,want", [
    (21, "FP32", 2, 2, 2, (0x100, (0x89ABCDEF).to_bytes(4, "little")), 0x100, 8, 0, 0x89ABCDEF),
    (22, "FP16", 2, 5, 2, (0x212, u16s(0xBEEF)), 0x200, 10, 68, 0xBEEF),
    (23, "E4M3", 2, 9, 2, (0x311, bytes([0x7E])), 0x300, 9, 129, 0x7E),
    (23, "U4X2", 2, 9, 2, (0x400, bytes([0xBA])), 0x400, 5, 0, 0xA),
])
def test_e3_width_round_trips(layout, dt, vr, vc, size, poke, base, stride, idx, want):
    s = write_memory(small(), *poke)
    s = with_regs(s, x2=base, x3=stride)
    s1 = ok(s, cube_load(layout, dt, vr, vc, size=size, regs=True))
    t = tile(s1, 0)
    assert int(t["words"][idx]) == want
    if dt == "U4X2":
        assert int(t["words"][32]) == 0xB
    # and back: TSTORE to a cleared GM reproduces the bytes
    s2 = write_memory(s1, poke[0], bytes(len(poke[1])))
    s2 = ok(s2, cube_store(layout + 3, dt, vr, vc, regs=True))
    assert gm(s2, poke[0], len(poke[1])) == poke[1]


def test_signed_loads_are_sign_extended_in_the_carrier():
    s = put_u16(small(), 0, 0x8001, 0x7FFF)
    t = tile(ok(s, cube_load(22, "S16", 1, 2)), 0)
    assert int(t["words"][0]) == 0xFFFFFFFFFFFF8001 and int(t["words"][1]) == 0x7FFF
    s = write_memory(small(), 0, bytes([0xF7, 0x80]))
    s = ok(s, cube_load(22, "S4X2", 1, 4))
    t = tile(s, 0)                                        # 4-bit values stay zero-extended
    assert [int(x) for x in t["words"][:4]] == [7, 0xF, 0, 8]
    # and storing writes only the low element bits back
    s2 = ok(write_memory(s, 0, bytes(2)), cube_store(25, "S4X2", 1, 4))
    assert gm(s2, 0, 2) == bytes([0xF7, 0x80])


# ----------------------------------------------------------------- E4


def test_e4_cube_tstore_m16_fp16():
    s = cube_source(pj.reset(), 22, "FP16", 2, 3, [[1, 2, 3], [4, 5, 6]], pemode=4)
    t0 = tile(s, 0)
    assert t0["mask"] == 0b0001 and [int(t0["words"][r * 4 + c]) for r in range(2)
                                     for c in range(3)] == [1, 2, 3, 4, 5, 6]
    words = [0x20111181, 0x19F01CA3, dim(0, 3), dim(1, 2), 0x00085813, BSTOP]
    s2 = ok(s, words)
    assert [u16_at(s2, a) for a in range(0, 12, 2)] == [1, 2, 3, 4, 5, 6]
    assert same_except(s, s2, "gm", "pc")


# ----------------------------------------------------------------- E5


def test_e5_fault_then_retry():
    s = put_u16(small(), 0, 1, 2, 3)
    s = with_regs(s, x2=1, x3=2)
    header = [bstart("TLOAD", "FP16"), datr(22, 31, 3), dim(0, 1), dim(1, 3), iot_dst(0),
              ior(X2, X3)]
    s1 = expect_fault(s, header, "Fault_DataAlignment", addr=1)
    r = run(s1, [BSTOP], on_fault="hold")
    assert charge(r.state) == 0 and allocated(r.state) == []
    assert bool(np.asarray(r.state.block.active))          # binding still hand-only
    assert np.asarray(r.state.block.iot)[0].tolist() == [1, 0, 1, 8, 0, 0, 0, 0]
    s2 = write_gpr(r.state, "x2", 0)
    r2 = run(s2, [BSTOP])
    assert r2.ok and int(np.asarray(r2.state.fault)) == 0
    assert allocated(r2.state) == [0] and charge(r2.state) == 128
    t = tile(r2.state, 0)
    assert [int(t["words"][i]) for i in (0, 4, 8)] == [1, 2, 3]
    assert not t["defined"][1] and int(t["words"][1]) == 0
    # re-running the whole block after an abandoned fault allocates exactly once
    s3 = write_gpr(run(s1, [BSTOP]).state, "x2", 0)
    s3 = write_memory(s3, 0, u16s(1, 2, 3))
    r3 = run(s3, header + [BSTOP])
    assert r3.ok and allocated(r3.state) == [0]


@pytest.mark.parametrize("base,stride,addr", [(4096, 2, 4096),
                                              (0, 0x8000000000000002, 0x8000000000000002),
                                              (4092, 2, 4096)])
def test_e5_cube_tload_access_faults(base, stride, addr):
    s = with_regs(small(), x2=base, x3=stride)
    header = [bstart("TLOAD", "FP16"), datr(22, 31, 3), dim(0, 1), dim(1, 3), iot_dst(0),
              ior(X2, X3)]
    expect_fault(s, header, "Fault_DataPage", addr=addr)


@pytest.mark.parametrize("base,stride,addr,witness", [
    (4096, 2, 4096, 0), (0, 0x8000000000000002, 0x8000000000000002, 0), (4092, 2, 4096, 4092)])
def test_e5_cube_tstore_access_faults(base, stride, addr, witness):
    s = cube_source(small(), 22, "FP16", 3, 1, [[1], [2], [3]], pemode=4)
    s = write_memory(s, witness, bytes([0xA5]))
    s = with_regs(s, x2=base, x3=stride)
    header = cube_store(25, "FP16", 3, 1, pemode=4, regs=True)[:-1]
    s1 = expect_fault(s, header, "Fault_DataPage", addr=addr)
    assert gm(s1, witness, 1) == bytes([0xA5])


# ----------------------------------------------------------------- E6


def test_e6_tsize_too_small():
    header = [bstart("TLOAD", "FP16"), datr(23, 31, 3), dim(0, 19), dim(1, 13),
              iot_dst(0, 1, 3)]
    expect_fault(small(), header, "Fault_TileAllocation")


@pytest.mark.parametrize("dt", ["FP64", "HiF4X2", "S64", "U64"])
def test_e6_dtype(dt):
    header = [bstart("TLOAD", dt), datr(22, 31, 3), dim(0, 1), dim(1, 1), iot_dst(0)]
    expect_fault(small(), header, "Fault_TileLegality")


@pytest.mark.parametrize("dims", [[dim(1, 1)], [dim(0, 0), dim(1, 1)], [dim(0, 1)],
                                  [dim(0, 1), dim(1, 0)], [dim(0, 1), dim(1, 1), dim(2, 1)]])
def test_e6_dims(dims):
    header = [bstart("TLOAD", "FP16"), datr(22, 31, 3)] + dims + [iot_dst(0)]
    expect_fault(small(), header, "Fault_TileLegality")


@pytest.mark.parametrize("op,layout_code", [("TSTORE", 21), ("TSTORE", 22), ("TSTORE", 23),
                                            ("TLOAD", 24), ("TLOAD", 25), ("TLOAD", 26)])
def test_e6_direction(op, layout_code):
    s = cube_source(small(), 22, "FP16", 1, 1, [[7]])
    binding = iot_dst(0) if op == "TLOAD" else iot_src(0)
    header = [bstart(op, "FP16"), datr(layout_code, 31, 3), dim(0, 1), dim(1, 1), binding]
    expect_fault(s, header, "Fault_TileLegality")


@pytest.mark.parametrize("attrs", [dict(dtype=4), dict(dtype=0), dict(cmode=1), dict(rmode=1),
                                   dict(sat=1), dict(canon=1)])
def test_e6_attributes(attrs):
    header = [bstart("TLOAD", "FP16"), datr(22, **{"pad": 3, **attrs}), dim(0, 1), dim(1, 1),
              iot_dst(0)]
    expect_fault(small(), header, "Fault_TileLegality")


@pytest.mark.parametrize("layout_code", [21, 22, 23, 24, 25, 26])
def test_e6_shared_binding(layout_code):
    header = [bstart("TLOAD", "FP16"), datr(layout_code, 31, 3), dim(0, 1), dim(1, 1),
              ios(7, pemode=4, size=1)]
    expect_fault(small(), header, "Fault_TileLegality")


@pytest.mark.parametrize("case", ["layout", "dtype", "shape", "location"])
def test_e6_tstore_descriptor(case):
    if case == "layout":
        s = cube_source(small(), 21, "FP16", 2, 3, [[1, 2, 3], [4, 5, 6]], pemode=4, size=2)
    elif case == "dtype":
        s = cube_source(small(), 22, "FP32", 2, 3, [[1, 2, 3], [4, 5, 6]], pemode=4, size=2)
    elif case == "shape":
        s = cube_source(small(), 22, "FP16", 2, 4, [[1, 2, 3, 4], [5, 6, 7, 8]], pemode=4)
    else:
        s = cube_source(small(), 22, "FP16", 2, 3, [[1, 2, 3], [4, 5, 6]], pemode=4)
        s = poke_tiles(s, "location", 0, tables.TILE_LOCATION_CODE["Any"])
    header = cube_store(25, "FP16", 2, 3, pemode=4)[:-1]
    s1 = expect_fault(s, header, "Fault_TileLegality")
    assert allocated(s1) == [0]


def test_e6_partial_mask():
    s = put_u16(small(), 0, 0x1234)
    st = ok(s, cube_load(22, "FP16", 1, 1, pemode=5))
    t = tile(st, 0)
    assert t["mask"] == 0b1100 and charge(st) == 256 and int(t["words"][0]) == 0x1234


def test_e6_zero_mask_wrong_direction_is_a_no_op():
    s = small()
    st = ok(s, [bstart("TLOAD", "FP16"), datr(25, 31, 3), iot_dst(0, pemode=0), BSTOP])
    assert same_except(s, st, "pc")


def test_e6_cube_stride_variants():
    s = put_u16(small(), 0x100, 1, 2)
    s = put_u16(s, 0x106, 3, 4)
    s = with_regs(s, x2=0x100, x3=6)
    t = tile(ok(s, cube_load(22, "FP16", 2, 2, regs=True)), 0)
    assert [int(t["words"][i]) for i in (0, 1, 4, 5)] == [1, 2, 3, 4]
    s = put_u16(small(), 0, 5, 6, 7, 8)
    t = tile(ok(s, cube_load(22, "FP16", 2, 2)), 0)          # dense stride 4 over LB0
    assert int(t["words"][4]) == 7
    s = put_u16(small(), 0, 9, 10)
    words = cube_load(22, "FP16", 2, 2)
    t = tile(ok(s, words[:-1] + [ior(0, 0), BSTOP]), 0)      # x0 stride: row 1 = row 0
    assert [int(t["words"][i]) for i in (0, 1, 4, 5)] == [9, 10, 9, 10]


@pytest.mark.parametrize("pad,word,is_defined", [(0, 0, True), (1, 0x7BFF, True),
                                                 (2, 0xFBFF, True), (3, 0, False)])
def test_e6_padding_n8(pad, word, is_defined):
    s = write_memory(small(), 0, bytes(range(1, 65)))       # stale payload check below
    s = ok(s, cube_load(23, "FP16", 8, 8, pad=0))             # fill slot 0 words, then reuse
    s = poke_tiles(poke_tiles(s, "allocated", 0, False), "mask", 0, 0)
    s = put_u16(s, 0x500, 1, 2, 3, 4, 5, 6)
    s = with_regs(s, x2=0x500, x3=6)
    t = tile(ok(s, cube_load(23, "FP16", 2, 3, pad=pad, regs=True)), 0)
    for i in (2, 24):
        assert int(t["words"][i]) == word and bool(t["defined"][i]) is is_defined
    assert t["defined_valid"] == 6


# ----------------------------------------------------------------- C.5 CUBE TLOAD checks


def c5_header(**over):
    parts = {"start": [bstart("TLOAD", "FP16")], "datr": [datr(22, 31, 3)],
             "dims": [dim(0, 2), dim(1, 2)], "iot": [iot_dst(0)], "ior": []}
    parts.update(over)
    return sum(parts.values(), [])


def test_c5_1_zero_mask_precedes_everything():
    s = small()
    header = [bstart("TLOAD", "FP64"), datr(22, 4, 3, cmode=1), dim(2, 5), iot_dst(0, pemode=0),
              ios(3, pemode=0), ior(5, 5, 5, 5)]
    st = ok(s, header + [BSTOP])
    assert same_except(s, st, "pc")


def test_c5_2_undecodable_selector():
    header = [bstart("TGEMV", "FP16"), datr(22, 31, 3), dim(0, 1), dim(1, 1), iot_dst(0)]
    expect_fault(small(), header, "Fault_IllegalInstruction")


@pytest.mark.parametrize("op", ["TMATMUL", "MGATHER.CAS", "TSTORE.SPART"])
def test_c5_3_operation_not_a_cube_transport(op):
    header = [bstart(op, "FP16"), datr(22, 31, 3), dim(0, 1), dim(1, 1), iot_dst(0)]
    expect_fault(small(), header, "Fault_TileLegality")


@pytest.mark.parametrize("over", [
    {"iot": [iot_dst(0, last=0), iot_dst(1)]},               # B.IOT count != 1
    {"iot": [iot_src_dst(5, 0)]},                            # a source field present
    {"iot": [iot_src(5)]},                                   # no destination
    {"iot": [iot_dst(0, last=0)]},                           # stream not terminated
    {"iot": []},                                             # no binding at all
    {"ior": [ior(X2, X3, src2=1)]},                          # RegSrc2 nonzero
    {"ior": [ior(X2, X3, dst=1)]},                           # RegDst nonzero
    {"iot": [iot_dst(0), ios(1, pemode=1)]},                 # a B.IOS
])
def test_c5_3_bindings(over):
    expect_fault(small(), c5_header(**over), "Fault_TileLegality")


def test_c5_3_fpatr_in_tlsu_block_faults_when_issued():
    s1 = ok(small(), c5_header())
    r = run(s1, [FPATR0], on_fault="hold")
    assert r.fault == "Fault_BundleControl" and same_except(s1, r.state, "fault", "fault_address")


@pytest.mark.parametrize("vr,vc,size,pemode", [(17, 1, 10, 1), (33, 1, 10, 1), (2, 9, 1, 1)])
def test_c5_6_shape_illegal_for_tsize(vr, vc, size, pemode):
    header = [bstart("TLOAD", "FP16"), datr(22 if vr != 33 else 21, 31, 3), dim(0, vc),
              dim(1, vr), iot_dst(0, size, pemode)]
    expect_fault(small(), header, "Fault_TileAllocation")


def test_c5_6_core_budget_exceeded():
    s = small()
    s = poke(s, tile_capacity=512)
    s = ok(s, cube_load(22, "FP16", 1, 1, size=1, pemode=5))    # 2 * 128 = 256
    header = [bstart("TLOAD", "FP16"), datr(22, 31, 3), dim(0, 1), dim(1, 1),
              iot_dst(1, 2, 1)]                                # + 256 = 512: fits
    ok(s, header + [BSTOP])
    header[-1] = iot_dst(1, 1, 6)                              # + 3*128 = 384 > 256 left
    expect_fault(s, header, "Fault_TileAllocation")


def test_c5_6_tsize_above_tile_capacity():
    s = small()
    s = poke(s, tile_capacity=128)
    header = [bstart("TLOAD", "FP16"), datr(22, 31, 3), dim(0, 1), dim(1, 1), iot_dst(0, 2)]
    expect_fault(s, header, "Fault_TileAllocation")


def test_c5_6_no_free_slot_in_hand():
    s = small()                       # 4 materialized slots per hand
    for _ in range(4):
        s = ok(s, cube_load(22, "FP16", 1, 1, hand=3))
    assert allocated(s) == [48, 49, 50, 51]
    header = cube_load(22, "FP16", 1, 1, hand=3)[:-1]
    expect_fault(s, header, "Fault_TileAllocation")
    assert allocated(ok(s, cube_load(22, "FP16", 1, 1, hand=2))) == [32, 48, 49, 50, 51]


def test_c5_6_model_payload_bound():
    # U8 N8 16x512 needs 64 cells = 8192 Words: legal in the ASL sizes, not in "small"
    header = [bstart("TLOAD", "U8"), datr(23, 31, 3), dim(0, 512), dim(1, 16), iot_dst(0, 7),
              ior(0, 0)]
    expect_fault(small(), header, "Fault_TileAllocation")
    assert ok(pj.reset(), header + [BSTOP]) is not None


@pytest.mark.parametrize("base,stride,fault,addr", [
    (1, 2, "Fault_DataAlignment", 1),                          # (0,0) misaligned
    (0, 3, "Fault_DataAlignment", 3),                          # (1,0) misaligned
    (4090, 4, "Fault_DataPage", 4096),                         # (1,1) = 4096 first failing
    (4094, 1, "Fault_DataPage", 4096),                         # (0,1) range before (1,0) alignment
    (4093, 3, "Fault_DataAlignment", 4093),                    # alignment before range
    ((1 << 64) - 2, 2, "Fault_DataPage", (1 << 64) - 2),      # no wrap in the range check
])
def test_c5_7_preflight_first_failure_row_major(base, stride, fault, addr):
    s = with_regs(small(), x2=base, x3=stride)
    expect_fault(s, c5_header(ior=[ior(X2, X3)]), fault, addr=addr)


def test_c5_8_load_publishes_defined_valid_region_and_keeps_stale_words():
    s = poke_tiles(poke_tiles(small(), "words", (0, 100), 0xDEAD), "defined", (0, 100), True)
    t = tile(ok(put_u16(s, 0, 1, 2, 3, 4), cube_load(22, "FP16", 2, 2)), 0)
    assert int(t["words"][100]) == 0xDEAD and not t["defined"][100]   # cleared, not zeroed
    assert t["defined_valid"] == 4 and sum(t["defined"]) == 4


# ----------------------------------------------------------------- C.6 CUBE TSTORE checks


def c6_state():
    return cube_source(small(), 22, "FP16", 2, 3, [[1, 2, 3], [4, 5, 6]], pemode=7)


def c6_header(**over):
    parts = {"start": [bstart("TSTORE", "FP16")], "datr": [datr(25, 31, 3)],
             "dims": [dim(0, 3), dim(1, 2)], "iot": [iot_src(0, pemode=7)], "ior": []}
    parts.update(over)
    return sum(parts.values(), [])


def test_c6_success_and_pad_ignored():
    for pad in range(4):
        st = ok(c6_state(), c6_header(datr=[datr(25, 31, pad)]) + [BSTOP])
        assert [u16_at(st, a) for a in range(0, 12, 2)] == [1, 2, 3, 4, 5, 6]
        assert gm(st, 12, 4) == bytes(4)


def test_c6_1_zero_mask():
    s = c6_state()
    st = ok(s, [bstart("TSTORE", "FP16"), datr(21, 4, 3), iot_src(9, pemode=0), BSTOP])
    assert same_except(s, st, "pc")


@pytest.mark.parametrize("over", [
    {"dims": [dim(0, 3)]}, {"dims": [dim(0, 3), dim(1, 2), dim(2, 3)]},
    {"datr": [datr(25, 4, 3)]}, {"datr": [datr(25, 31, 3, rmode=2)]},
    {"datr": [datr(22, 31, 3)]},
    {"iot": [iot_dst(0, pemode=7)]},                       # destination instead of source
    {"iot": [iot_src2(0, 1, pemode=7)]},                   # a second source
    {"iot": [iot_src(0, pemode=7, last=0)]},               # not terminated
    {"iot": [iot_src(0, pemode=7, last=0), iot_src(0, pemode=7)]},
    {"ior": [ior(X2, X3, src2=4)]},
    {"iot": [iot_src(0, pemode=7), ios(2, pemode=7)]},
    {"start": [bstart("TSTORE", "FP64")]},
])
def test_c6_schema_checks(over):
    expect_fault(c6_state(), c6_header(**over), "Fault_TileLegality")


def _poke(s, field, value, index=0):
    return poke_tiles(s, field, index, value)


@pytest.mark.parametrize("change", [
    ("allocated", False), ("location", tables.TILE_LOCATION_CODE["Vector"]),
    ("layout", tables.TILE_LAYOUT_CODE["CUBE_M32"]), ("dtype", tables.dtype("BF16").code),
    ("valid_cols", 2), ("valid_rows", 1), ("defined_valid", 5), ("mask", 0b1110),
    ("k_repeat", 2), ("n_repeat", 0), ("cell_count", 2), ("storage_bytes", 256),
    ("rows", 32), ("cols", 8), ("capacity", 0), ("capacity", 100),
])
def test_c6_6_source_descriptor_checks(change):
    s = _poke(c6_state(), *change)
    expect_fault(s, c6_header(), "Fault_TileLegality")


def test_c6_6_unallocated_and_unmaterialized_sources():
    expect_fault(c6_state(), c6_header(iot=[iot_src(1, pemode=7)]), "Fault_TileLegality")
    expect_fault(c6_state(), c6_header(iot=[iot_src(5, pemode=7)]), "Fault_TileLegality")


def test_c6_6_binding_mask_must_be_inside_allocation_mask():
    s = cube_source(small(), 22, "FP16", 2, 3, [[1, 2, 3], [4, 5, 6]], pemode=5)   # 1100
    ok(s, c6_header(iot=[iot_src(0, pemode=1)]) + [BSTOP])                           # 1000
    expect_fault(s, c6_header(iot=[iot_src(0, pemode=3)]), "Fault_TileLegality")   # 0010


@pytest.mark.parametrize("base,stride,fault,addr", [
    (3, 6, "Fault_DataAlignment", 3), (4088, 6, "Fault_DataPage", 4096),
    (0, 4095, "Fault_DataAlignment", 4095)])
def test_c6_7_preflight_writes_nothing(base, stride, fault, addr):
    s = write_memory(c6_state(), 0, bytes([0xEE] * 16))
    s = write_memory(s, 4080, bytes([0xEE] * 16))
    s = with_regs(s, x2=base, x3=stride)
    s1 = expect_fault(s, c6_header(ior=[ior(X2, X3)]), fault, addr=addr)
    assert gm(s1, 0, 16) == bytes([0xEE] * 16) and gm(s1, 4080, 16) == bytes([0xEE] * 16)


# ----------------------------------------------------------------- E9 / C.7 ordinary TLOAD


def test_e9_ordinary_tload_stride_vectors():
    base = [0xC8011181, dim(0, 2), dim(1, 2), 0x0008EE13]
    s = write_memory(small(), 0x100, bytes([1, 0, 0, 0, 2]))
    s = write_memory(s, 0x10C, bytes([3, 0, 0, 0, 4]))
    s = with_regs(s, a0=0x100, a1=12)                          # 0x00310013 = B.IOR a0, a1
    st = ok(s, base[:3] + [dim(2, 2), base[3], 0x00310013, BSTOP])
    t = tile(st, 0)
    assert [int(t["words"][i]) for i in range(4)] == [1, 2, 3, 4]
    assert (t["rows"], t["cols"], t["valid_rows"], t["valid_cols"], t["mask"]) == (16, 2, 2, 2, 15)
    assert tables.TILE_LAYOUTS[t["layout"]] == "RowMajor"
    assert tables.TILE_LOCATIONS[t["location"]] == "Any"
    assert (t["k_repeat"], t["n_repeat"], t["cell_count"], t["storage_bytes"]) == (0, 0, 0, 0)
    assert charge(st) == 512 and t["defined_valid"] == 4 and sum(t["defined"]) == 4
    s = write_memory(small(), 0, bytes([5, 0, 0, 0, 6, 0, 0, 0, 7, 0, 0, 0, 8]))
    t = tile(ok(s, base + [BSTOP]), 0)
    assert [int(t["words"][i]) for i in range(4)] == [5, 6, 7, 8]
    s = write_memory(small(), 0, bytes([9, 0, 0, 0, 10]))
    t = tile(ok(s, base[:3] + [dim(2, 4), base[3], ior(0, 0), BSTOP]), 0)
    assert (t["cols"], t["rows"]) == (4, 8)
    assert [int(t["words"][i]) for i in (0, 1, 4, 5)] == [9, 10, 9, 10]


def test_e9_ordinary_tload_packed():
    s = write_memory(small(), 0x300, bytes([0x21, 0, 0, 0, 0x43]))
    s = with_regs(s, x2=0x300, x3=4)
    words = [bstart("TLOAD", "U4X2"), dim(0, 2), dim(1, 2), dim(2, 2), iot_dst(0),
             ior(X2, X3), BSTOP]
    t = tile(ok(s, words), 0)
    assert [int(t["words"][i]) for i in range(4)] == [1, 2, 3, 4]
    s = write_memory(small(), 0, bytes([0xA1, 0xB2]))
    t = tile(ok(s, [bstart("TLOAD", "U4X2"), dim(0, 1), dim(1, 2), iot_dst(0), BSTOP]), 0)
    assert int(t["words"][0]) == 1 and int(t["words"][t["cols"]]) == 2


def test_e9_ordinary_tload_preflight_fault():
    s = with_regs(small(), x2=4092, x3=2)
    header = [bstart("TLOAD", "U32"), dim(0, 2), dim(1, 1), iot_dst(0), ior(X2, X3)]
    expect_fault(s, header, "Fault_DataPage", addr=4096)


def test_e9_zero_mask():
    s = small()
    for binding in (iot_dst(0, pemode=0), ios(4, pemode=0, size=1)):
        st = ok(s, [bstart("TLOAD", "U32"), dim(0, 2), binding, BSTOP])
        assert same_except(s, st, "pc")


def c7_header(**over):
    parts = {"start": [bstart("TLOAD", "U16")], "datr": [], "dims": [dim(0, 2), dim(1, 2)],
             "iot": [iot_dst(0)], "ior": []}
    parts.update(over)
    return sum(parts.values(), [])


@pytest.mark.parametrize("over", [
    {"iot": []}, {"iot": [iot_dst(0, last=0), iot_dst(1)]}, {"iot": [iot_src_dst(3, 0)]},
    {"iot": [iot_src(3)]}, {"iot": [iot_dst(0, last=0)]},
    {"ior": [ior(1, 2, src2=3)]}, {"ior": [ior(dst=4)]},
])
def test_c7_2_binding_schema_is_bundle_control(over):
    expect_fault(small(), c7_header(**over), "Fault_BundleControl")


@pytest.mark.parametrize("attrs", [dict(dtype=4), dict(dtype=31), dict(pad=1), dict(pad=3),
                                   dict(dtype=0, cmode=2), dict(dtype=0, rmode=1),
                                   dict(dtype=0, sat=1), dict(dtype=0, canon=1)])
def test_c7_3_datr_applicability(attrs):
    expect_fault(small(), c7_header(datr=[datr(**{"layout": 0, "pad": 0, **attrs})]),
                 "Fault_TileLegality")


def test_c7_3_bundle_control_precedes_tile_legality():
    header = c7_header(datr=[datr(0, 4, 1)], iot=[iot_dst(0, last=0)])
    expect_fault(small(), header, "Fault_BundleControl")


def test_c7_4_datr_present_gives_fp64_destination():
    # F.3: B.DATR DataType 0 (FP64) becomes the destination type; the dense
    # stride still uses the BSTART dtype (U32: 4 bytes for LB0=1)
    s = write_memory(small(), 0, (0x1122334455667788).to_bytes(8, "little"))
    t = tile(ok(s, c7_header(start=[bstart("TLOAD", "U32")], datr=[datr(0, 0, 0)],
                             dims=[dim(0, 1), dim(1, 1)]) + [BSTOP]), 0)
    assert tables.dtype(int(t["dtype"])).name == "FP64"
    assert int(t["words"][0]) == 0x1122334455667788 and t["rows"] == 16
    header = c7_header(start=[bstart("TLOAD", "U32")], datr=[datr(0, 0, 0)],
                       dims=[dim(0, 1), dim(1, 2)])
    expect_fault(small(), header, "Fault_DataAlignment", addr=4)


@pytest.mark.parametrize("dims,size", [
    ([dim(0, 2), dim(1, 2), dim(2, 3)], 1),        # Col not a power of two
    ([dim(0, 1), dim(1, 1), dim(2, 128)], 1),      # Col*bits exceeds the capacity
    ([dim(0, 2), dim(1, 33)], 1),                  # derived rows 32 < ValidRow
    ([dim(0, 4), dim(1, 1), dim(2, 2)], 1),        # ValidCol > Col
    ([dim(0, 1), dim(1, 2), dim(2, 1024)], 5),     # 2 x 1024 > 1024 model Words
])
def test_c7_4_destination_shape(dims, size):
    expect_fault(small(), c7_header(dims=dims, iot=[iot_dst(0, size)]), "Fault_TileAllocation")


def test_c7_4_zero_dimensions_default():
    st = ok(write_memory(small(), 0, bytes([7, 0])),
            c7_header(dims=[dim(0, 0), dim(1, 0), dim(2, 0)]) + [BSTOP])
    t = tile(st, 0)
    assert (t["valid_rows"], t["valid_cols"], t["cols"], t["rows"]) == (1, 1, 1, 64)
    assert int(t["words"][0]) == 7


def test_c7_4_slot_exhaustion_and_budget():
    s = small()
    for _ in range(4):
        s = ok(s, c7_header() + [BSTOP])
    assert allocated(s) == [0, 1, 2, 3]
    expect_fault(s, c7_header(), "Fault_TileAllocation")
    s = small()
    s = poke(s, tile_capacity=1024)
    expect_fault(s, c7_header(iot=[iot_dst(0, 3, 7)]), "Fault_TileAllocation")
    ok(s, c7_header(iot=[iot_dst(0, 3, 5)]) + [BSTOP])


@pytest.mark.parametrize("base,stride,fault,addr", [
    (1, 4, "Fault_DataAlignment", 1), (0, 2, "Fault_DataAlignment", 2),   # (1,0) misaligned...
    (4090, 4, "Fault_DataPage", 4096)])
def test_c7_5_preflight(base, stride, fault, addr):
    s = with_regs(small(), x2=base, x3=stride)
    if (base, stride) == (0, 2):
        base, stride = 0, 3
        s = with_regs(small(), x2=0, x3=3)
        addr = 3
    expect_fault(s, c7_header(ior=[ior(X2, X3)]), fault, addr=addr)


# ----------------------------------------------------------------- C.7 / C.8 relayout codes
#
# An ordinary B.DATR Layout code names two layouts; TLOAD and TSTORE read only
# the second (docs/spec-notes.md): a TLOAD reads GM row-major into a tile of
# that layout, and a TSTORE reads its source through the source's own layout.
# B.DATR DataType must be 0, so a relayout TLOAD's tile is FP64 whatever the
# BSTART type (the dense stride still uses the BSTART type). A ZN/NZ tile must
# be whole fractals of 16 rows x 32 bytes (4 FP64 columns): checked on the new
# descriptor after its allocation, Fault_TileLegality.

RELAYOUT_DESTINATION = {1: "ColumnMajor", 3: "ZN", 4: "NZ", 6: "RowMajor", 8: "ZN", 9: "NZ",
                        17: "RowMajor", 18: "ColumnMajor", 20: "NZ", 27: "RowMajor",
                        28: "ColumnMajor", 30: "ZN"}


def fp64_matrix(rows, cols):
    """A distinct 64-bit Word for each (r, c): 0x0101_0000_0000_0000 * (r+1) + c."""
    return [[(0x0101 << 48) * (r + 1) + c for c in range(cols)] for r in range(rows)]


def relayout_load(code, vr, vc, size, cols=None, dt="FP64", regs=False, hand=0):
    dims = [dim(0, vc), dim(1, vr)] + ([dim(2, cols)] if cols else [])
    return ([bstart("TLOAD", dt), datr(code, 0, 0)] + dims + [iot_dst(hand, size)]
            + ([ior(X2, X3)] if regs else []))


def relayout_state(values, base=0x100):
    """GM holds `values` row-major as 8-byte Words from `base` (dense rows)."""
    raw = b"".join(v.to_bytes(8, "little") for row in values for v in row)
    return write_memory(small(), base, raw)


def loaded_at(t, vr, vc):
    """{(r, c): payload index} read back by value (the Word of fp64_matrix)."""
    where = {int(t["words"][i]): i for i in np.flatnonzero(t["defined"])}
    m = fp64_matrix(vr, vc)
    return {(r, c): where[m[r][c]] for r in range(vr) for c in range(vc)}


def test_relayout_g1_nd2nz_two_fractal_columns():
    # 2 x 8 FP64 at SizeCode 4: rows 1024*8/(8*64) = 16, one fractal row, two
    # fractal columns of 4; NZ index (c DIV 4)*64 + r*4 + c MOD 4
    s = with_regs(relayout_state(fp64_matrix(2, 8)), x2=0x100, x3=64)
    t = tile(ok(s, relayout_load(4, 2, 8, 4, regs=True) + [BSTOP]), 0)
    assert tables.TILE_LAYOUTS[int(t["layout"])] == "NZ"
    assert tables.dtype(int(t["dtype"])).name == "FP64"
    assert (int(t["rows"]), int(t["cols"]), int(t["valid_rows"]), int(t["valid_cols"])) == (16, 8, 2, 8)
    at = loaded_at(t, 2, 8)
    assert [at[0, c] for c in range(8)] == [0, 1, 2, 3, 64, 65, 66, 67]
    assert [at[1, c] for c in range(8)] == [4, 5, 6, 7, 68, 69, 70, 71]
    assert int(np.sum(t["defined"])) == 16 and int(t["defined_valid"]) == 16
    # ND2ZN and ND2DN coincide here (16 physical rows): c*16 + r
    for code in (3, 1):
        t = tile(ok(s, relayout_load(code, 2, 8, 4, regs=True) + [BSTOP]), 0)
        at = loaded_at(t, 2, 8)
        assert [at[0, c] for c in range(8)] == [0, 16, 32, 48, 64, 80, 96, 112]
        assert [at[1, c] for c in range(8)] == [1, 17, 33, 49, 65, 81, 97, 113]


@pytest.mark.parametrize("code,expect", [
    (6, [0, 5, 123, 128, 132, 135]),          # RowMajor r*8 + c
    (1, [0, 160, 111, 16, 144, 240]),         # ColumnMajor c*32 + r
    (3, [0, 80, 63, 128, 192, 240]),          # ZN
    (4, [0, 129, 63, 64, 192, 195]),          # NZ
])
def test_relayout_g2_index_per_layout(code, expect):
    # 17 x 8 FP64 at SizeCode 5: 32 rows x 8 columns, two fractal rows and columns
    s = with_regs(relayout_state(fp64_matrix(17, 8)), x2=0x100, x3=64)
    t = tile(ok(s, relayout_load(code, 17, 8, 5, regs=True) + [BSTOP]), 0)
    assert (int(t["rows"]), int(t["cols"])) == (32, 8)
    at = loaded_at(t, 17, 8)
    assert [at[rc] for rc in [(0, 0), (0, 5), (15, 3), (16, 0), (16, 4), (16, 7)]] == expect
    assert int(np.sum(t["defined"])) == 17 * 8


@pytest.mark.parametrize("code", sorted(RELAYOUT_DESTINATION))
def test_relayout_tload_takes_the_second_half_of_the_code(code):
    # every code: the tile's layout is the code's destination; RowMajor ones
    # give exactly what NORM (B.DATR Layout 0) gives
    s = with_regs(relayout_state(fp64_matrix(4, 4)), x2=0x100, x3=32)
    st = ok(s, relayout_load(code, 4, 4, 3, regs=True) + [BSTOP])
    t = tile(st, 0)
    assert tables.TILE_LAYOUTS[int(t["layout"])] == RELAYOUT_DESTINATION[code]
    assert set(loaded_at(t, 4, 4)) == {(r, c) for r in range(4) for c in range(4)}
    if RELAYOUT_DESTINATION[code] == "RowMajor":
        assert same_except(st, ok(s, relayout_load(0, 4, 4, 3, regs=True) + [BSTOP]))


@pytest.mark.parametrize("vr,vc,cols,size", [
    (7, 2, None, 1), (7, 2, None, 10), (6, 2, None, 3),      # 2 columns: off the fractal grid
    (4, 4, None, 1), (4, 4, None, 2),                        # 4 or 8 rows: not 16
])
def test_relayout_zn_nz_off_the_fractal_grid_is_tile_legality(vr, vc, cols, size):
    # the allocation succeeds, the new descriptor is not generically indexable:
    # Fault_TileLegality, the allocation rolled back (nothing but the fault register)
    for code in (30, 4):
        expect_fault(small(), relayout_load(code, vr, vc, size, cols), "Fault_TileLegality")


@pytest.mark.parametrize("vr,vc,cols,size,at", [
    (4, 4, None, 3, lambda r, c: c * 16 + r),                # 16 x 4: one ZN fractal
    (7, 2, 4, 3, lambda r, c: c * 16 + r),                   # LB2 = 4 puts 2 columns on the grid
])
def test_relayout_zn_on_the_fractal_grid_completes(vr, vc, cols, size, at):
    s = with_regs(relayout_state(fp64_matrix(vr, 4)), x2=0x100, x3=32)
    t = tile(ok(s, relayout_load(30, vr, vc, size, cols, regs=True) + [BSTOP]), 0)
    got = loaded_at(t, vr, vc)
    assert all(got[r, c] == at(r, c) for r in range(vr) for c in range(vc))


def test_relayout_allocation_faults_precede_the_fractal_check():
    # columns 7 (not a power of two): the shape, Fault_TileAllocation
    expect_fault(small(), relayout_load(30, 2, 7, 3), "Fault_TileAllocation")
    # no free slot in the hand beats an off-grid ZN shape
    s = small()
    for _ in range(small_hand_slots()):
        s = ok(s, c7_header() + [BSTOP])
    expect_fault(s, relayout_load(30, 7, 2, 1), "Fault_TileAllocation")


def small_hand_slots():
    return pj.preset("small").hand_slots


def test_relayout_fractal_check_precedes_memory():
    # a misaligned base would fault DataAlignment; the off-grid shape is found first
    s = with_regs(small(), x2=0x101, x3=16)
    expect_fault(s, relayout_load(4, 7, 2, 3, regs=True), "Fault_TileLegality")
    expect_fault(s, relayout_load(4, 4, 4, 3, regs=True), "Fault_DataAlignment", addr=0x101)


@pytest.mark.parametrize("attrs", [dict(dtype=31), dict(dtype=4), dict(dtype=0, pad=1),
                                   dict(dtype=0, pad=2), dict(dtype=0, pad=3),
                                   dict(dtype=0, rmode=1), dict(dtype=0, cmode=1),
                                   dict(dtype=0, sat=1), dict(dtype=0, canon=1)])
@pytest.mark.parametrize("op", ["TLOAD", "TSTORE"])
def test_relayout_datr_fields_other_than_layout(attrs, op):
    # DataType must be 0 (DTYPE_NONE too is rejected), PadValue 00, no conversion
    words = [bstart(op, "FP64"), datr(**{"layout": 4, "pad": 0, **attrs}), dim(0, 4), dim(1, 4)]
    words.append(iot_dst(0, 3) if op == "TLOAD" else iot_src(0))
    expect_fault(small(), words, "Fault_TileLegality")


def test_relayout_g5_bstart_type_sets_the_stride_not_the_element():
    # BSTART E4M3, ND2NZ 4x4: the tile is FP64 (8-byte elements) while the dense
    # stride is 4 x 1 byte: (1, 0) is at 4, misaligned for an 8-byte access
    expect_fault(small(), relayout_load(4, 4, 4, 3, dt="E4M3"), "Fault_DataAlignment", addr=4)
    s = with_regs(relayout_state(fp64_matrix(4, 4), base=0), x2=0, x3=32)
    t = tile(ok(s, relayout_load(4, 4, 4, 3, dt="E4M3", regs=True) + [BSTOP]), 0)
    assert tables.dtype(int(t["dtype"])).name == "FP64"
    got = loaded_at(t, 4, 4)
    assert all(got[r, c] == r * 4 + c for r in range(4) for c in range(4))   # NZ, one column


@pytest.mark.parametrize("code", [0, 4, 30, 1, 6])
def test_relayout_g6_tstore_reads_the_source_layout(code):
    # an NZ tile stored with any ordinary code (or none) writes the matrix back
    # row-major: the code is not read; LB0/LB1 do not bound the region
    values = fp64_matrix(2, 8)
    s = with_regs(relayout_state(values), x2=0x100, x3=64)
    s = ok(s, relayout_load(4, 2, 8, 4, regs=True) + [BSTOP])
    s = with_regs(s, x2=0x400, x3=64)
    words = [bstart("TSTORE", "FP64")] + ([datr(code, 0, 0)] if code else []) \
        + [dim(0, 1), dim(1, 1), iot_src(0), ior(X2, X3), BSTOP]
    st = ok(s, words)
    raw = b"".join(v.to_bytes(8, "little") for row in values for v in row)
    assert gm(st, 0x400, len(raw)) == raw
    assert same_except(s, st, "gm", "pc")


def test_relayout_column_major_words_within_the_model_bound():
    # ptojax's bound: the Words up to the end of the last column the region
    # touches (ValidCol x rows) must lie within tile_words (1024 on small).
    # SizeCode 10, 2 columns: 4096 rows, 2 x 4096 Words: Fault_TileAllocation
    # (RowMajor needs 1 x 2 of them and completes)
    expect_fault(small(), relayout_load(1, 1, 2, 10), "Fault_TileAllocation")
    ok(small(), relayout_load(6, 1, 2, 10) + [BSTOP])
    # SizeCode 9: 2048 rows, ValidCol 1 reaches 2048 Words; SizeCode 8: 1024
    expect_fault(small(), relayout_load(1, 1, 1, 9, cols=2), "Fault_TileAllocation")
    t = tile(ok(small(), relayout_load(1, 1, 1, 8, cols=2) + [BSTOP]), 0)
    assert (int(t["rows"]), int(t["cols"])) == (1024, 2)


# ----------------------------------------------------------------- E9 / C.8 ordinary TSTORE


def u32_source(s, values, cols=2):
    raw = b"".join(v.to_bytes(4, "little") for row in values for v in row)
    s = write_memory(s, 0x600, raw)
    s = with_regs(s, x2=0x600, x3=4 * len(values[0]))
    words = [bstart("TLOAD", "U32"), dim(0, len(values[0])), dim(1, len(values)), dim(2, cols),
             iot_dst(0), ior(X2, X3), BSTOP]
    s = ok(s, words)
    return with_regs(write_memory(s, 0x600, bytes(len(raw))), x2=0, x3=0)


def test_e9_ordinary_tstore_vectors():
    s = u32_source(small(), [[11, 12], [13, 14]])
    st = ok(with_regs(s, x2=0x200, x3=12),
            [bstart("TSTORE", "U32"), iot_src(0), ior(X2, X3), BSTOP])
    assert [gm(st, a, 1)[0] for a in (0x200, 0x204, 0x20C, 0x210)] == [11, 12, 13, 14]
    st = ok(s, [bstart("TSTORE", "U32"), iot_src(0), BSTOP])
    assert [gm(st, a, 1)[0] for a in (0, 4, 8, 12)] == [11, 12, 13, 14]
    s = u32_source(small(), [[21, 22], [23, 24]])
    st = ok(s, [bstart("TSTORE", "U32"), dim(2, 4), iot_src(0), ior(0, 0), BSTOP])
    assert gm(st, 0, 8) == bytes([23, 0, 0, 0, 24, 0, 0, 0])    # row 1 overwrites row 0


def test_e9_ordinary_tstore_packed():
    s = write_memory(small(), 0x300, bytes([0x21, 0, 0, 0, 0x43]))
    s = with_regs(s, x2=0x300, x3=4)
    s = ok(s, [bstart("TLOAD", "U4X2"), dim(0, 2), dim(1, 2), dim(2, 2), iot_dst(0),
               ior(X2, X3), BSTOP])
    s = write_memory(s, 0x300, bytes(5))
    s = with_regs(s, x2=0x320)
    st = ok(s, [bstart("TSTORE", "U4X2"), iot_src(0), ior(X2, X3), BSTOP])
    assert gm(st, 0x320, 5) == bytes([0x21, 0, 0, 0, 0x43])
    s = write_memory(small(), 0x10, bytes([0x35, 0x47]))
    s = ok(with_regs(s, x2=0x10, x3=1),
           [bstart("TLOAD", "U4X2"), dim(0, 1), dim(1, 2), iot_dst(0), ior(X2, X3), BSTOP])
    s = write_memory(s, 0, bytes([0xA0, 0xB0]))
    st = ok(s, [bstart("TSTORE", "U4X2"), iot_src(0), BSTOP])
    assert gm(st, 0, 2) == bytes([0xA5, 0xB7])                 # high nibbles preserved


def test_c8_bstart_dtype_only_sizes_the_default_stride():
    s = u32_source(small(), [[1, 2], [3, 4]])
    st = ok(s, [bstart("TSTORE", "U16"), iot_src(0), BSTOP])   # stride = 2 columns * 2 bytes
    assert gm(st, 0, 12) == bytes([1, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0])
    r = run(s, [bstart("TSTORE", "U8"), iot_src(0), BSTOP])     # stride 2: U32 row 1 at 2
    assert r.fault == "Fault_DataAlignment" and r.fault_address == 2
    st = ok(s, [bstart("TSTORE", "U32"), dim(0, 1), dim(1, 1), iot_src(0), BSTOP])
    assert gm(st, 0, 16) == bytes([1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0])


def c8_header(**over):
    parts = {"start": [bstart("TSTORE", "U32")], "datr": [], "dims": [],
             "iot": [iot_src(0)], "ior": []}
    parts.update(over)
    return sum(parts.values(), [])


@pytest.mark.parametrize("over", [
    {"iot": []}, {"iot": [iot_dst(0)]}, {"iot": [iot_src2(0, 0)]}, {"iot": [iot_src(0, last=0)]},
    {"iot": [iot_src_dst(0, 1)]}, {"ior": [ior(1, 2, src2=3)]},
])
def test_c8_2_binding_schema_is_bundle_control(over):
    expect_fault(u32_source(small(), [[1, 2]]), c8_header(**over), "Fault_BundleControl")


@pytest.mark.parametrize("attrs", [dict(dtype=25), dict(pad=2), dict(dtype=0, sat=1)])
def test_c8_3_datr_applicability(attrs):
    header = c8_header(datr=[datr(**{"layout": 0, "pad": 0, "dtype": 0, **attrs})])
    expect_fault(u32_source(small(), [[1, 2]]), header, "Fault_TileLegality")


def test_c8_3_datr_all_zero_is_accepted():
    st = ok(u32_source(small(), [[1, 2]]), c8_header(datr=[datr(0, 0, 0)]) + [BSTOP])
    assert gm(st, 0, 8) == bytes([1, 0, 0, 0, 2, 0, 0, 0])


@pytest.mark.parametrize("change", [("allocated", False), ("defined_valid", 1),
                                    ("layout", tables.TILE_LAYOUT_CODE["CUBE_M16"]),
                                    ("rows", 8), ("valid_cols", 3), ("capacity", 96)])
def test_c8_4_source_checks(change):
    s = _poke(u32_source(small(), [[1, 2], [3, 4]]), *change)
    expect_fault(s, c8_header(), "Fault_TileLegality")


def test_c8_4_cube_source_and_missing_source():
    s = cube_source(small(), 22, "FP16", 1, 1, [[5]])
    expect_fault(s, c8_header(start=[bstart("TSTORE", "FP16")]), "Fault_TileLegality")
    expect_fault(small(), c8_header(iot=[iot_src(17)]), "Fault_TileLegality")


@pytest.mark.parametrize("base,stride,fault,addr", [
    (2, 8, "Fault_DataAlignment", 2), (4092, 8, "Fault_DataPage", 4096),
    (0, 4094, "Fault_DataAlignment", 4094), (4088, 4, "Fault_DataPage", 4096)])
def test_c8_5_preflight_writes_nothing(base, stride, fault, addr):
    s = u32_source(small(), [[1, 2], [3, 4]])
    s = write_memory(s, 4080, bytes([0xEE] * 16))
    s = with_regs(s, x2=base, x3=stride)
    s1 = expect_fault(s, c8_header(ior=[ior(X2, X3)]), fault, addr=addr)
    assert gm(s1, 4080, 16) == bytes([0xEE] * 16) and gm(s1, 0, 16) == bytes(16)


# ----------------------------------------------------------------- stream and header commands


def test_stream_pc_executed_and_block_fields():
    s = poke(small(), pc=0x40)
    s = with_regs(s, x3=5)
    words = [bstart("TSTORE.SPART", "BF16"), datr(22, 31, 1, rmode=3), dim(0, 7, reg=X3),
             dim(2, 0x12345), ior(1, 2, 3, 4), iot_src2(3, 4, pemode=6, last=0),
             iot_src_dst(5, 2, 9, pemode=6), iot_dst(3, pemode=0), ios(200, 6, 12), catr(dr=1)]
    r = run(s, words)
    assert r.ok and r.executed == len(words)
    b, st = r.state.block, r.state
    assert int(np.asarray(st.pc)) == 0x40 + 4 * len(words)
    assert bool(b.active) and int(b.pc) == 0x40 and int(b.op) == tables.OP_ID["TSTORE.SPART"]
    assert int(b.dtype) == tables.dtype("BF16").code
    assert np.asarray(b.datr).tolist() == [22, 31, 1, 0, 3, 0, 0] and bool(b.datr_present)
    assert np.asarray(b.lb).tolist() == [12, 0, 0x2345]
    assert np.asarray(b.lb_present).tolist() == [True, False, True]
    assert bool(b.ior_present) and np.asarray(b.ior).tolist() == [4, 1, 2, 3]
    assert int(b.iot_count) == 2 and bool(b.iot_closed)
    assert np.asarray(b.iot)[:3].tolist() == [[0, 0, 0, 0b1110, 1, 1, 3, 4],
                                              [1, 2, 9, 0b1110, 1, 0, 5, 0], [0] * 8]
    assert int(b.ios_count) == 1 and np.asarray(b.ios)[0].tolist() == [200, 12, 0b1110]
    assert bool(b.zero_seen) and bool(b.catr_present) and int(b.catr) == catr(dr=1)
    assert not bool(b.fpatr_present)
    # a later run continues the open block; its CUBE Layout selects the CUBE
    # transport, which rejects Function 14 (TSTORE.SPART)
    r2 = run(st, [BSTOP])
    assert r2.fault == "Fault_TileLegality"


def test_block_defaults_when_datr_absent_and_reset_after_completion():
    st = ok(small(), [bstart("TLOAD", "U8")])
    assert np.asarray(st.block.datr).tolist() == [0, 31, 3, 0, 0, 0, 0]
    empty = pj.reset(pj.preset("small")).block
    st = ok(put_u16(small(), 0, 1), cube_load(22, "FP16", 1, 1))
    assert not state_differences(st.block, empty)


def test_bstart_completes_the_open_block():
    s = put_u16(small(), 0, 3)
    words = cube_load(22, "FP16", 1, 1)[:-1] + cube_load(22, "FP16", 1, 1)
    st = ok(s, words)
    assert allocated(st) == [0, 1]
    # a failing completion leaves the new BSTART unexecuted
    bad = cube_load(22, "FP16", 1, 1)[:-2] + [iot_dst(0, last=0)] + [bstart("TLOAD", "U8")]
    r = run(s, bad, on_fault="hold")
    assert r.fault == "Fault_TileLegality" and r.executed == len(bad) - 1
    assert int(np.asarray(r.state.pc)) == 4 * (len(bad) - 1)
    assert int(np.asarray(r.state.block.op)) == tables.OP_ID["TLOAD"]
    assert int(np.asarray(r.state.block.dtype)) == tables.dtype("FP16").code


@pytest.mark.parametrize("word", [0x00000000, 0xFFFFFFFF, 0x00000002, 0x007C0043, 0x000DD213,
                                  0x00002223, 0x00002423, bstart("TLOAD", "FP16") | 0x200,
                                  0x78011181, 0xF8011181, datr(2), datr(31), datr(cmode=6),
                                  datr(dtype=15), ior(24), 0x00013013, 0x00080013 | 0x6000,
                                  ios(0, 1, 13)])
def test_decode_faults(word):
    s1 = ok(small(), [bstart("TLOAD", "FP16")])
    r = run(s1, [word], on_fault="hold")
    assert r.fault == "Fault_IllegalInstruction"
    assert same_except(s1, r.state, "fault", "fault_address")
    r = run(small(), [word])
    assert r.fault == "Fault_IllegalInstruction" and r.executed == 0


@pytest.mark.parametrize("word", [datr(), dim(0, 1), ior(), iot_dst(0), iot_src(0), ios(1),
                                  FPATR0, catr(), BSTOP])
def test_header_commands_outside_a_block(word):
    s = small()
    r = run(s, [word])
    assert r.fault == "Fault_BundleControl" and same_except(s, r.state, "fault", "fault_address")


def test_zero_mask_bindings_are_no_ops_outside_a_block():
    s = small()
    st = ok(s, [iot_dst(0, pemode=0), ios(5, pemode=0), iot_src(0, pemode=0)])
    assert same_except(s, st, "pc")


@pytest.mark.parametrize("prefix,word,fault", [
    ([datr()], datr(), "Fault_BundleControl"),
    ([dim(1, 1)], dim(1, 2), "Fault_BundleControl"),
    ([ior(1)], ior(2), "Fault_BundleControl"),
    ([catr()], catr(), "Fault_BundleControl"),
    ([iot_dst(0)], iot_dst(1), "Fault_BundleControl"),                 # after L=1
    ([iot_src(0, last=0)], iot_src(1, pemode=2), "Fault_TileLegality"),  # mask differs
    ([ios(1, 3)], ios(2, 4), "Fault_TileLegality"),
    ([iot_src(0, pemode=3, last=0)], ios(2, 4), "Fault_TileLegality"),
    ([ios(1, 3)], ios(1, 3), "Fault_BundleControl"),                   # same SharedTID
    ([ios(1), ios(2), ios(3), ios(4)], ios(5), "Fault_BundleControl"),
    ([iot_src(0, last=0)] * 16, iot_src(0), "Fault_TileLegality"),     # 17th binding
    ([], FPATR0, "Fault_BundleControl"),                               # non-matrix block
])
def test_header_command_faults(prefix, word, fault):
    s1 = ok(small(), [bstart("TLOAD", "FP16")] + prefix)
    r = run(s1, [word], on_fault="hold")
    assert r.fault == fault and int(np.asarray(r.state.fault_address)) == int(np.asarray(s1.pc))
    assert same_except(s1, r.state, "fault", "fault_address")


def test_iot_mask_is_compared_with_earlier_iots_only():
    # the model's BundleTileMaskCanAppend ignores B.IOS masks (encoding.md 4.6)
    ok(small(), [bstart("TLOAD", "FP16"), ios(1, 3), iot_dst(0, pemode=4)])


@pytest.mark.parametrize("fpatr,fault", [
    (FPATR0, None), (FPATR0 | 1 << 16, "Fault_TileLegality"),          # RowMaxInit w/o RowMaxEn
    (FPATR0 | 1 << 17, "Fault_TileLegality"),                          # GroupMaxEn, GroupN 0
    (FPATR0 | 1 << 19, "Fault_TileLegality"),                          # GroupN w/o GroupMaxEn
    (FPATR0 | 1 << 17 | 1 << 19, None), (FPATR0 | 1 << 15, "Fault_TileLegality"),
    (FPATR0 | 1 << 18 | 1 << 16 | 1 << 15, None)])
def test_fpatr_in_matrix_block(fpatr, fault):
    s1 = ok(small(), [bstart("TMATMUL", "FP16")])
    r = run(s1, [fpatr], on_fault="hold")
    assert r.fault == (fault or "Fault_None")
    if fault is None:
        assert int(np.asarray(r.state.block.fpatr)) == fpatr
        assert run(r.state, [FPATR0]).fault == "Fault_BundleControl"   # duplicate
    s2 = ok(small(), [bstart("TMATMUL", "FP16"), iot_src(0, last=0)])
    assert run(s2, [FPATR0]).fault == "Fault_BundleControl"           # after a binding


def test_catr_dr_and_trap():
    s = put_u16(small(), 0, 1)
    header = [bstart("TMATMUL", "FP16"), catr(dr=1), iot_dst(0, pemode=0)]
    expect_fault(s, header, "Fault_BundleControl")           # DR=1 outside TLSU, before zero mask
    words = cube_load(22, "FP16", 1, 1)
    r = run(s, words[:-1] + [catr(dr=1, trap=1), BSTOP], on_fault="hold")
    assert r.fault == "Fault_BundlePostCommit" and r.executed == len(words)
    assert allocated(r.state) == [0]                           # the commit's effects stay
    assert int(np.asarray(r.state.fault_address)) == 4 * len(words)
    assert int(np.asarray(r.state.pc)) == 4 * len(words)
    assert not bool(np.asarray(r.state.block.active))
    r2 = run(r.state, [BSTOP])
    assert r2.fault == "Fault_BundleControl"                   # nothing left to complete


def test_b_dim_reads_the_current_pe_and_wraps():
    s = with_regs(small(), pe=2, x3=65535)
    st = ok(s, [bstart("TLOAD", "FP16"), 0x001B8043], pe=2)
    assert np.asarray(st.block.lb).tolist()[0] == 0 and bool(st.block.lb_present[0])
    st = ok(s, [bstart("TLOAD", "FP16"), 0x001B8043], pe=0)
    assert np.asarray(st.block.lb).tolist()[0] == 1
    s = poke(s, gpr=np.where(np.arange(24) == 0, 99, np.asarray(s.gpr)))  # x0 reads 0 anyway
    st = ok(s, [bstart("TLOAD", "FP16"), dim(1, 5, reg=0)])
    assert np.asarray(st.block.lb).tolist()[1] == 5


def test_base_and_stride_come_from_the_current_pe():
    s = put_u16(small(), 0x100, 42)
    s = with_regs(s, pe=3, x2=0x100, x3=2)
    st = ok(s, cube_load(22, "FP16", 1, 1, regs=True), pe=3)
    assert int(tile(st, 0, pe=3)["words"][0]) == 42        # PE3's own Local file
    assert allocated(st, pe=3) == [0] and all(allocated(st, pe=p) == [] for p in range(3))
    st = ok(s, cube_load(22, "FP16", 1, 1, regs=True), pe=0)
    assert int(tile(st, 0)["words"][0]) == 0
    assert allocated(st) == [0] and all(allocated(st, pe=p) == [] for p in (1, 2, 3))


def test_run_clears_the_fault_register_and_odd_pc():
    r = run(small(), [BSTOP])
    assert r.fault == "Fault_BundleControl"
    r2 = run(r.state, [])
    assert r2.ok and int(np.asarray(r2.state.fault)) == 0
    assert int(np.asarray(r2.state.fault_address)) == 0
    r = run(poke(small(), pc=3), [bstart("TLOAD", "FP16")])
    assert r.fault == "Fault_InstructionPC" and r.executed == 0


def test_arguments_and_words_forms():
    s = small()
    with pytest.raises(ValueError):
        run(s, [], pe=4)
    with pytest.raises(ValueError):
        run(s, [], on_fault="retry")
    a = run(s, np.array([bstart("TLOAD", "FP16")], np.uint32))
    b = run(s, [bstart("TLOAD", "FP16")])
    assert a.ok and b.ok and same_except(a.state, b.state)
    with pytest.raises(ValueError):          # not a 32-bit word: API misuse
        run(s, [bstart("TLOAD", "FP16") + (1 << 32)])
    with pytest.raises(TypeError):
        run(s, ["BSTOP"])


# Random words and hand-made (garbage) States: tests/test_transport.py runs them
# on this model and on pj.run and compares the results leaf by leaf.
