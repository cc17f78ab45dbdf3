"""Reference executor: TMOV (TLSU Function 2, the Local tile copy, and the
Shared moves 9 L2S.INSERT, 10 L2S.PUBLISH, 11 S2L.BROADCAST, 12 S2L.EXTRACT).

Golden vectors from the spec's own TMOV tests (tests/asl/block/execution/
BSTART.TMOV, .../shared-tlsu) and the Function-2 vectors F1..F14 of
docs/tmov.md (F3, F4, F5, F13, the EXTRACT of a partly initialized register
and a BF16 PUBLISH into an FP16 record were run on the 0.58.3 model), and one
test per ordered check (MV.*, MS.*, HDR.6 iot_l2s_destination). `run` and
`run_core` are module-level names: tests/test_tmov.py runs this file again on
the JAX executor.
"""

import numpy as np
import pytest

import ptojax as pj
from ptojax import tables
from ptojax.isa.decode import decode as decode_word
from ptojax.isa.encode import (BSTOP, catr, datr, dim, fpatr, ior, ios, iot_dst, iot_src,
                               iot_src2, iot_src_dst)
from ptojax.reference import run, run_core
from _bundles import (allocated, bstart, local, poke, poke_local, record, run_ok, same_except, small,
                      with_regs, write_memory)

HS = pj.preset("small").hand_slots


def ok(s, words):
    return run_ok(run, s, words, all_executed=False)


def expect_fault(s, header, fault, completing=BSTOP):
    """The block `header` opened, its completing word faults `fault` with
    nothing but the fault register changed (a rolled-back destination too)."""
    s1 = ok(s, header)
    r = run(s1, [completing], on_fault="hold")
    assert r.fault == fault and r.executed == 0
    assert same_except(s1, r.state, "fault", "fault_address")
    return s1


def loaded(dt="U8", vr=1, vc=1, values=(0x5A,), size=1, hand=0, pemode=7, s=None):
    """A State whose T<hand*16> is a TLOADed vr x vc tile of `values` (row-major)."""
    d = tables.dtype(dt)
    s = with_regs(s if s is not None else small(), a0=0x100, a1=vc * d.element_bytes)
    data = b"".join(int(v).to_bytes(d.element_bytes, "little") for v in values)
    s = write_memory(s, 0x100, data)
    return ok(s, [bstart("TLOAD", dt), dim(0, vc), dim(1, vr), ior(2, 3),
                  iot_dst(hand, size, pemode), BSTOP])


def tmov(dt, *bindings, op="TMOV"):
    return [bstart(op, dt), *bindings, BSTOP]


def test_tmov_words_decode_to_one_form():
    for word, op in ((0x00211181, ""), (0x00911181, "TMOV.L2S.INSERT"),
                     (0x00A11181, "TMOV.L2S.PUBLISH"), (0x00B11181, "TMOV.S2L.BROADCAST"),
                     (0x00C11181, "TMOV.S2L.EXTRACT")):
        c = decode_word(word)
        assert c.fault is None and c.form_id == "bstart_tmov_32_211446509efb"
        assert c.variant == op
        assert bstart(op or "TMOV", 0) == word
    assert decode_word(0xF8211181).fault is None          # DTYPE_NONE
    assert decode_word(0x78211181).fault == "Fault_IllegalInstruction"   # DataType 15
    assert pj.asm.assemble("BSTART.TMOV.S2L.EXTRACT U8") == [0xD8C11181]
    assert pj.asm.disassemble([0xD8C11181]) == "BSTART.TMOV.S2L.EXTRACT U8"


# ----------------------------------------------------------------- Function 2 golden (F1..F14)


