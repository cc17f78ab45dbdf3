"""Reference executor: BSTART.MGATHER.CAS (state-and-transport.md D, E7, E8).

The six AVS themes of the BSTART.MGATHER.CAS record (decode, execution,
duplicates, lane-preflight faults, packed-type rejection, schema rejection,
zero mask) as real instruction words, one test per check of the ordered list
D.4, the lane orders of ptojax/cas_order.py, and the any-serialization
checker of ptojax/reference/cas_check.py. Source tiles are built with real
ordinary (and, once, CUBE) TLOAD bundles. Scenario tests call the module-level
`run`, setup included, so tests/test_mgather_cas.py can re-run the file on the
JAX executor the way tests/test_transport.py re-runs the transport scenarios.
"""

import functools
import itertools

import jax
import numpy as np
import pytest

import ptojax as pj
from ptojax import cas_order, tables
from ptojax.isa import encode
from ptojax.isa.encode import BSTOP, datr, dim, ior, ios, iot_dst, iot_src, iot_src2, iot_src_dst
from ptojax.reference import cas_check, run
from ptojax.reference.decode import decode
from ptojax.state import state_differences, tile_words
import _bundles
from _bundles import (X2, X3, allocated, bstart, charge, gm, poke, poke_tiles, run_ok, same_except, small, tile,
                      with_regs, write_gpr, write_memory)

A0 = tables.gpr_index("a0")
SCRATCH = 0xC00                      # GM scratch area of the source loads (zeroed again)

# encoding.md 8.2 (block-atomic-bstart-mgather-cas-compare-swap-001)
E7_WORDS = [0xD8811181, 0x08001023, 0x00200043, 0x00201043, 0x04004213, 0x0028D213,
            0x00010013, BSTOP]


def ok(s, words, **kw):
    return run_ok(run, s, words, **kw)      # this module's run: tests/_scenarios.py re-binds it


def expect_fault(s, header, fault, addr=None):
    """Open the block with `header`, complete it with BSTOP: the fault fires with
    its address and nothing but the fault register changes (on_fault="hold");
    "abandon" also drops the block. No destination, no GM write."""
    s1 = ok(s, header)
    r = run(s1, [BSTOP], on_fault="hold")
    assert r.fault == fault
    assert r.executed == 0 and r.fault_address == addr
    word_pc = int(np.asarray(s1.pc))
    assert int(np.asarray(r.state.fault_address)) == (word_pc if addr is None else addr)
    assert same_except(s1, r.state, "fault", "fault_address")
    ra = run(s1, [BSTOP])
    assert ra.fault == fault and not bool(np.asarray(ra.state.block.active))
    assert same_except(s1, ra.state, "fault", "fault_address", "block")
    return s1


# ----------------------------------------------------------------- building sources


def encode_rows(dt, values):
    """GM bytes of a row-major matrix of `dt` (4-bit: two per byte, low nibble first)."""
    d = tables.dtype(dt)
    if d.bits == 4:
        out = b""
        for row in values:
            nib = [v & 0xF for v in row] + [0] * (len(row) % 2)
            out += bytes(nib[i] | nib[i + 1] << 4 for i in range(0, len(nib), 2))
        return out
    return b"".join((v & ((1 << d.bits) - 1)).to_bytes(d.element_bytes, "little")
                    for row in values for v in row)


def load(s, dt, values, cols=None, hand=0, size=1):
    """An ordinary TLOAD of `values` (VR x VC, physical Col `cols`) into the first
    free slot of `hand`; GM scratch and x2/x3 are restored afterwards."""
    vr, vc = len(values), len(values[0])
    raw = encode_rows(dt, values)
    stride = len(raw) // vr
    s = write_memory(s, SCRATCH, raw)
    s = with_regs(s, x2=SCRATCH, x3=stride)
    words = [bstart("TLOAD", dt), dim(0, vc), dim(1, vr)]
    if cols is None and vc & (vc - 1):
        cols = 1 << (vc - 1).bit_length()             # Col must be a power of two
    if cols is not None:
        words.append(dim(2, cols))
    s = ok(s, words + [iot_dst(hand, size, 4), ior(X2, X3), BSTOP])
    s = write_memory(s, SCRATCH, bytes(len(raw)))
    return with_regs(s, x2=0, x3=0)