def test_f1_local_copy():
    s = loaded()
    r = run(s, [0xD8211181, 0x0008DE93, BSTOP])
    assert r.fault == "Fault_None"
    t = local(r.state, 16, 0)
    assert (int(t["dtype"]), int(t["capacity"]), int(t["rows"]), int(t["cols"])) == (27, 128, 128, 1)
    assert (int(t["valid_rows"]), int(t["valid_cols"]), int(t["mask"])) == (1, 1, 0b1111)
    assert int(t["defined_valid"]) == 1 and int(t["words"][0]) == 0x5A and t["defined"][0]
    assert not t["defined"][1:].any()
    src, src_after = local(s, 0, 0), local(r.state, 0, 0)
    assert all(np.array_equal(src[k], src_after[k]) for k in src)


def test_f2_dtype_none_takes_the_source_type():
    r = run(loaded(dt="S16", values=(0x1234,)), [0xF8211181, iot_src_dst(0, 1, 1, 7), BSTOP])
    assert r.fault == "Fault_None"
    t = local(r.state, 16, 0)
    assert int(t["dtype"]) == tables.dtype("S16").code and int(t["words"][0]) == 0x1234


def test_f12_source_and_destination_in_two_bindings():
    for order in ((iot_src(0, 7, 0), iot_dst(1, 1, 7)), (iot_dst(1, 1, 7, 0), iot_src(0, 7))):
        r = run(loaded(), tmov("U8", *order))
        assert r.fault == "Fault_None" and int(local(r.state, 16, 0)["words"][0]) == 0x5A


def test_f13_partial_mask_copies_every_quarter():
    values = list(range(1, 129))                    # 4 x 32 U8: one row per quarter
    s = loaded(vr=4, vc=32, values=values)
    r = run(s, tmov("U8", iot_src_dst(0, 1, 1, 1)))              # mask 1000
    t = local(r.state, 16, 0)
    assert r.fault == "Fault_None" and int(t["mask"]) == 0b1000
    assert t["words"][:128].tolist() == values and t["defined"][:128].all()
    assert int(t["defined_valid"]) == 128


def test_layout_kept_and_b_dim_zero_inherits():
    s = ok(with_regs(small(), a0=0x100), [bstart("TLOAD", "U8"), datr(1, 0, 0), dim(0, 2),
                                          dim(1, 3), ior(2, 0), iot_dst(0, 1, 7), BSTOP])
    r = run(s, tmov("U8", iot_src_dst(0, 1, 1, 7)))
    assert r.fault == "Fault_TileLegality"          # RowMajor destination, ColumnMajor source
    fp = ok(with_regs(small(), a0=0x100), [bstart("TLOAD", "FP64"), datr(1, 0, 0), dim(0, 2),
                                           dim(1, 3), ior(2, 0), iot_dst(0, 1, 7), BSTOP])
    r = run(fp, tmov("FP64", datr(1, 0, 0), dim(1, 0), iot_src_dst(0, 1, 1, 7)))
    assert r.fault == "Fault_None"
    t, src = local(r.state, 16, 0), local(fp, 0, 0)
    for k in ("layout", "rows", "cols", "valid_rows", "valid_cols", "dtype"):
        assert int(t[k]) == int(src[k]), k


def test_f10_zero_mask_is_a_no_op():
    s = loaded()
    r = run(s, [0xD8211181, 0x0008D093, BSTOP])
    assert r.fault == "Fault_None" and same_except(s, r.state, "pc")


# ----------------------------------------------------------------- Function 2 checks


def test_mv1_two_shared_bindings():
    expect_fault(loaded(), [bstart("TMOV", "U8"), ios(5, 7), ios(6, 7), iot_src_dst(0, 1, 1, 7)],
                 "Fault_TileLegality")


def test_mv2_shared_path_reads_no_gpr():
    expect_fault(loaded(), [bstart("TMOV", "U8"), ior(2, 0), ios(5, 7), iot_src_dst(0, 1, 1, 7)],
                 "Fault_BundleControl")


def test_mv3_f11_a_shared_binding_in_a_local_tmov():
    expect_fault(loaded(), [0xD8211181, 0x00501E13, 0x0008DE93], "Fault_TileLegality")


@pytest.mark.parametrize("header", [
    [0xD8211181, 0x00010013, 0x0008DE93],                      # F7: B.IOR RegSrc0
    [0xD8211181, ior(0, 0, 0, 3), 0x0008DE93],                 # B.IOR RegDst
    [0xD8211181, 0x0000DE93],                                  # F8: no L=1
    [0xD8211181, iot_src2(0, 1, 7)],                           # two sources, no destination
    [0xD8211181, iot_dst(1, 1, 7)],                            # no source
    [0xD8211181, iot_src(0, 7, 0), iot_src(1, 7, 0), iot_dst(1, 1, 7)],
], ids=["ior_src", "ior_dst", "unterminated", "two_sources", "no_source", "extra_source"])
def test_mv4_bindings(header):
    expect_fault(loaded(), header, "Fault_BundleControl")


@pytest.mark.parametrize("attrs", [dict(dtype=27), dict(dtype=31), dict(cmode=1), dict(rmode=1),
                                   dict(sat=1), dict(canon=1), dict(pad=1)])
def test_mv5_datr_only_layout(attrs):
    fields = dict(layout=0, dtype=0, pad=0) | attrs
    expect_fault(loaded(), [0xD8211181, datr(**fields), 0x0008DE93], "Fault_TileLegality")


def test_mv6_dtype_none_needs_a_configured_source():
    s = loaded()
    expect_fault(s, [0xF8211181, iot_src_dst(3, 1, 1, 7)], "Fault_TileLegality")


def test_mv7_destination():
    s = loaded()
    expect_fault(s, [0xD8211181, dim(2, 3), 0x0008DE93], "Fault_TileAllocation")   # Col 3
    expect_fault(s, [0xD8211181, dim(1, 200), 0x0008DE93], "Fault_TileAllocation")  # VR > rows
    full = s
    for _k in range(HS):                                     # F14: the U hand full
        full = ok(full, [bstart("TLOAD", "U8"), iot_dst(1, 1, 7), BSTOP])
    expect_fault(full, [0xD8211181, 0x0008DE93], "Fault_TileAllocation")
    cap = poke(s, tile_capacity=640)                        # 512 B in use, 512 more asked
    expect_fault(cap, [0xD8211181, 0x0008DE93], "Fault_TileAllocation")


def test_mv8_f6_source_not_defined():
    s = loaded()
    expect_fault(s, [0xD8211181, iot_src_dst(3, 1, 1, 7)], "Fault_TileLegality")  # unallocated
    bad = poke_local(s, 0, 0, defined_valid=0)
    expect_fault(bad, [0xD8211181, 0x0008DE93], "Fault_TileLegality")
    # the source's own index free: the destination takes it, still not a source
    expect_fault(small(), [0xD8211181, iot_src_dst(16, 1, 1, 7)], "Fault_TileLegality")


@pytest.mark.parametrize("header", [
    [0x00211181, 0x0008DE93],                                  # F3: FP64 rows 16
    [0xD8211181, 0x00001023, 0x0008DE93],                      # F4: B.DATR -> FP64
    [0xD8211181, 0x00095E93],                                  # F5: SizeCode 2
    [0xD8211181, datr(1, 0, 0), 0x0008DE93],                   # ColumnMajor: FP64 too
    [0xD8211181, dim(1, 2), 0x0008DE93],                       # valid rows differ
    [0xC8211181, 0x0008DE93],                                  # U32 against U8
], ids=["F3", "F4", "F5", "layout", "valid_rows", "dtype"])
def test_mv9_match(header):
    expect_fault(loaded(), header, "Fault_TileLegality")


def test_f9_cube_layout_code_takes_the_cube_path():
    expect_fault(loaded(), [0xD8211181, 0x00001B23, 0x0008DE93], "Fault_TileLegality")