def cube_load(s, dt, values, hand=0):
    """A CUBE_M16 tile of `values` (VR x VC) in the first free slot of `hand`, by a
    CUBE TLOAD (ND2M16) through this module's `run`; GM scratch and x2/x3 are
    restored afterwards."""
    vr, vc = len(values), len(values[0])
    raw = encode_rows(dt, values)
    s = write_memory(s, SCRATCH, raw)
    s = with_regs(s, x2=SCRATCH, x3=len(raw) // vr)
    s = ok(s, _bundles.cube_load(22, dt, vr, vc, hand=hand, regs=True))
    s = write_memory(s, SCRATCH, bytes(len(raw)))
    return with_regs(s, x2=0, x3=0)


@functools.lru_cache(maxsize=None)
def sources(index, expected, replacement, base=0, memory=(), fresh=small):
    """State with T#1 = index, T#2 = expected, T#3 = replacement (each a
    (dtype, rows) pair, rows a tuple of tuples), a0 = base, GM bytes from
    `memory` ((address, bytes) pairs)."""
    s = fresh()
    for dt, rows in (index, expected, replacement):
        s = load(s, dt, [list(r) for r in rows])
    for addr, data in memory:
        s = write_memory(s, addr, data)
    return write_gpr(s, "a0", base)


def row(*v):
    return (tuple(v),)


def cas_header(dt, vc, vr=None, cols=None, datr_word=None, ior_word=None, hand=0, size=1,
               pemode=1, iots=None, extra=()):
    words = [bstart("MGATHER.CAS", dt)]
    if datr_word is not None:
        words.append(datr_word)
    words.append(dim(0, vc))
    if vr is not None:
        words.append(dim(1, vr))
    if cols is not None:
        words.append(dim(2, cols))
    words += iots if iots is not None else [iot_src2(0, 1, pemode, last=0),
                                           iot_src_dst(2, hand, size, pemode)]
    words.append(ior(A0) if ior_word is None else ior_word)
    return words + list(extra)


def cas(dt, vc, **kw):
    return cas_header(dt, vc, **kw) + [BSTOP]


def u16(v):
    return (v & 0xFFFF).to_bytes(2, "little")


# ----------------------------------------------------------------- decode (AVS DECODE-001)


def test_decode_golden_words():
    c = decode(0xD8811181)
    assert c.mnemonic == "BSTART.MGATHER.CAS" and c["DataType"] == 27
    assert c.form.form_id == "bstart_mgather_cas_32_fd8c8a3b720a"
    assert decode(0x00811181)["DataType"] == 0               # encoded zero is FP64
    d = decode(0x08001023)
    assert d.mnemonic == "B.DATR" and d["PadValueOrByteId"] == 1 and d["DataType"] == 0
    i1, i2 = decode(0x04004213), decode(0x0028D213)
    assert (i1["SrcTile0"], i1["SrcTile1"], i1["PEMode"], i1["L"]) == (0, 1, 1, 0)
    assert not i1.has("DstTile")
    assert (i2["SrcTile0"], i2["DstTile"], i2["SizeCode"], i2["PEMode"], i2["L"]) == (2, 0, 1, 1, 1)
    r = decode(0x00010013)
    assert (r["RegSrc0"], r["RegSrc1"], r["RegSrc2"], r["RegDst"]) == (2, 0, 0, 0)
    assert cas("U8", 2, vr=2, datr_word=datr(0, 0, 1)) == E7_WORDS


@pytest.mark.parametrize("code", range(32))
def test_decode_every_datatype(code):
    word = encode.bstart("MGATHER.CAS", code)
    s = small()
    r = run(s, [word])
    if code in tables.DTYPE_BY_CODE:
        assert decode(word).mnemonic == "BSTART.MGATHER.CAS"
        assert r.fault == "Fault_None"
        b = r.state.block
        assert bool(np.asarray(b.active)) and int(np.asarray(b.op)) == tables.OP_ID["MGATHER.CAS"]
        assert int(np.asarray(b.dtype)) == code
    else:                                   # 15, 21..23, 29..31: reserved
        assert decode(word) is None
        assert r.fault == "Fault_IllegalInstruction" and r.executed == 0
        assert same_except(s, r.state, "fault", "fault_address")


# ----------------------------------------------------------------- execution (E7, AVS EXEC-001)


def e7_state(fresh=small):
    return sources(("S16", ((-8, -5), (-3, -1))), ("U8", ((10, 99), (30, 98))),
                   ("U8", ((100, 101), (102, 103))), base=0x108,
                   memory=((0x100, bytes([10])), (0x103, bytes([20])), (0x105, bytes([30])),
                           (0x107, bytes([40]))), fresh=fresh)


@pytest.mark.parametrize("fresh", [small, pj.reset], ids=["small", "asl"])
def test_e7_compare_and_swap(fresh):
    s = e7_state(fresh)
    r = run(s, E7_WORDS)
    assert r.ok and r.executed == len(E7_WORDS) and r.fault_address is None
    st = r.state
    assert allocated(st) == [0, 1, 2, 3]
    t = tile(st, 3)
    assert t["allocated"] and t["dtype"] == tables.dtype("U8").code
    assert tables.TILE_LAYOUTS[t["layout"]] == "RowMajor"
    assert tables.TILE_LOCATIONS[t["location"]] == "Any"
    assert (t["rows"], t["cols"], t["valid_rows"], t["valid_cols"]) == (64, 2, 2, 2)
    assert (t["capacity"], t["mask"], t["defined_valid"]) == (128, 0b1000, 4)
    assert (t["k_repeat"], t["n_repeat"], t["cell_count"], t["storage_bytes"]) == (0, 0, 0, 0)
    w = [int(x) for x in t["words"][:128]]
    assert w[:4] == [10, 20, 30, 40]
    assert w[4:] == [0xFF] * 124                              # U8 Max padding
    assert t["defined"][:128].all() and not t["defined"][128:].any()
    assert list(gm(st, 0x100, 8)) == [100, 0, 0, 20, 0, 102, 0, 40]
    assert charge(st) == charge(s) + 128
    assert same_except(s, st, "gm", "tiles", "pc")
    for i in (0, 1, 2):                                       # sources unchanged
        assert all(np.array_equal(v, tile(s, i)[k]) for k, v in tile(st, i).items())


def test_null_padding_is_written_as_zero_and_defined():
    s = e7_state()
    t = tile(ok(s, cas("U8", 2, vr=2)), 3)                   # no B.DATR: Null
    assert [int(x) for x in t["words"][:4]] == [10, 20, 30, 40]
    assert [int(x) for x in t["words"][4:128]] == [0] * 124
    assert t["defined"][:128].all() and t["defined_valid"] == 4


@pytest.mark.parametrize("pad,word", [(0, 0), (1, 0x7FFF), (2, 0x8000), (3, 0)])
def test_signed_old_values_sign_extended_pads_not(pad, word):
    # S16 transfer: the old value 0x8001 lands sign-extended; -32767 (carrier
    # sign-extended) equals the raw bits 0x8001 and swaps in 0x1234
    s = sources(("U8", row(0, 2)), ("S16", row(-32767, 5)), ("S16", row(0x1234, 6)),
                base=0x200, memory=((0x200, u16(0x8001) + u16(0x7FFF)),))
    st = ok(s, cas("S16", 2, datr_word=datr(0, 0, pad)))
    t = tile(st, 3)
    assert int(t["words"][0]) == 0xFFFFFFFFFFFF8001 and int(t["words"][1]) == 0x7FFF
    assert int(t["words"][2]) == word                         # (1, 0) is padding
    assert gm(st, 0x200, 4) == u16(0x1234) + u16(0x7FFF)


@pytest.mark.parametrize("index_dt,value,disp", [
    ("S8", -2, -2), ("U8", 0xFE, 0xFE), ("S16", -6, -6), ("U16", 0xC00, 0xC00),
    ("S32", -4, -4), ("U32", 0x300, 0x300), ("S64", -8, -8), ("U64", (1 << 64) - 8, -8),
    ("S4X2", -2, -2), ("U4X2", 0xE, 14),
])
def test_index_displacement_from_any_integer_dtype(index_dt, value, disp):
    base = 0x200
    addr = (base + disp) % (1 << 64)
    s = sources((index_dt, row(value)), ("U8", row(7)), ("U8", row(9)), base=base,
                memory=((addr, bytes([7])),))
    st = ok(s, cas("U8", 1))
    assert int(tile(st, 3)["words"][0]) == 7 and gm(st, addr, 1) == bytes([9])


def test_displacement_wraps_mod_2_64():
    # base 2^64 - 16, displacement +0x110: address 0x100
    s = sources(("U16", row(0x110)), ("U8", row(3)), ("U8", row(4)), base=(1 << 64) - 16,
                memory=((0x100, bytes([3])),))
    assert gm(ok(s, cas("U8", 1)), 0x100, 1) == bytes([4])


@pytest.mark.parametrize("dt,old,expected,swaps", [
    ("FP32", 0x80000000, 0x00000000, False),     # -0.0 vs +0.0: raw bits differ
    ("FP32", 0x7FC00000, 0x7FC00000, True),      # NaN == NaN by raw bits
    ("FP16", 0x7C01, 0x7C01, True),
    ("FP64", 0x7FF8000000000001, 0x7FF8000000000001, True),
    ("E4M3", 0x80, 0x00, False),
    ("U64", (1 << 64) - 1, (1 << 64) - 1, True),
])
def test_comparison_is_raw_bit_equality(dt, old, expected, swaps):
    d = tables.dtype(dt)
    n = d.element_bytes
    s = sources(("U8", row(0)), (dt, row(expected)), (dt, row(0x11)), base=0x400,
                memory=((0x400, old.to_bytes(n, "little")),))
    st = ok(s, cas(dt, 1))
    assert int(tile(st, 3)["words"][0]) == old
    assert gm(st, 0x400, n) == (0x11 if swaps else old).to_bytes(n, "little")


def local_file_of_pe0_on(s, pe):
    """PE `pe`'s Local register file replaced by a copy of PE0's."""
    with jax.enable_x64(True):
        return s.replace(tiles=jax.tree_util.tree_map(lambda a: a.at[pe].set(a[0]), s.tiles))


def test_base_comes_from_the_current_pe():
    s = sources(("U8", row(0)), ("U8", row(1)), ("U8", row(2)), base=0,
                memory=((0x300, bytes([1])),))
    s = local_file_of_pe0_on(write_gpr(s, "a0", 0x300, pe=2), 2)
    st = ok(s, cas("U8", 1), pe=2)
    assert gm(st, 0x300, 1) == bytes([2]) and gm(st, 0, 1) == bytes([0])
    # the destination lands in PE2's file; PE0's file is untouched
    assert allocated(st, pe=2) == allocated(s, pe=2) + [3] and allocated(st) == allocated(s)


def test_explicit_zero_base_register():
    s = sources(("U8", row(4)), ("U8", row(0)), ("U8", row(5)), base=0x300)
    st = ok(s, cas("U8", 1, ior_word=ior(0)))                 # RegSrc0 = zero: base 0
    assert gm(st, 4, 1) == bytes([5]) and gm(st, 0x304, 1) == bytes([0])


def test_physical_col_from_lb2_and_mask_from_binding():
    s = e7_state()
    st = ok(s, cas("U8", 2, vr=2, cols=8, pemode=5))
    t = tile(st, 3)
    assert (t["rows"], t["cols"], t["mask"]) == (16, 8, 0b1100)
    assert [int(x) for x in t["words"][:10]] == [10, 20, 0, 0, 0, 0, 0, 0, 30, 40]
    assert t["defined"][:128].all() and charge(st) == charge(s) + 256


def test_relayout_code_selects_destination_layout():
    s = e7_state()
    t = tile(ok(s, cas("U8", 2, vr=2, datr_word=datr(1, 0, 1))), 3)     # ND2DN
    assert tables.TILE_LAYOUTS[t["layout"]] == "ColumnMajor" and t["rows"] == 64
    w = [int(x) for x in t["words"][:128]]
    assert (w[0], w[64], w[1], w[65]) == (10, 20, 30, 40)                 # c*rows + r
    assert sum(1 for x in w if x == 0xFF) == 124


def test_zn_destination_needs_fractal_shape():
    s = e7_state()
    # Col 2 is not a multiple of the 32-element U8 fractal row: rollback + TileLegality
    expect_fault(s, cas_header("U8", 2, vr=2, datr_word=datr(3, 0, 0)), "Fault_TileLegality")
    st = ok(s, cas("U8", 2, vr=2, cols=32, size=4, datr_word=datr(3, 0, 0)))
    t = tile(st, 3)
    assert tables.TILE_LAYOUTS[t["layout"]] == "ZN" and (t["rows"], t["cols"]) == (32, 32)
    w = [int(x) for x in t["words"]]
    assert (w[0], w[16], w[1], w[17]) == (10, 20, 30, 40)                 # ic*16 + ir
    assert t["defined"][:1024].all()


def test_cube_layout_takes_the_cube_path():
    expect_fault(e7_state(), cas_header("U8", 2, vr=2, datr_word=datr(22, 31, 1)),
                 "Fault_TileLegality")


def test_completion_by_the_next_bstart():
    s = e7_state()
    st = ok(s, cas_header("U8", 2, vr=2) + [bstart("TLOAD", "U8")])
    assert list(gm(st, 0x100, 1)) == [100] and bool(np.asarray(st.block.active))


# ----------------------------------------------------------------- duplicates (E8, AVS DUP-001)


def e8_state():
    return sources(("U32", row(0, 0)), ("U8", row(10, 10)), ("U8", row(20, 30)), base=0x180,
                   memory=((0x180, bytes([10])),))


E8_OUTCOMES = {(0, 1): (20, [10, 20]), (1, 0): (30, [30, 10])}


def e8_outcome(st):
    return gm(st, 0x180, 1)[0], [int(x) for x in tile(st, 3)["words"][:2]]


@pytest.mark.parametrize("order,want", [("row-major", (20, [10, 20])),
                                        ("reverse", (30, [30, 10]))])
def test_e8_duplicates_serialize(order, want):
    cfg = pj.preset("small").replace(cas_lane_order=order)
    st = ok(e8_state(), cas("U8", 2), cfg=cfg)
    assert e8_outcome(st) == want
    assert all(int(x) == 0 for x in tile(st, 3)["words"][2:128])


def test_e8_permuted_is_reproducible_and_reaches_both_outcomes():
    seen = set()
    for seed in range(-3, 4):
        cfg = pj.preset("small").replace(cas_lane_order="permuted", cas_seed=seed)
        first = e8_outcome(ok(e8_state(), cas("U8", 2), cfg=cfg))
        again = e8_outcome(ok(e8_state(), cas("U8", 2), cfg=cfg))
        assert first == again == E8_OUTCOMES[tuple(cas_order.lane_order(2, "permuted", seed))]
        seen.add(first[0])
    assert seen == {20, 30}


def test_lane_order_definitions():
    assert cas_order.LANE_ORDERS == pj.state.CAS_LANE_ORDERS
    assert cas_order.lane_order(5) == [0, 1, 2, 3, 4]
    assert cas_order.lane_order(5, "reverse") == [4, 3, 2, 1, 0]
    assert cas_order.lane_order(0, "permuted", 3) == []
    for seed in (0, 1, -1, 7, 2**40 + 3):
        for n in (1, 2, 7, 64):
            want = sorted(range(n), key=lambda i: (
                (i * 2654435761 + seed * 40503 + 12345) % 2**32, i))
            assert cas_order.lane_order(n, "permuted", seed) == want
    assert [int(k) for k in cas_order.lane_keys(4, -1)] == [
        cas_order.lane_key(i, -1) for i in range(4)]
    with pytest.raises(ValueError):
        cas_order.lane_order(3, "random")
    with pytest.raises(ValueError):
        cas_order.lane_order(-1)


# ----------------------------------------------------------------- lane preflight (AVS FAULT-001)


@pytest.mark.parametrize("index,base,fault,addr", [
    ((0, 2), 4094, "Fault_DataPage", 4096),          # E8 lane-preflight-001: second lane
    ((0, 2, 4), 4095, "Fault_DataAlignment", 4095),  # first lane misaligned
    ((0, 3, 4), 0x100, "Fault_DataAlignment", 0x103),  # middle lane misaligned
    ((0, 4, 2), 4092, "Fault_DataPage", 4096),       # middle lane out of range
    ((0, 2, 6), 4090, "Fault_DataPage", 4096),       # last lane
    ((0, 2), 4097, "Fault_DataAlignment", 4097),     # alignment before range
    ((0xFFFE,), 0, "Fault_DataPage", 0xFFFE),        # U16 index zero-extended (via U32 tile)
    (((1 << 32) - 2,), 0, "Fault_DataPage", 0xFFFFFFFE),  # U32 zero-extended
])
def test_lane_preflight_faults(index, base, fault, addr):
    n = len(index)
    s = sources(("U32", row(*index)), ("U16", row(*[11] * n)), ("U16", row(*[111] * n)),
                base=base, memory=((4094, u16(11)), (0x100, u16(11))))
    s1 = expect_fault(s, cas_header("U16", n, cols=4 if n == 3 else None), fault, addr)
    assert allocated(s1) == [0, 1, 2]
    assert gm(s1, 4094, 2) == u16(11) and gm(s1, 0x100, 2) == u16(11)


def test_signed_index_wraps_below_zero_and_faults():
    s = sources(("S16", row(-2)), ("U16", row(0)), ("U16", row(1)), base=0)
    expect_fault(s, cas_header("U16", 1), "Fault_DataPage", (1 << 64) - 2)


def test_fault_then_retry():
    s = sources(("U32", row(0, 2)), ("U16", row(11, 22)), ("U16", row(111, 222)), base=4094,
                memory=((4094, u16(11)),))
    s1 = ok(s, cas_header("U16", 2))
    r = run(s1, [BSTOP], on_fault="hold")
    assert r.fault == "Fault_DataPage" and r.fault_address == 4096
    s2 = write_gpr(r.state, "a0", 0x200)
    s2 = write_memory(s2, 0x200, u16(11) + u16(22))
    st = ok(s2, [BSTOP])
    assert allocated(st) == [0, 1, 2, 3]
    assert gm(st, 0x200, 4) == u16(111) + u16(222)
    assert [int(x) for x in tile(st, 3)["words"][:2]] == [11, 22]


# ----------------------------------------------------------------- packed types (AVS PACKED-001)


@pytest.mark.parametrize("dt", ["U4X2", "S4X2", "E2M1X2", "E1M2X2", "HiF4X2"])
def test_packed_transfer_types_rejected(dt):
    matching = dt in ("U4X2", "S4X2")
    src = dt if matching else "U8"
    s = sources(("U16", row(0, 1)), (src, row(1, 2)), (src, row(3, 4)), base=0x240)
    s1 = expect_fault(s, cas_header(dt, 2), "Fault_TileLegality")
    assert allocated(s1) == [0, 1, 2]


# ----------------------------------------------------------------- schema (AVS SCHEMA-001, D.4 3-5)


def test_schema_001_missing_bior():
    s = sources(("U16", row(0)), ("U8", row(1)), ("U8", row(2)), memory=((0x200, bytes([1])),))
    s1 = expect_fault(s, [bstart("MGATHER.CAS", "U8"), dim(0, 1), iot_src2(0, 1, last=0),
                          iot_src_dst(2, 0)], "Fault_TileLegality")
    assert gm(s1, 0x200, 1) == bytes([1]) and allocated(s1) == [0, 1, 2]


SCHEMA_CASES = {
    "B.IOS": dict(extra=[ios(3)]),
    "one B.IOT": dict(iots=[iot_src_dst(2, 0)]),
    "swapped B.IOTs": dict(iots=[iot_src_dst(2, 0, last=0), iot_src2(0, 1)]),
    "first with destination": dict(iots=[iot_src2(0, 1, last=0) | 1 << 15,
                                         iot_src_dst(2, 0)]),
    "second without destination": dict(iots=[iot_src2(0, 1, last=0), iot_src(2)]),
    "extra source binding": dict(iots=[iot_src2(0, 1, last=0), iot_src(5, last=0),
                                       iot_src_dst(2, 0)]),
    "not terminated": dict(iots=[iot_src2(0, 1, last=0), iot_src_dst(2, 0, last=0)]),
    "B.IOR RegSrc1": dict(ior_word=ior(A0, 1)),
    "B.IOR RegSrc2": dict(ior_word=ior(A0, 0, 1)),
    "B.IOR RegDst": dict(ior_word=ior(A0, dst=1)),
    "B.DATR DataType U8": dict(datr_word=datr(0, 27, 0)),
    "B.DATR DataType NONE": dict(datr_word=datr(0, 31, 0)),
    "B.DATR CMode": dict(datr_word=datr(0, 0, 0, cmode=1)),
    "B.DATR RMode": dict(datr_word=datr(0, 0, 0, rmode=1)),
    "B.DATR Sat": dict(datr_word=datr(0, 0, 0, sat=1)),
    "B.DATR Canonicalize": dict(datr_word=datr(0, 0, 0, canon=1)),
    "LB2 < LB0": dict(cols=1),
    "LB2 not a power of two": dict(cols=3),
    "LB2 zero": dict(cols=0),
    "LB1 zero": dict(vr=0),
}


@pytest.mark.parametrize("case", SCHEMA_CASES)
def test_schema_rejections(case):
    s = sources(("U16", row(0, 1)), ("U8", row(1, 2)), ("U8", row(3, 4)), base=0x200)
    expect_fault(s, cas_header("U8", 2, **SCHEMA_CASES[case]), "Fault_TileLegality")


@pytest.mark.parametrize("dims", [{}, {"lb0": 0}, {"lb0": 256, "lb1": 256}])
def test_dimension_rejections(dims):
    s = sources(("U16", row(0)), ("U8", row(1)), ("U8", row(2)), base=0x200)
    words = [bstart("MGATHER.CAS", "U8")]
    if "lb0" in dims:
        words.append(dim(0, dims["lb0"]))
    if "lb1" in dims:
        words.append(dim(1, dims["lb1"]))
    expect_fault(s, words + [iot_src2(0, 1, last=0), iot_src_dst(2, 0), ior(A0)],
                 "Fault_TileLegality")


def test_mask_mismatch_faults_at_the_binding():
    s = small()
    s1 = ok(s, [bstart("MGATHER.CAS", "U8"), dim(0, 1), iot_src2(0, 1, pemode=1, last=0)])
    r = run(s1, [iot_src_dst(2, 0, pemode=2)])
    assert r.fault == "Fault_TileLegality" and r.executed == 0


@pytest.mark.parametrize("case", ["FP16 index", "FP32 index", "expected dtype", "replacement dtype",
                                  "expected shape", "replacement shape", "index shape"])
def test_source_type_and_shape_rejections(case):
    idx, exp, rep = ("U16", row(0, 1)), ("U8", row(1, 2)), ("U8", row(3, 4))
    if case == "FP16 index":
        idx = ("FP16", row(0, 1))
    elif case == "FP32 index":
        idx = ("FP32", row(0, 4))
    elif case == "expected dtype":
        exp = ("U16", row(1, 2))
    elif case == "replacement dtype":
        rep = ("S8", row(3, 4))
    elif case == "expected shape":
        exp = ("U8", row(1))
    elif case == "replacement shape":
        rep = ("U8", ((3, 4), (5, 6)))
    else:
        idx = ("U16", row(0, 1, 2))
    s = sources(idx, exp, rep, base=0x200)
    expect_fault(s, cas_header("U8", 2), "Fault_TileLegality")


def test_undefined_or_unindexable_sources():
    s = sources(("U16", row(0, 1)), ("U8", row(1, 2)), ("U8", row(3, 4)), base=0x200)
    # a source slot that is not allocated
    expect_fault(s, cas_header("U8", 2, iots=[iot_src2(0, 9, last=0), iot_src_dst(2, 0)]),
                 "Fault_TileLegality")
    # a source that is not fully defined
    expect_fault(poke_tiles(s, "defined_valid", 1, 1), cas_header("U8", 2), "Fault_TileLegality")
    # a CUBE tile is not generically indexable
    c = cube_load(s, "U8", [[1, 2]], hand=1)
    assert allocated(c) == [0, 1, 2, 16]
    expect_fault(c, cas_header("U8", 2, iots=[iot_src2(0, 16, last=0), iot_src_dst(2, 0)]),
                 "Fault_TileLegality")


# ----------------------------------------------------------------- allocation (D.4 step 6) and order


def test_allocation_failures():
    tall = sources(("U16", ((0, 4),) * 16), ("U32", ((1, 2),) * 16), ("U32", ((3, 4),) * 16),
                   base=0x200)
    # U32 with Col 8: 1 KiB = 4 rows, 2 KiB = 8 rows < VR 16; 4 KiB fits
    expect_fault(tall, cas_header("U32", 2, vr=16, cols=8), "Fault_TileAllocation")
    expect_fault(tall, cas_header("U32", 2, vr=16, cols=8, size=2), "Fault_TileAllocation")
    assert tile(ok(tall, cas("U32", 2, vr=16, cols=8, size=3)), 3)["rows"] == 16
    s = sources(("U16", row(0, 2)), ("U8", row(1, 2)), ("U8", row(3, 4)), base=0x200)
    # hand T full (the small preset materializes 4 slots per hand); hand U is free
    full = load(s, "U8", [[0]])
    expect_fault(full, cas_header("U8", 2), "Fault_TileAllocation")
    assert allocated(ok(full, cas("U8", 2, hand=1))) == [0, 1, 2, 3, 16]
    # Core budget
    expect_fault(poke(s, tile_capacity=charge(s) + 127), cas_header("U8", 2),
                 "Fault_TileAllocation")
    # the pad fill writes rows*Col Words: past the State's tile_words (1024) -> TileAllocation
    expect_fault(s, cas_header("U8", 2, size=5), "Fault_TileAllocation")    # 1024 x 2
    assert tile(ok(s, cas("U8", 2, size=4)), 3)["defined"].all()             # 512 x 2


def test_check_order():
    s = sources(("U16", row(0, 1)), ("U8", row(1, 2)), ("U8", row(3, 4)), base=4095)
    full = load(s, "U8", [[0]])                                   # hand T full
    # schema (B.IOR surplus) before allocation
    expect_fault(full, cas_header("U8", 2, ior_word=ior(A0, 1)), "Fault_TileLegality")
    # B.DATR applicability and sources before allocation
    expect_fault(full, cas_header("U8", 2, datr_word=datr(0, 0, 0, sat=1)), "Fault_TileLegality")
    expect_fault(full, cas_header("U16", 2), "Fault_TileLegality")
    # allocation before the lane preflight (lane 1 at 4096 would fault)
    expect_fault(full, cas_header("U8", 2), "Fault_TileAllocation")
    # destination legality (NZ needs a fractal shape) before the lane preflight
    expect_fault(s, cas_header("U8", 2, datr_word=datr(4, 0, 0)), "Fault_TileLegality")
    # and the preflight itself
    expect_fault(s, cas_header("U8", 2, datr_word=datr(0, 0, 0)), "Fault_DataPage", 4096)


# ----------------------------------------------------------------- zero mask (E8 zero-001, AVS ZERO-001)


def test_zero_mask_is_a_strict_no_op():
    # bogus sources 63, no dims, no B.IOR; the second binding sets DstTile bits [8:7]
    second = iot_src(63, pemode=0) | 0b11 << 7
    words = [bstart("MGATHER.CAS", "U8"), iot_src2(63, 63, pemode=0, last=0), second, BSTOP]
    assert decode(second).form.form_id == decode(iot_src(63)).form.form_id
    s = small()
    st = ok(s, words)
    assert same_except(s, st, "pc") and allocated(st) == []


def test_zero_mask_precedes_every_check():
    words = [bstart("MGATHER.CAS", "U4X2"), datr(0, 31, 1, cmode=1, sat=1),
             iot_src2(0, 1, pemode=0, last=0), iot_src_dst(2, 0, pemode=0), ios(4, pemode=0),
             ior(A0, 1, 1, 1), BSTOP]
    s = small()
    assert same_except(s, ok(s, words), "pc")


# ----------------------------------------------------------------- the any-serialization checker


def chain_state():
    """Four lanes on one byte (initial 10) whose outcome depends on the order."""
    return sources(("U8", row(0, 0, 0, 0)), ("U8", row(10, 20, 10, 30)),
                   ("U8", row(20, 30, 40, 10)), base=0x180, memory=((0x180, bytes([10])),))


def test_checker_accepts_every_serialization():
    s, words = chain_state(), cas("U8", 4)
    outcomes = set()
    for perm in itertools.permutations(range(4)):
        r = cas_check.run_in_order(s, words, perm)
        assert r.ok
        outcomes.add((gm(r.state, 0x180, 1), tuple(int(x) for x in tile(r.state, 3)["words"][:4])))
        res = cas_check.explains(s, words, r.state)
        assert res.ok and not res.undecided, res.reason
        again = cas_check.run_in_order(s, words, res.order)
        assert not state_differences(again.state, r.state)
    assert len(outcomes) > 4


@pytest.mark.parametrize("order", ["row-major", "reverse", "permuted"])
def test_checker_accepts_each_configured_order(order):
    cfg = pj.preset("small").replace(cas_lane_order=order, cas_seed=5)
    for state, words in ((chain_state(), cas("U8", 4)), (e8_state(), cas("U8", 2)),
                         (e7_state(), E7_WORDS)):
        r = run(state, words, cfg=cfg)
        assert cas_check.explains(state, words, r.state).ok


def test_checker_rejects_tampered_results():
    s, words = chain_state(), cas("U8", 4)
    good = run(s, words).state
    bad_dest = poke_tiles(good, "words", (3, 1), 99)           # TileIndex 3 = slot 3
    res = cas_check.explains(s, words, bad_dest)
    assert not res.ok and not res.undecided and "0x180" in res.reason
    bad_mem = write_memory(good, 0x180, bytes([77]))
    assert not cas_check.explains(s, words, bad_mem).ok
    # a value no order produces for the destination's carrier (bits past the U8 set)
    w = int(tile_words(good.tiles, 0, 3)[0][0])
    res = cas_check.explains(s, words, poke_tiles(good, "words", (3, 0), w | 1 << 20))
    assert not res.ok and "tiles.words" in res.reason
    # anything else must match the oracle's run
    res = cas_check.explains(s, words, write_memory(good, 0x500, b"\x01"))
    assert not res.ok and "gm" in res.reason


def test_checker_independent_groups_and_large_group():
    # two groups (bytes 0x180 and 0x181) interleaved in the tile
    s = sources(("U8", row(0, 1, 0, 1)), ("U8", row(10, 5, 20, 6)), ("U8", row(20, 6, 30, 7)),
                base=0x180, memory=((0x180, bytes([10, 5])),))
    words = cas("U8", 4)
    for perm in ([3, 2, 1, 0], [1, 0, 3, 2], [2, 3, 0, 1]):
        r = cas_check.run_in_order(s, words, perm)
        assert cas_check.explains(s, words, r.state).ok
    # 64 lanes on one byte, lane i expects i and writes i+1: fast despite 64! orders
    n = 64
    big = sources(("U8", row(*[0] * n)), ("U8", row(*range(n))), ("U8", row(*range(1, n + 1))),
                  base=0x180)
    words = cas("U8", n)
    cfg = pj.preset("small").replace(cas_lane_order="permuted", cas_seed=11)
    r = run(big, words, cfg=cfg)
    res = cas_check.explains(big, words, r.state)
    assert res.ok and len(res.order) == n
    # a bound too small gives up with a reason
    res = cas_check.explains(chain_state(), cas("U8", 4), run(chain_state(), cas("U8", 4)).state,
                             max_nodes=1)
    assert not res.ok and res.undecided and "gave up" in res.reason


def test_checker_without_lanes_and_bad_streams():
    s = sources(("U32", row(0, 2)), ("U16", row(11, 22)), ("U16", row(111, 222)), base=4094)
    words = cas("U16", 2)
    r = run(s, words)                                        # lane preflight fault
    res = cas_check.explains(s, words, r.state)
    assert res.ok and res.order == []
    assert not cas_check.explains(s, words, s).ok
    with pytest.raises(ValueError):
        cas_check.explains(s, [bstart("TLOAD", "U8"), BSTOP], s)
    with pytest.raises(ValueError):
        cas_check.explains(s, words + words, s)


def _simulate(initial, lanes, order):
    """(observed old value per lane, final value) of one address group."""
    cur, seen = initial, {}
    for i in order:
        _, exp, rep = lanes[i]
        seen[i] = cur
        if cur == exp:
            cur = rep
    return seen, cur


def test_group_search_matches_brute_force():
    rng = np.random.default_rng(7)
    for _ in range(400):
        k = int(rng.integers(1, 6))
        lanes = [(None, int(rng.integers(0, 3)), int(rng.integers(0, 3))) for _ in range(k)]
        initial = int(rng.integers(0, 3))
        if rng.random() < 0.5:                  # a reachable outcome
            seen, final = _simulate(initial, lanes, rng.permutation(k).tolist())
            obs = [seen[i] for i in range(k)]
        else:                                   # an arbitrary claim
            obs, final = [int(rng.integers(0, 3)) for _ in range(k)], int(rng.integers(0, 3))
        spec = [(i, obs[i], e, r) for i, (_, e, r) in enumerate(lanes)]
        got = cas_check.serialize_group(initial, final, spec, cas_check._Budget(10**6))
        want = any(_simulate(initial, lanes, p) == (dict(enumerate(obs)), final)
                   for p in itertools.permutations(range(k)))
        assert (got is not None) == want, (initial, final, spec)
        if got is not None:
            assert sorted(got) == list(range(k))
            assert _simulate(initial, lanes, got) == (dict(enumerate(obs)), final)