def test_header_words_in_a_tmov_block():
    s = loaded()
    expect_fault(s, [0xD8211181, fpatr()][:1], "Fault_BundleControl", completing=fpatr())
    r = run(s, tmov("U8", catr(dr=1), 0x0008DE93))           # DR=1: a TLSU block
    assert r.fault == "Fault_None"


# ----------------------------------------------------------------- Shared golden


def test_publish_001():
    s = loaded()
    s = ok(s, [0xD8911181, 0x00085E13, 0x00709E13, BSTOP])           # INSERT
    rec = record(s, 7)
    assert (int(rec["initialized_mask"]), bool(rec["published"])) == (0b1111, False)
    assert int(np.asarray(s.shared.words)[np.flatnonzero(np.asarray(s.shared.sid) == 7)[0], 0]) == 0x5A
    expect_fault(s, [0xD8B11181, 0x00701E13, 0x0008EE93], "Fault_TileLegality")   # unpublished
    s = ok(s, [0xD8A11181, 0x00085E13, 0x00709E13, BSTOP])           # PUBLISH
    assert bool(record(s, 7)["published"])
    s = ok(s, [0xD8B11181, 0x00701E13, 0x0008EE93, BSTOP])           # BROADCAST
    t = local(s, 16, 0)
    assert int(t["words"][0]) == 0x5A and int(t["defined_valid"]) == 1
    assert bool(record(s, 7)["published"])


def test_extract_001_from_an_unallocated_register():
    s = small()
    r = run(s, [0xD8C11181, 0x02A01213, 0x0008E293, BSTOP])
    assert r.fault == "Fault_None" and record(r.state, 42) is None
    t = local(r.state, 16, 0)
    assert (int(t["rows"]), int(t["cols"]), int(t["mask"])) == (128, 1, 0b1000)
    assert t["words"][:32].tolist() == [0x2A ^ e for e in range(32)]
    assert t["defined"][:32].all() and not t["defined"][32:128].any()
    assert int(t["defined_valid"]) == 0


def test_extract_of_a_partly_initialized_register():
    """Run on the model: INSERT mask 1000, EXTRACT mask 1100 of a 128 B U8 tile."""
    s = ok(loaded(), [bstart("TMOV.L2S.INSERT", "U8"), iot_src(0, 1), ios(23, 1, 1), BSTOP])
    r = run(s, [bstart("TMOV.S2L.EXTRACT", "U8"), ios(23, 5), iot_dst(0, 1, 5), BSTOP])
    assert r.fault == "Fault_None"
    t = local(r.state, 1, 0)
    assert t["words"][:64].tolist() == [0x5A] + [0] * 31 + [0x17 ^ e for e in range(32, 64)]
    assert t["defined"][:64].all() and not t["defined"][64:128].any()
    assert int(t["mask"]) == 0b1100


def test_partial_004_source_mask_not_compared():
    s = loaded(dt="U64", values=(7,), pemode=4)                       # T0 alloc mask 0001
    s = ok(s, [0xC0911181, 0x01709213, 0x00085213, BSTOP])           # INSERT mask 1000
    rec = record(s, 23)
    assert (int(rec["allocation_mask"]), int(rec["initialized_mask"])) == (0b1000, 0b1000)
    assert bool(rec["contents_defined"]) and 0 in allocated(s, 0)
    # a zero-mask INSERT changes nothing (mask-partition-005)
    r = run(s, [0xC0911181, 0x01708013, 0x00085013, BSTOP])
    assert r.fault == "Fault_None" and same_except(s, r.state, "pc")
    s = ok(s, [0xC0C11181, 0x01701A13, 0x0008EA13, BSTOP])           # EXTRACT mask 1100
    t = local(s, 1, 0)
    assert t["words"][:8].tolist() == [7, 0, 0, 0] + [0x17 ^ e for e in range(4, 8)]


def test_publish_003_and_zero_ior():
    s = loaded(dt="U64", values=(11,))
    bad = [0xC0A11181, 0x01309E13, 0x00010013, 0x00085E13]
    expect_fault(s, bad, "Fault_BundleControl")                      # zero-ior-002
    s = ok(s, [0xC0A11181, 0x01309E13, 0x00000013, 0x00085E13, BSTOP])
    assert bool(record(s, 19)["published"])
    s = ok(s, [0xC0B11181, 0x01301E13, iot_dst(1, 1, 7), BSTOP])
    s = ok(s, [0xC0C11181, 0x01301E13, iot_dst(2, 1, 7), BSTOP])
    assert int(local(s, 16, 0)["words"][0]) == 11 and int(local(s, 32, 0)["words"][0]) == 11


def test_publish_needs_the_record_type():
    """Run on the model: a BF16 PUBLISH into an FP16 record faults."""
    s = loaded(dt="FP16", values=(0x5A,))
    s = loaded(dt="BF16", values=(0x5A,), s=s)
    s = ok(s, [bstart("TMOV.L2S.PUBLISH", "FP16"), iot_src(0, 7), ios(7, 7, 1), BSTOP])
    expect_fault(s, [bstart("TMOV.L2S.PUBLISH", "BF16"), iot_src(1, 7), ios(7, 7, 1)],
                 "Fault_TileLegality")


# ----------------------------------------------------------------- Shared checks


def test_ms1_missing_binder_006():
    expect_fault(loaded(), [0xD8A11181, 0x00085E13], "Fault_TileLegality")


def test_ms2_ms3_scalar_and_datr():
    expect_fault(loaded(), [0xD8911181, ior(2), 0x00085E13, 0x00709E13], "Fault_BundleControl")
    expect_fault(loaded(), [0xD8911181, datr(0, 0, 0, cmode=1), 0x00085E13, 0x00709E13],
                 "Fault_TileLegality")


def test_hdr6_l2s_binding_names_no_destination():
    s = ok(loaded(), [0xD8911181])
    r = run(s, [0x0008DA13], on_fault="hold")                          # Src0 -> T<1>
    assert r.fault == "Fault_TileLegality" and r.executed == 0
    s = ok(loaded(), [0xD8C11181])                                   # EXTRACT: allowed
    assert run(s, [iot_dst(1, 1, 7)]).fault == "Fault_None"


@pytest.mark.parametrize("header", [
    [0xD8911181, 0x00701E13, 0x00085E13],                      # B.IOS size 0
    [0xD8911181, 0x00709E13, iot_src(0, 7, 0), iot_src(0, 7)],  # two bindings
    [0xD8911181, 0x00709E13, iot_src(0, 7, 0)],                # no L=1
], ids=["size0", "two", "unterminated"])
def test_ms4_local_schema(header):
    expect_fault(loaded(), header, "Fault_TileLegality")


def test_ms4_mask_differs_with_the_b_ios_first():
    expect_fault(loaded(), [0xD8911181, ios(7, 1, 1), iot_src(0, 7)], "Fault_TileLegality")


def test_ms5_local_source():
    s = loaded()
    expect_fault(s, [0xD8911181, iot_src(0, 7), ios(7, 7, 2)], "Fault_TileLegality")  # 256 B
    expect_fault(s, [0xD8911181, iot_src(5, 7), ios(7, 7, 1)], "Fault_TileLegality")  # free


def test_ms6_update_compatible():
    s = ok(loaded(), [0xD8911181, iot_src(0, 1), ios(7, 1, 1), BSTOP])       # alloc 1000
    expect_fault(s, [0xD8911181, iot_src(0, 7), ios(7, 7, 1)], "Fault_TileLegality")
    s2 = loaded(vr=2, vc=1, values=(1, 2), hand=0, s=s)                      # T1: 2 valid rows
    expect_fault(s2, [0xD8911181, iot_src(1, 1), ios(7, 1, 1)], "Fault_TileLegality")


def test_ms7_no_free_record():
    s = loaded()
    for sid in range(pj.preset("small").shared_slots):
        s = ok(s, [0xD8911181, iot_src(0, 7), ios(100 + sid, 7, 1), BSTOP])
    expect_fault(s, [0xD8911181, iot_src(0, 7), ios(7, 7, 1)], "Fault_TileAllocation")


def test_ms8_publish_must_complete_the_record():
    s = ok(loaded(), [0xD8A11181, iot_src(0, 1), ios(7, 1, 1), BSTOP])       # fresh: publishes
    assert bool(record(s, 7)["published"])
    s = ok(s, [0xD8911181, iot_src(0, 1), ios(8, 1, 1), BSTOP])
    s = poke_local(s, 0, 0, mask=0b1111)
    r = run(s, [0xD8A11181, iot_src(0, 1), ios(8, 1, 1), BSTOP])            # 1000|1000 == 1000
    assert r.fault == "Fault_None"


def test_ms9_read_schema():
    s = ok(loaded(), [0xD8A11181, iot_src(0, 7), ios(7, 7, 1), BSTOP])
    expect_fault(s, [0xD8C11181, ios(7, 7, 1), iot_dst(1, 1, 7)], "Fault_TileLegality")  # size 1
    expect_fault(s, [0xD8C11181, ios(7, 7), iot_dst(1, 2, 7)], "Fault_TileLegality")     # 256 B
    expect_fault(s, [0xC8C11181, ios(7, 7), iot_dst(1, 1, 7)], "Fault_TileLegality")     # U32
    expect_fault(s, [0xD8C11181, ios(7, 7), dim(1, 2), iot_dst(1, 1, 7)], "Fault_TileLegality")
    expect_fault(s, [0xD8C11181, ios(7, 7), iot_src_dst(0, 1, 1, 7)], "Fault_TileLegality")
    expect_fault(s, [0xF8C11181, ios(9, 7), iot_dst(1, 1, 7)], "Fault_TileLegality")     # NONE
    r = run(s, [0xF8C11181, ios(7, 7), iot_dst(1, 1, 7), BSTOP])            # NONE: the record's
    assert r.fault == "Fault_None" and int(local(r.state, 16, 0)["dtype"]) == 27


def test_ms10_broadcast_ready():
    s = ok(loaded(), [0xD8A11181, iot_src(0, 7), ios(7, 7, 1), BSTOP])
    expect_fault(s, [0xD8B11181, ios(7, 1), iot_dst(1, 1, 1)], "Fault_TileLegality")     # mask
    expect_fault(s, [0xD8B11181, ios(9, 7), iot_dst(1, 1, 7)], "Fault_TileLegality")     # none


def test_ms11_destination():
    s = small()
    for _k in range(HS):
        s = ok(s, [bstart("TLOAD", "U8"), iot_dst(1, 1, 7), BSTOP])
    expect_fault(s, [0xD8C11181, ios(7, 7), iot_dst(1, 1, 7)], "Fault_TileAllocation")


def test_ms12_b_datr_makes_the_destination_fp64():
    s = ok(loaded(), [0xD8A11181, iot_src(0, 7), ios(7, 7, 1), BSTOP])
    expect_fault(s, [0xD8C11181, ios(7, 7), datr(0, 0, 0), iot_dst(1, 1, 7)],
                 "Fault_TileLegality")


def test_run_core_shared_tmov_runs_once():
    s = loaded()
    r = run_core(s, [0xD8A11181, 0x00085E13, 0x00709E13, BSTOP])
    assert r.fault == "Fault_None" and bool(record(r.state, 7)["published"])
    r = run_core(r.state, [0xD8B11181, 0x00701E13, 0x0008EE93, BSTOP])
    assert r.fault == "Fault_None" and int(local(r.state, 16, 0)["words"][0]) == 0x5A
