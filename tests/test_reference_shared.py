"""Reference executor: Shared tiles, the Core, and cooperative TMATMUL (issue 5).

Scenarios for docs/shared-decisions.md (ADR 0100 group-M, spec/matrix.md D,
spec/state-and-transport.md A.7/C.9), all built from real instruction words:
Shared TLOAD / TSTORE / TSTORE.SPART golden behaviour and one test per ordered
check; `run_core` collectives; cooperative TMATMUL for group_M 1, 17, 64, 65,
128 with exact per-PE fragments, the sparse-mask, structural and Shared
negatives, Trans bits, MX with Shared scales, BIAS, ACC, both semantics and
both numeric profiles. Hand-made states (garbage descriptors, edited Shared
records) are made by editing State arrays directly.

`run` and `run_core` are module-level names so that tests/_scenarios.py can
re-bind this file to the JAX executor. All scenarios use pj.preset("small")
(optionally with semantics="0.58.3" or profile="ieee").
"""

import jax
import numpy as np
import pytest

import ptojax as pj
from ptojax import tables
from ptojax.isa.encode import BSTOP, FPATR0, datr, dim, fpatr, ior, ios
from ptojax.reference import layouts as ref_layouts
from ptojax.reference import run, run_core
from ptojax.state import state_leaves
import _bundles
from _bundles import (OLD, PES, SMALL, X2, X3, allocated, bstart, charge, coop, dims, gpr_all, iot, local,
                      mstart, poke, poke_local, record, run_ok, same_except, sload)

IEEE = SMALL.replace(profile="ieee")
MASK64 = (1 << 64) - 1
HS = SMALL.hand_slots
SPARSE_PEMODES = (1, 2, 3, 4, 5, 6)           # masks 1000 0100 0010 0001 1100 1110


def bit(pe):
    return 1 << (3 - pe)


# ----------------------------------------------------------------- state views (raw arrays)


def shared_charge(s):
    sh = s.shared
    return int(sum(bin(int(m)).count("1") * int(c) for sid, m, c in
                   zip(np.asarray(sh.sid), np.asarray(sh.allocation_mask),
                       np.asarray(sh.capacity)) if sid >= 0))


def poke_shared(s, sid, **fields):
    """Edit fields of the record holding `sid` (hand-made Shared states)."""
    i = int(np.flatnonzero(np.asarray(s.shared.sid) == sid)[0])
    new = {}
    for k, v in fields.items():
        a = np.asarray(getattr(s.shared, k)).copy()
        a[i] = v
        new[k] = a
    with jax.enable_x64(True):
        return s.replace(shared=s.shared.replace(**{k: jax.numpy.asarray(v) for k, v in new.items()}))


def garbage(s, pe, index, seed):
    """A garbage Local descriptor and payload at (pe, index): allocated, with
    nonsense layout/dtype/shape fields and random Words, partly defined."""
    rng = np.random.default_rng(seed)
    W = s.tiles.words.shape[-1]
    return poke_local(s, pe, index, allocated=True, dtype=int(rng.choice([4, 17, 99, -3])),
                      layout=int(rng.choice([4, 5, 6, 0, 42])), location=int(rng.integers(0, 9)),
                      capacity=int(rng.choice([0, 100, 128, 1 << 20])),
                      rows=int(rng.integers(-5, 70000)), cols=int(rng.integers(-5, 70000)),
                      valid_rows=int(rng.integers(-5, 70000)),
                      valid_cols=int(rng.integers(-5, 70000)), k_repeat=7, n_repeat=-1,
                      cell_count=3, storage_bytes=12345, mask=int(rng.integers(0, 16)),
                      words=rng.integers(0, 2**63, W, dtype=np.uint64),
                      defined=rng.random(W) < 0.5, defined_valid=int(rng.integers(-5, 99)))


# ----------------------------------------------------------------- runners


def ok(s, words, cfg=SMALL, core=True, pe=0):
    return run_ok(run_core, s, words, cfg=cfg) if core else run_ok(run, s, words, pe=pe, cfg=cfg)


def fails(s, words, fault, cfg=SMALL, core=True, pe=0, addr=None):
    """The completing (last) word faults; nothing but the fault register, the
    PC and the abandoned block changes (every PE's Local file, the Shared
    records and GM stay bit-identical)."""
    r = run_core(s, words, cfg=cfg) if core else run(s, words, pe=pe, cfg=cfg)
    assert r.fault == fault, r.fault
    assert r.executed == len(words) - 1
    pc = int(np.asarray(s.pc)) + 4 * (len(words) - 1)
    assert int(np.asarray(r.state.fault_address)) == (pc if addr is None else addr)
    assert r.fault_address == addr
    assert int(np.asarray(r.state.pc)) == pc
    assert same_except(s, r.state, "fault", "fault_address", "pc", "block")
    return r


# ----------------------------------------------------------------- encoders


def sstore(dt, sid, pemode=7, vr=None, vc=None, cols=None, regs=(X2, X3), spart=False,
           extra=()):
    """A Shared TSTORE (or TSTORE.SPART) block; absent dims take the defaults."""
    words = [bstart("TSTORE.SPART" if spart else "TSTORE", dt), *extra]
    words += [dim(n, v) for n, v in ((0, vc), (1, vr), (2, cols)) if v is not None]
    words.append(ios(sid, pemode, 0))
    if regs:
        words.append(ior(*regs))
    return words + [BSTOP]


def test_shared_encoders_match_golden_words():
    # encoding.md 4.7 and the TSTORE.SPART variant (function 14)
    assert ios(9, 7) == 0x00901E13 and ios(42, 7, 3) == 0x02A19E13
    assert bstart("TSTORE.SPART", "U16") == 0xD0E11181
    assert run(pj.reset(SMALL), [bstart("TSTORE.SPART", "U16")]).ok


# ----------------------------------------------------------------- scenario builder


class Core(_bundles.Core):
    """_bundles.Core whose stream runs on this module's `run_core` (tests/_scenarios.py re-binds it)."""

    def __init__(self, cfg=SMALL):
        super().__init__(cfg, run_core=run_core)


def check_frag(s, pe, index, layout, dt, rows, cols, size, values, mask):
    """PE `pe`'s tile `index` is a CUBE D fragment of (rows, cols) with these
    valid Words, allocation mask and capacity."""
    t = local(s, index, pe)
    d = tables.dtype(dt)
    g = ref_layouts.geometry(layout, d, rows, cols)
    assert bool(t["allocated"])
    assert (int(t["dtype"]), tables.TILE_LAYOUTS[int(t["layout"])]) == (d.code, layout)
    assert tables.TILE_LOCATIONS[int(t["location"])] == "Matrix"
    assert (int(t["valid_rows"]), int(t["valid_cols"])) == (rows, cols)
    assert (int(t["rows"]), int(t["cols"]), int(t["k_repeat"]), int(t["n_repeat"]),
            int(t["cell_count"]), int(t["storage_bytes"])) == (
        g["storage_rows"], g["storage_cols"], g["k_repeat"], g["n_repeat"], g["cell_count"],
        g["required_bytes"])
    assert int(t["capacity"]) == 128 << (size - 1) and int(t["mask"]) == mask
    assert int(t["defined_valid"]) == rows * cols
    at = ref_layouts.index_function(layout, d, rows, cols)
    valid = {at(r, c) for r in range(rows) for c in range(cols)}
    assert {int(i) for i in np.flatnonzero(t["defined"])} == valid
    got = [[int(t["words"][at(r, c)]) for c in range(cols)] for r in range(rows)]
    assert got == [[v & MASK64 for v in row] for row in values]


def matmul_ref(A, B, C=None, bias=None):
    M, K, N = len(A), len(B), len(B[0])
    return [[((C[i][j] if C else 0) + sum(A[i][k] * B[k][j] for k in range(K))
              + (bias[j] if bias else 0)) & MASK64 for j in range(N)] for i in range(M)]


def valid_m(G):
    per = 16 if G <= 64 else 32
    return per, [max(0, min(G - i * per, per)) for i in PES]


# ----------------------------------------------------------------- Shared TLOAD: golden


def values(rows, cols, start=1):
    return [[(start + r * cols + c) & 0xFFFF for c in range(cols)] for r in range(rows)]


def loaded(matrix=None, dt="U16", size=1, cols=None, pemode=7, sid=5):
    st = Core()
    st.shared(sid, dt, matrix or values(16, 4), size=size, cols=cols, pemode=pemode)
    return st.state()


def test_shared_tload_publishes_a_full_record():
    A = values(3, 3)
    s0 = pj.reset(SMALL)
    s = loaded(A, cols=4)                  # 3 x 3 valid of 4 columns, TSize 128
    rec = record(s, 5)
    assert int(np.asarray(s.shared.sid)[0]) == 5            # the lowest free record
    assert (int(rec["allocation_mask"]), int(rec["initialized_mask"])) == (0b1111, 0b1111)
    assert bool(rec["published"]) and bool(rec["contents_defined"])
    assert int(rec["dtype"]) == tables.dtype("U16").code
    assert tables.TILE_LAYOUTS[int(rec["layout"])] == "RowMajor"
    assert [int(rec[k]) for k in ("capacity", "rows", "cols", "valid_rows", "valid_cols")] == [
        128, 16, 4, 3, 3]
    words = [int(w) for w in rec["words"]]
    want = [0] * len(words)
    for r in range(3):
        for c in range(3):
            want[r * 4 + c] = A[r][c]
    assert words == want                    # every other Word 0
    assert shared_charge(s) == 4 * 128
    for p in PES:                            # no Local effect
        assert allocated(s, p) == [] and charge(s, p) == 0
    assert np.array_equal(np.asarray(s.tiles.words), np.asarray(s0.tiles.words))


def test_shared_tload_signed_carriers_and_4bit():
    s = loaded([[-1, 2], [-128, 127]], dt="S8", cols=2)
    assert [int(w) for w in record(s, 5)["words"][:4]] == [MASK64, 2, MASK64 - 127, 127]
    s = loaded([[0xF, 0x1, 0x8]], dt="U4X2", cols=4)
    assert [int(w) for w in record(s, 5)["words"][:4]] == [0xF, 0x1, 0x8, 0]


def test_shared_tload_partial_mask_initializes_only_its_quarters():
    # 16 x 4 U16, TSize 128: element e = 4r + c is in quarter e // 16 = r // 4
    A = values(16, 4)
    s = loaded(A, pemode=5)                 # 1100: PE0 and PE1 quarters
    rec = record(s, 5)
    assert (int(rec["allocation_mask"]), int(rec["initialized_mask"])) == (0b1100, 0b1100)
    assert bool(rec["published"]) and bool(rec["contents_defined"])
    words = [int(w) for w in rec["words"][:64]]
    assert words == [v for row in A[:8] for v in row] + [0] * 32
    view = pj.read_shared(s, 5)                                 # the public view
    assert (view.allocation_mask, view.initialized_mask, view.pe_mask) == (0b1100,) * 3
    assert view.defined.tolist() == [e < 32 for e in range(64)]
    assert shared_charge(s) == 2 * 128
    # a full TSTORE reads the uninitialized quarters as S5 XOR element
    s = gpr_all(gpr_all(s, X2, 0x400), X3, 8)
    out = ok(s, sstore("U16", 5))
    got = np.frombuffer(pj.read_memory(out, 0x400, 128), np.uint16).tolist()
    assert got == [v for row in A[:8] for v in row] + [(5 ^ e) & 0xFFFF for e in range(32, 64)]


def test_shared_tload_reload_with_a_subset_mask():
    A, B = values(16, 4), values(16, 4, start=1000)
    st = Core()
    st.shared(5, "U16", A, pemode=6)       # 1110
    base, stride = st._regs()
    addr = st._place(B, tables.dtype("U16"))
    st.s = gpr_all(gpr_all(st.s, base, addr), stride, 8)
    st.words += sload("U16", 5, 16, 4, 4, 1, pemode=2, regs=(base, stride))   # 0100
    s = st.state()
    rec = record(s, 5)
    assert (int(rec["allocation_mask"]), int(rec["initialized_mask"])) == (0b1110, 0b1110)
    want = [v for row in A[:4] + B[4:8] + A[8:12] for v in row] + [0] * 16
    assert [int(w) for w in rec["words"][:64]] == want
    assert shared_charge(s) == 3 * 128     # the record is charged once


def test_shared_tload_per_pe_base_and_stride():
    # element (r, c) of quarter q = r // 4 is read at base[q] + r*stride[q] + 2c
    s = pj.reset(SMALL)
    s = pj.write_memory(s, 0, bytes(i & 0xFF for i in range(SMALL.gm_bytes)))
    bases, strides = [0x100, 0x302, 0x500, 0x700], [8, 16, 10, 0]
    for p in PES:
        s = pj.write_gpr(pj.write_gpr(s, X2, bases[p], pe=p), X3, strides[p], pe=p)
    out = ok(s, sload("U16", 5, 16, 4, 4, 1))

    def u16(a):
        return (a & 0xFF) | ((a + 1) & 0xFF) << 8
    want = [u16(bases[r // 4] + r * strides[r // 4] + 2 * c) for r in range(16) for c in range(4)]
    assert [int(w) for w in record(out, 5)["words"][:64]] == want
    # run(pe=p) gives the same: Shared operations read every selected PE's GPRs
    for p in (0, 2):
        assert same_except(out, ok(s, sload("U16", 5, 16, 4, 4, 1), core=False, pe=p),
                           "block")


def test_shared_tload_default_stride_is_dense_columns():
    s = pj.write_memory(pj.reset(SMALL), 0, bytes(range(64)))
    out = ok(s, sload("U8", 7, 2, 3, 4, 1, regs=None))      # stride = 4 bytes, base 0
    assert [int(w) for w in record(out, 7)["words"][:8]] == [0, 1, 2, 0, 4, 5, 6, 0]


def test_shared_tload_reads_only_selected_pes_gprs():
    # PE3's base is misaligned and out of range, but mask 1100 never reads it
    s = pj.write_memory(pj.reset(SMALL), 0x100, bytes(range(128)))
    s = gpr_all(gpr_all(s, X2, 0x100), X3, 8)
    s = pj.write_gpr(s, X2, 0xFFFFFFF1, pe=3)
    ok(s, sload("U16", 5, 16, 4, 4, 1, pemode=5))


def test_shared_records_persist_across_blocks_and_runs():
    A = values(4, 2)
    s = loaded(A, cols=2)
    s = gpr_all(gpr_all(s, X2, 0x600), X3, 4)
    s = ok(s, [bstart("TLOAD", "U16"), dim(0, 1), iot(hand=0, pemode=1), BSTOP], core=False)
    assert record(s, 5) is not None
    out = ok(s, sstore("U16", 5), core=False, pe=2)                    # a later run, on PE2
    assert np.frombuffer(pj.read_memory(out, 0x600, 16), np.uint16).tolist() == sum(A, [])
    assert int(record(out, 5)["initialized_mask"]) == 0b1111


# ----------------------------------------------------------------- Shared TLOAD: ordered checks


def sl_state():
    """GM 0x100.. holds bytes 0.., every PE's x2/x3 = 0x100 / 8."""
    s = pj.write_memory(pj.reset(SMALL), 0x100, bytes(range(256)))
    return gpr_all(gpr_all(s, X2, 0x100), X3, 8)


def test_shared_tload_0_zero_mask_is_a_no_op():
    s = sl_state()
    # no dimensions, no B.IOR: the PEMode-000 binding alone makes the block a no-op
    for words in ([bstart("TLOAD", "U16"), ios(5, 0, 1), BSTOP],
                  [bstart("TSTORE", "U16"), ios(5, 0, 0), BSTOP],
                  [bstart("TSTORE.SPART", "U16"), ios(5, 0, 0), BSTOP]):
        out = ok(s, words)
        assert same_except(s, out, "pc")


def test_shared_tload_1_one_shared_binding():
    s = sl_state()
    words = sload("U16", 5, 4, 4, 4, 1)
    fails(s, words[:-2] + [ios(6, 7, 1)] + words[-2:], "Fault_TileLegality")
    # before the scalar schema (B.IOR RegDst)
    fails(s, words[:-2] + [ios(6, 7, 1), ior(X2, X3, dst=X2), BSTOP], "Fault_TileLegality")


@pytest.mark.parametrize("bad", [ior(X2, X3, dst=5), ior(X2, X3, src2=5)])
def test_shared_tload_2_scalar_schema_is_bundle_control(bad):
    fails(sl_state(), sload("U16", 5, 4, 4, 4, 1, regs=None)[:-1] + [bad, BSTOP],
          "Fault_BundleControl")


@pytest.mark.parametrize("attrs, fault", [
    (dict(layout=0, dtype=4, pad=0), "Fault_TileLegality"),       # DataType != 0
    (dict(layout=0, dtype=0, pad=1), "Fault_TileLegality"),       # PadValue
    (dict(layout=0, dtype=0, pad=0, cmode=1), "Fault_TileLegality"),
    (dict(layout=0, dtype=0, pad=0, rmode=1), "Fault_TileLegality"),
    (dict(layout=0, dtype=0, pad=0, sat=1), "Fault_TileLegality"),
    (dict(layout=0, dtype=0, pad=0, canon=1), "Fault_TileLegality"),
    (dict(layout=1, dtype=31, pad=0), "Fault_TileLegality"),     # DTYPE_NONE with a relayout
    (dict(layout=4, dtype=0, pad=1), "Fault_TileLegality"),      # PadValue with a relayout
    (dict(layout=22, dtype=31, pad=3), "Fault_TileLegality"),     # a CUBE code with a B.IOS
])
def test_shared_tload_3_datr(attrs, fault):
    fails(sl_state(), sload("U16", 5, 4, 4, 4, 1, extra=[datr(**attrs)]), fault)


def test_shared_tload_3_datr_present_keeps_the_bstart_dtype():
    # The ASL's Shared TLSU path transfers the operation's (BSTART) DataType;
    # a legal B.DATR (all fields 0) does not make it FP64 (see the report)
    out = ok(sl_state(), sload("U16", 5, 2, 2, 2, 1, extra=[datr(0, 0, 0)]))
    rec = record(out, 5)
    assert int(rec["dtype"]) == tables.dtype("U16").code
    assert [int(w) for w in rec["words"][:4]] == [0x0100, 0x0302, 0x0908, 0x0B0A]


# ----------------------------------------------------------------- Shared relayout codes
#
# A Shared TLOAD gives the register the layout the code's second half names
# (BSTART type, GM row-major); element (r, c) sits at its layout index e,
# whose quarter picks the PE (and so the base/stride GPRs) that loads it. A
# Shared TSTORE reads the register in the code's layout: a record of another
# layout is Fault_TileLegality. A ZN/NZ register off the fractal grid has no
# index: the model stops on an assertion, ptojax faults Fault_TileLegality
# (docs/spec-notes.md).


def g7_state():
    """GM 0x100.. holds FP16 r*32 + c for a 2 x 32 matrix (dense rows of 64 bytes);
    PE0/PE1 read it at 0x100, PE2/PE3 at 0x200 with the same values + 0x1000."""
    s = pj.reset(SMALL)
    rows = [[r * 32 + c for c in range(32)] for r in range(2)]
    s = pj.write_memory(s, 0x100, b"".join(v.to_bytes(2, "little") for row in rows for v in row))
    s = pj.write_memory(s, 0x200, b"".join((v + 0x1000).to_bytes(2, "little")
                                           for row in rows for v in row))
    s = gpr_all(s, X3, 64)
    for p in PES:
        s = pj.write_gpr(s, X2, 0x100 if p < 2 else 0x200, pe=p)
    return s


@pytest.mark.parametrize("code,at", [
    (4, lambda r, c: (c // 16) * 256 + r * 16 + c % 16),          # ND2NZ
    (3, lambda r, c: (c // 16) * 256 + (c % 16) * 16 + r),        # ND2ZN
    (1, lambda r, c: c * 16 + r),                                 # ND2DN: 16 rows
])
def test_shared_relayout_g7_layout_index_and_quarters(code, at):
    # FP16 2 x 32 into S7 (1024 B: 16 rows x 32 columns); quarter = e DIV 128
    out = ok(g7_state(), sload("FP16", 7, 2, 32, 32, 4, extra=[datr(code, 0, 0)]))
    rec = record(out, 7)
    assert tables.TILE_LAYOUTS[int(rec["layout"])] == \
        {1: "ColumnMajor", 3: "ZN", 4: "NZ"}[code]
    assert (int(rec["rows"]), int(rec["cols"])) == (16, 32)
    for r in range(2):
        for c in range(32):
            e = at(r, c)
            owner = e // 128                       # PE0/PE1 read 0x100, PE2/PE3 0x200
            assert int(rec["words"][e]) == r * 32 + c + (0x1000 if owner >= 2 else 0), (r, c)


def test_shared_relayout_tstore_reads_in_the_codes_layout():
    s = ok(g7_state(), sload("FP16", 7, 2, 32, 32, 4, extra=[datr(4, 0, 0)]))
    s = gpr_all(gpr_all(s, X2, 0x400), X3, 64)
    # the record is NZ: NORM (RowMajor) and ND2ZN (ZN) read it in another layout
    for code in (None, 0, 3, 1):
        fails(s, sstore("FP16", 7, extra=[datr(code, 0, 0)] if code is not None else []),
              "Fault_TileLegality")
    # any code naming NZ stores it back row-major
    for code in (4, 9, 20):
        out = ok(s, sstore("FP16", 7, extra=[datr(code, 0, 0)]))
        got = [int.from_bytes(pj.read_memory(out, 0x400 + 2 * k, 2), "little") for k in range(64)]
        want = [r * 32 + c + (0x1000 if c >= 16 else 0) for r in range(2) for c in range(32)]
        assert got == want


def test_shared_relayout_update_keeps_the_layout():
    # a second TLOAD into the register must name the same layout
    s = ok(g7_state(), sload("FP16", 7, 2, 32, 32, 4, pemode=5, extra=[datr(4, 0, 0)]))
    fails(s, sload("FP16", 7, 2, 32, 32, 4, pemode=5, extra=[datr(3, 0, 0)]), "Fault_TileLegality")
    ok(s, sload("FP16", 7, 2, 32, 32, 4, pemode=5, extra=[datr(9, 0, 0)]))


@pytest.mark.parametrize("code", [3, 4, 8, 9, 20, 30])
def test_shared_relayout_off_the_fractal_grid(code):
    # FP16 fractals are 16 columns wide: 4 columns (or 8 rows) are off the grid
    fails(g7_state(), sload("FP16", 7, 4, 4, 4, 1, extra=[datr(code, 0, 0)]), "Fault_TileLegality")
    fails(g7_state(), sload("FP16", 7, 2, 16, 16, 2, extra=[datr(code, 0, 0)]),
          "Fault_TileLegality")                                  # 8 rows
    # an unallocated register read through an off-grid temporary descriptor
    fails(g7_state(), sstore("FP16", 9, vr=2, vc=4, cols=4, extra=[datr(code, 0, 0)]),
          "Fault_TileLegality")


def test_shared_relayout_tstore_of_no_record_reads_undefined_words_at_the_layout_index():
    # no record: a temporary 16 x 16 FP16 NZ/ColumnMajor descriptor; Word e is sid XOR e
    s = gpr_all(gpr_all(pj.reset(SMALL), X2, 0x400), X3, 32)
    for code, at in ((4, lambda r, c: r * 16 + c), (1, lambda r, c: c * 16 + r)):
        out = ok(s, sstore("FP16", 9, vr=16, vc=16, cols=16, extra=[datr(code, 0, 0)]))
        got = [int.from_bytes(pj.read_memory(out, 0x400 + 32 * r + 2 * c, 2), "little")
               for r in range(16) for c in range(16)]
        assert got == [(9 ^ at(r, c)) & 0xFFFF for r in range(16) for c in range(16)]


def test_shared_relayout_register_is_no_matrix_source():
    # the cooperative matrix forms read RowMajor Shared registers only
    st = Core()
    st.shared(40, "U16", [[2] * 16] * 16, size=4)
    s = st.state()
    nz = ok(s, sload("U16", 41, 16, 16, 16, 4, extra=[datr(4, 0, 0)]))
    fails(nz, coop("TMATMUL", "U16", [40, 41], G=16, N=16, K=16, size=4), "Fault_TileLegality")
    row_major = ok(s, sload("U16", 41, 16, 16, 16, 4))
    ok(row_major, coop("TMATMUL", "U16", [40, 41], G=16, N=16, K=16, size=4))


@pytest.mark.parametrize("case", ["source_ios", "iot", "no_lb0", "no_lb1", "no_lb2", "lb1_zero",
                                  "vc_gt_cols"])
def test_shared_tload_4_bindings_and_dimensions(case):
    words = {
        "source_ios": sload("U16", 5, 4, 4, 4, 0),
        "iot": sload("U16", 5, 4, 4, 4, 1)[:-1] + [iot(hand=0, pemode=7), BSTOP],
        "no_lb0": [w for w in sload("U16", 5, 4, 4, 4, 1) if w != dim(0, 4)],
        "no_lb1": [w for w in sload("U16", 5, 4, 4, 4, 1) if w != dim(1, 4)],
        "no_lb2": [w for w in sload("U16", 5, 4, 4, 4, 1) if w != dim(2, 4)],
        "lb1_zero": sload("U16", 5, 0, 4, 4, 1),
        "vc_gt_cols": sload("U16", 5, 4, 8, 4, 1),
    }[case]
    fails(sl_state(), words, "Fault_TileLegality")


@pytest.mark.parametrize("vr, vc, cols, size", [(2, 3, 3, 1), (17, 4, 4, 1), (1, 1, 128, 1)])
def test_shared_tload_5_descriptor(vr, vc, cols, size):
    # columns not a power of two; more valid rows than rows; a row wider than TSize
    fails(sl_state(), sload("U16", 5, vr, vc, cols, size), "Fault_TileLegality")


def test_shared_tload_6_update_compatibility():
    s = ok(sl_state(), sload("U16", 5, 4, 4, 4, 1, pemode=5))          # 1100
    fails(s, sload("U16", 5, 4, 4, 4, 1, pemode=3), "Fault_TileLegality")   # 0010 not in 1100
    for words in (sload("U16", 5, 4, 4, 8, 1, pemode=1),     # other columns
                  sload("U16", 5, 3, 4, 4, 1, pemode=1),     # other valid rows
                  sload("U16", 5, 4, 2, 4, 1, pemode=1),     # other valid columns
                  sload("U16", 5, 4, 4, 4, 2, pemode=1),     # other TSize
                  sload("S16", 5, 4, 4, 4, 1, pemode=1)):    # other dtype
        fails(s, words, "Fault_TileLegality")
    ok(s, sload("U16", 5, 4, 4, 4, 1, pemode=1))             # a compatible subset update
    # the TSize must still fit TILE_CAPACITY (checked before the record lookup)
    fails(poke(s, tile_capacity=64), sload("U16", 5, 4, 4, 4, 1, pemode=1), "Fault_TileLegality")


def test_shared_tload_6_shared_pool():
    s = poke(sl_state(), tile_capacity=1024)
    s = ok(s, sload("U16", 5, 4, 4, 4, 2))                   # 4 x 256 = 1024: full
    fails(s, sload("U16", 6, 4, 4, 4, 1, pemode=1), "Fault_TileLegality")
    # a TSize above TILE_CAPACITY
    fails(poke(sl_state(), tile_capacity=128), sload("U16", 6, 4, 4, 4, 2, pemode=1),
          "Fault_TileLegality")


def test_shared_tload_6_pools_by_semantics():
    # adr0100: Local and Shared pools are bounded separately; 0.58.3: one budget
    st = Core()
    st.local("RowMajor", "U16", {0: [[1]]}, hand=0, size=3)      # PE0 Local: 512 B
    s = poke(st.state(), tile_capacity=1024)
    s = gpr_all(gpr_all(s, X2, 0x100), X3, 8)
    words = sload("U16", 5, 4, 4, 4, 2)                          # Shared: 4 x 256
    ok(s, words)
    ok(s, words, core=False, pe=0)
    fails(s, words, "Fault_TileLegality", cfg=OLD, core=False, pe=0)
    ok(s, words, cfg=OLD, core=False, pe=1)                      # PE1's Local pool is empty
    s2 = ok(s, sload("U16", 5, 4, 4, 4, 1))                      # Shared now 512
    # a Local TLOAD: adr0100 Local(PE0) 512 + 512 fits; 0.58.3 adds Shared 512
    load = [bstart("TLOAD", "U16"), dim(0, 1), iot(hand=0, size=3, pemode=1), BSTOP]
    ok(s2, load, core=False)
    fails(s2, load, "Fault_TileAllocation", cfg=OLD, core=False)


def test_shared_tload_7_model_bounds():
    # rows*cols past shared_words (1024 in "small"): 4 KiB of U16 = 2048 Words
    fails(sl_state(), sload("U16", 5, 1, 4, 4, 6), "Fault_TileAllocation")
    # every record taken: shared_slots = 8
    s = sl_state()
    for sid in range(8):
        s = ok(s, sload("U8", 10 + sid, 1, 1, 1, 1))
    assert sorted(int(x) for x in np.asarray(s.shared.sid)) == list(range(10, 18))
    fails(s, sload("U8", 30, 1, 1, 1, 1), "Fault_TileAllocation")
    ok(s, sload("U8", 12, 1, 1, 1, 1))                        # an existing id still updates


@pytest.mark.parametrize("pe, base, fault, addr", [
    (2, 0x101, "Fault_DataAlignment", 0x101 + 8 * 8),        # PE2's first element: row 8
    (3, 4000, "Fault_DataPage", 4000 + 12 * 8),              # PE3's row 12 at 4096
    (0, 4096 - 2, "Fault_DataPage", 4096),                   # PE0: row 0, column 1
])
def test_shared_tload_8_memory_faults(pe, base, fault, addr):
    # quarter q holds rows 4q..4q+3; element (r, c) at base[q] + 8r + 2c
    s = pj.write_gpr(sl_state(), X2, base, pe=pe)
    fails(s, sload("U16", 5, 16, 4, 4, 1), fault, addr=addr)


def test_shared_tload_8_first_failing_access_row_major():
    # PE1 and PE2 both fault; PE1's quarter (rows 4..7) comes first in row-major order
    s = pj.write_gpr(pj.write_gpr(sl_state(), X2, 0x101, pe=2), X2, 4090, pe=1)
    fails(s, sload("U16", 5, 16, 4, 4, 1), "Fault_DataPage", addr=4090 + 4 * 8)


# ----------------------------------------------------------------- Shared TSTORE / TSTORE.SPART


def st_state():
    """S5 = 16 x 4 U16 (TSize 128) on all four quarters; every PE's x2/x3 = 0x400 / 8."""
    s = loaded(values(16, 4))
    return gpr_all(gpr_all(s, X2, 0x400), X3, 8)


def test_shared_tstore_full_record():
    s = st_state()
    out = ok(s, sstore("U16", 5))
    assert np.frombuffer(pj.read_memory(out, 0x400, 128), np.uint16).tolist() == sum(values(16, 4), [])
    assert same_except(s, out, "gm", "pc")                     # the record is unchanged


def test_shared_tstore_sub_rectangle_and_per_pe_bases():
    s = pj.write_gpr(pj.write_gpr(st_state(), X2, 0x800, pe=1), X3, 2, pe=1)
    out = ok(s, sstore("U16", 5, vr=6, vc=1, cols=4))
    col = np.frombuffer(pj.read_memory(out, 0x400, 48), np.uint16).tolist()
    A = values(16, 4)
    assert [col[4 * r] for r in range(4)] == [A[r][0] for r in range(4)]   # PE0: rows 0..3
    pe1 = np.frombuffer(pj.read_memory(out, 0x800, 12), np.uint16).tolist()
    assert [pe1[r] for r in (4, 5)] == [A[4][0], A[5][0]]                 # PE1: 0x800 + 2r


def test_shared_tstore_spart_stores_only_its_quarters():
    s = st_state()
    out = ok(s, sstore("U16", 5, spart=True, pemode=3))         # 0010: rows 8..11
    got = np.frombuffer(pj.read_memory(out, 0x400, 128), np.uint16).tolist()
    A = sum(values(16, 4), [])
    assert got == [0] * 32 + A[32:48] + [0] * 16
    # a plain TSTORE needs mask 1111
    fails(s, sstore("U16", 5, pemode=3), "Fault_TileLegality")
    # SPART with 1111 stores everything
    assert np.frombuffer(pj.read_memory(ok(s, sstore("U16", 5, spart=True)), 0x400, 128),
                         np.uint16).tolist() == A


def test_shared_tstore_without_a_record_stores_undefined_words():
    s = gpr_all(gpr_all(pj.reset(SMALL), X2, 0x400), X3, 4)
    out = ok(s, sstore("U16", 77, vr=2, vc=2, cols=2))
    assert np.frombuffer(pj.read_memory(out, 0x400, 8), np.uint16).tolist() == [
        77 ^ 0, 77 ^ 1, 77 ^ 2, 77 ^ 3]
    assert record(out, 77) is None and same_except(s, out, "gm", "pc")
    # defaults without a record: 1 x 1 of 1 column
    out = ok(s, sstore("U32", 200))
    assert pj.read_memory(out, 0x400, 4) == (200).to_bytes(4, "little")


def test_shared_tstore_4_mask_direction_and_bindings():
    s = st_state()
    for pemode in SPARSE_PEMODES:
        fails(s, sstore("U16", 5, pemode=pemode), "Fault_TileLegality")
    dest = sstore("U16", 5)
    dest[1] = ios(5, 7, 1)                                       # a destination B.IOS
    fails(s, dest, "Fault_TileLegality")
    fails(s, sstore("U16", 5)[:-1] + [iot(0, pemode=7), BSTOP], "Fault_TileLegality")
    # the scalar schema (step 2) precedes the mask (step 4)
    for bad in (ior(X2, X3, dst=1), ior(X2, X3, src2=1)):
        fails(s, sstore("U16", 5, pemode=3, regs=None)[:-1] + [bad, BSTOP],
              "Fault_BundleControl")


@pytest.mark.parametrize("kw", [dict(vc=0), dict(vr=0), dict(cols=0), dict(vc=4, cols=2),
                                dict(cols=8), dict(vr=17), dict(cols=2, vc=1)])
def test_shared_tstore_5_shape_and_read_schema(kw):
    fails(st_state(), sstore("U16", 5, **kw), "Fault_TileLegality")


def test_shared_tstore_5_read_schema_dtype_and_minimum_tsize():
    fails(st_state(), sstore("S16", 5), "Fault_TileLegality")
    # more valid columns than the record's (3 of 4)
    s = gpr_all(gpr_all(loaded(values(2, 3), cols=4), X2, 0x400), X3, 8)
    ok(s, sstore("U16", 5, vc=3))
    fails(s, sstore("U16", 5, vc=4), "Fault_TileLegality")
    fails(s, sstore("U16", 5, vr=3), "Fault_TileLegality")
    # without a record: some TSize of 128 B..256 KiB must hold the shape
    s = gpr_all(gpr_all(pj.reset(SMALL), X2, 0x400), X3, 4)
    fails(s, sstore("U16", 9, vr=1, vc=3, cols=3), "Fault_TileLegality")
    fails(s, sstore("U64", 9, vr=5, vc=1, cols=8192), "Fault_TileLegality")
    ok(gpr_all(s, X3, 8), sstore("U64", 9, vr=4, vc=1, cols=256))
    # the stored elements must fit shared_words (1024 here), a model bound (shared-decisions 4)
    fails(gpr_all(s, X3, 8), sstore("U64", 9, vr=4, vc=1, cols=8192), "Fault_TileAllocation")
    # ... and not above TILE_CAPACITY (the minimum TSize here is 256 B)
    fails(poke(s, tile_capacity=128), sstore("U16", 9, vr=1, vc=1, cols=128),
          "Fault_TileLegality")
    ok(poke(s, tile_capacity=256), sstore("U16", 9, vr=1, vc=1, cols=128))


def test_shared_tstore_6_memory_fault_writes_nothing():
    s = pj.write_gpr(st_state(), X2, 4096 - 40, pe=3)           # row 12 at 4096 - 40 + 96
    fails(s, sstore("U16", 5), "Fault_DataPage", addr=4096 - 40 + 12 * 8)
    s = pj.write_gpr(st_state(), X3, 7, pe=1)                   # PE1: row 5 starts odd
    fails(s, sstore("U16", 5), "Fault_DataAlignment", addr=0x400 + 5 * 7)


# ----------------------------------------------------------------- run_core


def test_run_core_local_tload_uses_each_pes_gprs_and_file():
    s = pj.write_memory(pj.reset(SMALL), 0x100, bytes(range(64)))
    for p in PES:
        s = pj.write_gpr(pj.write_gpr(s, X2, 0x100 + 8 * p, pe=p), X3, 4, pe=p)
    s = pj.write_gpr(s, "a0", 2, pe=0)
    s = pj.write_gpr(s, "a0", 6, pe=1)                          # header phase reads PE0's
    words = [bstart("TLOAD", "U8"), dim(0, 2, reg=tables.gpr_index("a0")), dim(1, 1),
             iot(hand=0, pemode=7), ior(X2, X3), BSTOP]
    out = ok(s, words)
    for p in PES:
        t = local(out, 0, p)
        assert allocated(out, p) == [0] and int(t["mask"]) == 0b1111
        assert (int(t["valid_rows"]), int(t["valid_cols"])) == (1, 4)   # LB0 = 2 + PE0's a0
        assert [int(w) for w in t["words"][:4]] == [8 * p + i for i in range(4)]
    # run(pe=1) is PE1's view: its GPRs (a0 = 6 -> 8 columns) and its file only
    one = ok(s, words, core=False, pe=1)
    assert allocated(one, 1) == [0] and int(local(one, 0, 1)["valid_cols"]) == 8
    assert all(allocated(one, p) == [] for p in (0, 2, 3))


def test_run_core_single_pe_mask_and_zero_mask():
    s = pj.write_memory(pj.reset(SMALL), 0, bytes(range(16)))
    out = ok(s, [bstart("TLOAD", "U8"), dim(0, 4), iot(hand=2, pemode=3), BSTOP])   # 0010
    assert [allocated(out, p) for p in PES] == [[], [], [32], []]
    assert int(local(out, 32, 2)["mask"]) == 0b0010
    out = ok(s, [bstart("TLOAD", "U8"), iot(hand=2, pemode=0), BSTOP])
    assert same_except(s, out, "pc")


def test_run_core_gm_writes_land_in_pe_order():
    st = Core()
    idx = st.local("RowMajor", "U8", {p: [[10 + p]] for p in PES}, hand=0)
    s = gpr_all(gpr_all(st.state(), X2, 0x700), X3, 1)
    out = ok(s, [bstart("TSTORE", "U8"), iot(idx, pemode=7), ior(X2, X3), BSTOP])
    assert pj.read_memory(out, 0x700, 1) == bytes([13])         # PE3 stores last


def test_run_core_collective_fault_keeps_no_pe_effects():
    # Local TLOAD on all PEs: PE2's base is misaligned -> PE2's fault, and the
    # loads PE0 and PE1 already completed are rolled back
    s = pj.write_memory(pj.reset(SMALL), 0x100, bytes(range(64)))
    s = gpr_all(gpr_all(s, X2, 0x100), X3, 8)
    s = pj.write_gpr(pj.write_gpr(s, X2, 0x101, pe=2), X2, 0x103, pe=3)
    words = [bstart("TLOAD", "U16"), dim(0, 2), iot(hand=0, pemode=7), ior(X2, X3), BSTOP]
    fails(s, words, "Fault_DataAlignment", addr=0x101)
    # so does a GM write of PE0/PE1 before PE2's fault
    st = Core()
    idx = st.local("RowMajor", "U8", {p: [[10 + p]] for p in PES}, hand=0)
    s = gpr_all(gpr_all(st.state(), X2, 0x700), X3, 1)
    s = pj.write_gpr(s, X2, 5000, pe=2)
    fails(s, [bstart("TSTORE", "U8"), iot(idx, pemode=7), ior(X2, X3), BSTOP],
          "Fault_DataPage", addr=5000)


def test_machine_round_trip_of_garbage_states():
    rng = np.random.default_rng(5)
    base = pj.reset(SMALL)

    def scramble(tree):
        out = {}
        for k, v in tree.items():
            a = np.asarray(v)
            if a.dtype == bool:
                out[k] = rng.random(a.shape) < 0.5
            elif a.dtype == np.uint64:
                out[k] = rng.integers(0, 2**63, a.shape, dtype=np.uint64) * 2 + 1
            else:
                out[k] = rng.integers(-3, 300, a.shape).astype(a.dtype)
        return out

    with jax.enable_x64(True):
        t, sh = scramble(base.tiles), scramble(base.shared)
        s = base.replace(tiles=base.tiles.replace(**{k: jax.numpy.asarray(v) for k, v in t.items()}),
                         shared=base.shared.replace(**{k: jax.numpy.asarray(v)
                                                       for k, v in sh.items()}))
    s = poke(s, gpr=rng.integers(0, 2**63, (4, 24), dtype=np.uint64), pc=0x40)
    for r in (run(s, []), run(s, [], pe=3), run_core(s, [])):
        assert r.ok and same_except(s, r.state)
        la, lb = state_leaves(s), state_leaves(r.state)
        assert all(la[k].dtype == lb[k].dtype and la[k].shape == lb[k].shape for k in la)


# ----------------------------------------------------------------- cooperative TMATMUL: group_M


def group_state(G, K=2, N=2, cfg=SMALL, sa=40, sb=41):
    """Shared A [G, K] and Shared B [K, N] (U16), ids `sa`, `sb`."""
    A = [[(3 * r + k + 1) % 251 for k in range(K)] for r in range(G)]
    B = [[(5 * k + n + 2) % 13 for n in range(N)] for k in range(K)]
    st = Core(cfg)
    size_a = max(1, (G * K * 2 - 1).bit_length() - 6)         # TSize >= G*K*2 bytes
    st.shared(sa, "U16", A, size=size_a)
    st.shared(sb, "U16", B)
    return st.state(), A, B


@pytest.mark.parametrize("cfg", [SMALL, OLD], ids=["adr0100", "0.58.3"])
def test_coop_post_row_max_and_relu(cfg):
    # spec-notes row 55: a cooperative block's RowMaxOut is per fragment like D
    # (adr0100: valid_M[pe] rows, the PE's own bit; 0.58.3: all G rows, the block's mask);
    # a LReLU without B.IOR scales by 0 (nothing is negative in U32 anyway)
    G = 17 if cfg is SMALL else 16
    s, A, B = group_state(G, cfg=cfg)
    words = [mstart("TMATMUL", "U16"), fpatr(row_max=1, relu=2), *dims(G, 2, 2), ios(40, 7, 0),
             ios(41, 7, 0), iot(hand=0, size=2, last=0), iot(hand=1, size=1, last=1), BSTOP]
    out = ok(s, words, cfg=cfg)
    D = matmul_ref(A, B)
    per, vm = valid_m(G) if cfg is SMALL else (0, [G] * 4)
    for i in PES:
        if not vm[i]:
            assert allocated(out, i) == []
            continue
        rows = D[i * per:i * per + vm[i]]
        mask = bit(i) if cfg is SMALL else 0b1111
        layout = "CUBE_M16" if cfg is OLD or per == 16 else "CUBE_M32"
        check_frag(out, i, 0, layout, "U32", vm[i], 2, 2, rows, mask)
        t = local(out, 16, i)
        assert bool(t["allocated"]) and int(t["dtype"]) == tables.dtype("U32").code
        assert tables.TILE_LAYOUTS[int(t["layout"])] == "RowMajor" and int(t["mask"]) == mask
        assert (int(t["valid_rows"]), int(t["valid_cols"])) == (vm[i], 1)
        assert [int(w) for w in t["words"][: vm[i]]] == [max(r) for r in rows]


@pytest.mark.parametrize("G", [1, 17, 64, 65, 128])
def test_group_m_fragments(G):
    s, A, B = group_state(G)
    out = ok(s, coop("TMATMUL", "U16", [40, 41], G=G, N=2, K=2))
    per, vm = valid_m(G)
    D = matmul_ref(A, B)
    layout = "CUBE_M16" if per == 16 else "CUBE_M32"
    for i in PES:
        if vm[i]:
            check_frag(out, i, 0, layout, "U32", vm[i], 2, 2, D[i * per:i * per + vm[i]], bit(i))
            assert allocated(out, i) == [0] and charge(out, i) == 256     # 1 x TSize
        else:
            assert allocated(out, i) == [] and charge(out, i) == 0         # idle: no tile
        v = pj.read_tile(out, 0, pe=i)                          # the public per-PE view
        assert v.allocated == bool(vm[i])
        if vm[i]:
            assert (v.pe_mask, v.valid_rows, v.valid_columns, v.layout) == (bit(i), vm[i], 2,
                                                                            layout)
    assert same_except(s, out, "tiles", "pc")                  # Shared records never modified


@pytest.mark.parametrize("pe", PES)
def test_current_pe_shared_a_rows(pe):
    # run(pe=i) is PE i's view: it publishes PE i's fragment only (G = 65: 32, 32, 1, 0)
    s, A, B = group_state(65)
    out = ok(s, coop("TMATMUL", "U16", [40, 41], G=65, N=2, K=2), core=False, pe=pe)
    vm = [32, 32, 1, 0][pe]
    for p in PES:
        if p == pe and vm:
            check_frag(out, p, 0, "CUBE_M32", "U32", vm, 2, 2,
                       matmul_ref(A[32 * pe:32 * pe + vm], B), bit(pe))
        else:
            assert allocated(out, p) == []


@pytest.mark.parametrize("pemode", SPARSE_PEMODES)
def test_sparse_masks_rejected(pemode):
    s, _, _ = group_state(17)
    words = coop("TMATMUL", "U16", [40, 41], G=17, N=2, K=2, pemode=pemode)
    fails(s, words, "Fault_TileLegality")
    for p in PES:
        fails(s, words, "Fault_TileLegality", core=False, pe=p)


@pytest.mark.parametrize("ios_pemode", [6, 1])                  # B.IOS 1110 / 1000, B.IOT 1111
def test_ios_mask_before_the_iot_must_match(ios_pemode):
    # step 3's one common mask covers a B.IOS recorded before the first B.IOT,
    # which the header's B.IOT check (earlier B.IOTs only) does not compare;
    # found by a 1,000,000-case campaign (seed 2200, a variant of coop_right)
    s, _, _ = group_state(17)
    fails(s, coop("TMATMUL", "U16", [40, 41], G=17, N=2, K=2, ios_pemode=ios_pemode),
          "Fault_TileLegality")
    s = e6_mask_state(OLD)
    fails(s, coop("TMATMUL", "U16", [40, 41], G=1, N=1, K=1, size=1, ios_pemode=ios_pemode),
          "Fault_TileLegality", cfg=OLD, core=False)


def test_zero_mask_is_a_no_op():
    s, _, _ = group_state(17)
    out = ok(s, coop("TMATMUL", "U16", [40, 41], G=17, N=2, K=2, pemode=0))
    assert same_except(s, out, "pc")
    # even with nothing legal in it: no B.FPATR, no dimensions, unknown S ids
    out = ok(s, [mstart("TMATMUL", "U16"), ios(99, 0), iot(hand=0, pemode=0), BSTOP])
    assert same_except(s, out, "pc")


def test_active_fragment_allocation_and_local_pool():
    s, A, B = group_state(17)
    words = coop("TMATMUL", "U16", [40, 41], G=17, N=2, K=2)
    # TILE_CAPACITY bounds each PE's Local pool: 1 x 256 fits exactly (the
    # Shared pool is charged apart), 255 does not
    ok(poke(s, tile_capacity=256), words)
    fails(poke(s, tile_capacity=255), words, "Fault_TileAllocation")
    # 0.58.3 charges popcount(mask) x TSize against Local + Shared
    need = shared_charge(s) + 4 * 256
    s_old, _, _ = group_state(16, cfg=OLD)
    ok(poke(s_old, tile_capacity=need), coop("TMATMUL", "U16", [40, 41], G=16, N=2, K=2),
       cfg=OLD, core=False)
    fails(poke(s_old, tile_capacity=need - 1), coop("TMATMUL", "U16", [40, 41], G=16, N=2, K=2),
          "Fault_TileAllocation", cfg=OLD, core=False)


def test_late_fault_rolls_the_collective_back():
    # E6 late fault: A 16 x 1, B 1 x 16, M = N = 16, K = 1, D SizeCode 3 (needs 1 KiB)
    st = Core()
    st.shared(40, "U16", [[r + 1] for r in range(16)])
    st.shared(41, "U16", [list(range(16))])
    s = st.state()
    fails(s, coop("TMATMUL", "U16", [40, 41], G=16, N=16, K=1, size=3), "Fault_TileAllocation")
    check_frag(ok(s, coop("TMATMUL", "U16", [40, 41], G=16, N=16, K=1, size=4)), 0, 0,
               "CUBE_M16", "U32", 16, 16, 4,
               [[(r + 1) * n for n in range(16)] for r in range(16)], 0b1000)


def test_collective_fault_on_pe2_leaves_pe0_and_pe1_untouched():
    s, A, B = group_state(64)
    for k in range(HS):                                         # PE2's hand 0 is full
        s = poke_local(s, 2, k, allocated=True)
    r = fails(s, coop("TMATMUL", "U16", [40, 41], G=64, N=2, K=2), "Fault_TileAllocation")
    assert all(allocated(r.state, p) == [] for p in (0, 1, 3))
    # each PE alone: PE0 and PE1 succeed, PE2 faults
    ok(s, coop("TMATMUL", "U16", [40, 41], G=64, N=2, K=2), core=False, pe=1)
    fails(s, coop("TMATMUL", "U16", [40, 41], G=64, N=2, K=2), "Fault_TileAllocation",
          core=False, pe=2)


# ----------------------------------------------------------------- right-only, idle PEs


def right_only_state(G, op="TMATMUL", seed=0):
    """Shared B [2, 2]; on each active PE a Local A (valid_M rows, CUBE M16/M32),
    C (ACC) and Bias (BIAS); garbage at the same indices on the idle PEs."""
    per, vm = valid_m(G)
    layout = "CUBE_M16" if per == 16 else "CUBE_M32"
    B = [[1, 2], [3, 4]]
    st = Core()
    st.shared(41, "U16", B)
    As = {p: [[p * 10 + r + 1, r + 2] for r in range(vm[p])] for p in PES if vm[p]}
    Cs = {p: [[100 * p + r, 7] for r in range(vm[p])] for p in PES if vm[p]}
    c = st.local(layout, "U32", Cs, hand=2, size=2) if op == "TMATMUL.ACC" else None
    a = st.local(layout, "U16", As, hand=1, size=2)
    bias = st.local("RowMajor", "U32", {p: [[1000, 2000]] for p in As}, hand=3) \
        if op == "TMATMUL.BIAS" else None
    s = st.state()
    for p in PES:
        if not vm[p]:
            for i, idx in enumerate(x for x in (a, c, bias) if x is not None):
                s = garbage(s, p, idx, seed + 10 * p + i)
            for k in range(HS):                                  # even a full D hand
                s = garbage(s, p, k, seed + 100 + k)
    return s, As, B, Cs, a, c, bias, layout, vm


@pytest.mark.parametrize("op", ["TMATMUL", "TMATMUL.ACC", "TMATMUL.BIAS"])
def test_right_only_idle_pes_keep_their_garbage(op):
    G = 17
    s, As, B, Cs, a, c, bias, layout, vm = right_only_state(G, op)
    srcs = {"TMATMUL": [a], "TMATMUL.ACC": [c, a], "TMATMUL.BIAS": [a, bias]}[op]
    out = ok(s, coop(op, "U16", [41], srcs, G=G, N=2, K=2, hand=0))
    for p in PES:
        if vm[p]:
            D = matmul_ref(As[p], B, C=Cs[p] if c is not None else None,
                           bias=[1000, 2000] if bias is not None else None)
            check_frag(out, p, 0, layout, "U32", vm[p], 2, 2, D, bit(p))
        else:                                                    # bit-identical
            for k, v in s.tiles.items():
                assert np.array_equal(np.asarray(v)[p], np.asarray(getattr(out.tiles, k))[p])
    assert same_except(s, out, "tiles", "pc")


def test_right_only_local_a_must_hold_the_fragment_rows():
    # PE1's A has 2 rows but valid_M[1] = 1 (G = 17) -> TileLegality, nothing kept
    st = Core()
    st.shared(41, "U16", [[1, 2], [3, 4]])
    a = st.local("CUBE_M16", "U16", {0: [[1, 1]] * 16, 1: [[1, 1]] * 2}, hand=1)
    fails(st.state(), coop("TMATMUL", "U16", [41], [a], G=17, N=2, K=2), "Fault_TileLegality")


def test_right_only_bias_e6():
    # E6: Local A U16 6, Shared B U8 7, Local Bias U32 5 -> 47
    st = Core()
    st.shared(41, "U8", [[7]])
    a = st.local("CUBE_M16", "U16", {0: [[6]]}, hand=1)
    bias = st.local("RowMajor", "U32", {0: [[5]]}, hand=3)
    out = ok(st.state(), coop("TMATMUL.BIAS", "U16", [41], [a, bias], G=1, N=1, K=1,
                              extra=[datr(0, tables.dtype("U8").code, 0)]))
    check_frag(out, 0, 0, "CUBE_M16", "U32", 1, 1, 2, [[47]], 0b1000)


def test_both_shared_acc_takes_cs_layout():
    s, A, B = group_state(40)                                    # valid_M 16, 16, 8, 0
    st = Core()
    st.s, st.addr, st.reg = s, 0x800, 8
    Cs = {0: [[1, 2]] * 16, 1: [[3, 4]] * 16, 2: [[5, 6]] * 8}
    c = st.local("CUBE_M32", "U32", Cs, hand=2, size=2)
    s = ok(st.s, st.words)
    out = ok(s, coop("TMATMUL.ACC", "U16", [40, 41], [c], G=40, N=2, K=2))
    D = matmul_ref(A, B)
    for p, vm in enumerate([16, 16, 8, 0]):
        if vm:
            check_frag(out, p, 0, "CUBE_M32", "U32", vm, 2, 2,
                       matmul_ref(A[16 * p:16 * p + vm], B, C=Cs[p]), bit(p))
        else:
            assert allocated(out, p) == []
    assert D[0][0] + 1 == int(local(out, 0, 0)["words"][0])          # C[0][0] = 1


# ----------------------------------------------------------------- E6 vectors


@pytest.mark.parametrize("ta, tb", [(0, 0), (0, 1), (1, 0), (1, 1)])
def test_e6_transpose(ta, tb):
    st = Core()
    st.shared(40, "U16", [[1, 3], [2, 4]] if ta else [[1, 2], [3, 4]])
    st.shared(41, "U16", [[5, 7], [6, 8]] if tb else [[5, 6], [7, 8]])
    out = ok(st.state(), coop("TMATMUL", "U16", [40, 41], G=2, N=2, K=2,
                              fp=fpatr(trans_a=ta, trans_b=tb)))
    check_frag(out, 0, 0, "CUBE_M16", "U32", 2, 2, 2, [[19, 22], [43, 50]], 0b1000)
    assert all(allocated(out, p) == [] for p in (1, 2, 3))


def test_e6_transposed_a_rows_per_pe():
    # TransA with group_M 32: stored A is [K, G] (columns == G); PE1 computes
    # logical rows 16..31 = stored columns 16..31
    G, K = 32, 2
    A = [[r + 1, 2 * r + 1] for r in range(G)]
    st = Core()
    st.shared(40, "U16", [[A[r][k] for r in range(G)] for k in range(K)])
    st.shared(41, "U16", [[1, 0], [0, 1]])
    s = st.state()
    out = ok(s, coop("TMATMUL", "U16", [40, 41], G=G, N=2, K=2, fp=fpatr(trans_a=1)))
    for p in (0, 1):
        check_frag(out, p, 0, "CUBE_M16", "U32", 16, 2, 2, A[16 * p:16 * p + 16], bit(p))
    # the stored columns must equal G exactly
    fails(s, coop("TMATMUL", "U16", [40, 41], G=16, N=2, K=2, fp=fpatr(trans_a=1)),
          "Fault_TileLegality")
    fails(s, coop("TMATMUL", "U16", [40, 41], G=32, N=2, K=2), "Fault_TileLegality")


def test_e6_shared_pair_mixed_types():
    st = Core()
    st.shared(40, "U16", [[4]])
    st.shared(41, "U8", [[5]])
    out = ok(st.state(), coop("TMATMUL", "U16", [40, 41], G=1, N=1, K=1,
                              extra=[datr(0, tables.dtype("U8").code, 0)]))
    check_frag(out, 0, 0, "CUBE_M16", "U32", 1, 1, 2, [[20]], 0b1000)


def e6_mask_state(cfg):
    return _bundles.e6_mask_state(cfg, run_core=run_core)


@pytest.mark.parametrize("pemode", [1, 2, 3, 4, 5, 6, 7])
def test_0583_any_nonzero_mask(pemode):
    # semantics "0.58.3" reproduces matrix.md E6: D = 6 with that mask on the
    # executing PE (PE0's view), capacity + popcount(mask) x 128
    s = e6_mask_state(OLD)
    mask = tables.PEMODE_MASK[pemode]
    out = ok(s, coop("TMATMUL", "U16", [40, 41], G=1, N=1, K=1, size=1, pemode=pemode),
             cfg=OLD, core=False)
    check_frag(out, 0, 0, "CUBE_M16", "U32", 1, 1, 1, [[6]], mask)
    assert charge(out, 0) == bin(mask).count("1") * 128
    # adr0100 rejects every sparse mask
    if pemode != 7:
        fails(e6_mask_state(SMALL), coop("TMATMUL", "U16", [40, 41], G=1, N=1, K=1, size=1,
                                         pemode=pemode), "Fault_TileLegality", core=False)


def test_0583_run_core_replicates_the_fragment():
    s = e6_mask_state(OLD)
    out = ok(s, coop("TMATMUL", "U16", [40, 41], G=1, N=1, K=1, size=1, pemode=6), cfg=OLD)
    for p in PES:
        if p < 3:
            check_frag(out, p, 0, "CUBE_M16", "U32", 1, 1, 1, [[6]], 0b1110)
        else:
            assert allocated(out, p) == []


def test_0583_group_rules():
    # G must be a power of two, and the both-Shared D layout holds at most 32 rows
    s, A, B = group_state(64, cfg=OLD)
    fails(s, coop("TMATMUL", "U16", [40, 41], G=17, N=2, K=2), "Fault_TileLegality", cfg=OLD)
    fails(s, coop("TMATMUL", "U16", [40, 41], G=64, N=2, K=2), "Fault_TileLegality", cfg=OLD)
    out = ok(s, coop("TMATMUL", "U16", [40, 41], G=32, N=2, K=2), cfg=OLD)
    for p in PES:                                               # rows 0..31 on every PE
        check_frag(out, p, 0, "CUBE_M32", "U32", 32, 2, 2, matmul_ref(A[:32], B), 0b1111)


# ----------------------------------------------------------------- MX with Shared scales (E4)


def test_e4_mx_right_only_shared_scales():
    st = Core()
    st.shared(42, "E5M2", [[3]] * 32)
    st.shared(43, "E8M0", [[1]])
    a = st.local("CUBE_M16", "E4M3", {0: [[2] * 32]}, hand=1, size=3)
    sa = st.local("RowMajor", "E8M0", {0: [[1]]}, hand=3)
    out = ok(st.state(), coop("TMATMULMX", "E4M3", [42, 43], [a, sa], G=1, N=1, K=32, size=1,
                              extra=[datr(0, tables.dtype("E5M2").code, 0)]))
    check_frag(out, 0, 0, "CUBE_M16", "FP32", 1, 1, 1, [[192]], 0b1000)


def test_e4_mx_both_shared():
    st = Core()
    st.shared(44, "E4M3", [[2] * 32])
    st.shared(45, "E8M0", [[1]])
    st.shared(46, "E5M2", [[3]] * 32)
    st.shared(47, "E8M0", [[1]])
    s = st.state()
    words = coop("TMATMULMX", "E4M3", [44, 45, 46, 47], G=1, N=1, K=32, size=1,
                 extra=[datr(0, tables.dtype("E5M2").code, 0)])
    check_frag(ok(s, words), 0, 0, "CUBE_M16", "FP32", 1, 1, 1, [[192]], 0b1000)
    # an incomplete group (B without sB) is the wrong Shared count
    fails(s, coop("TMATMULMX", "E4M3", [44, 45, 46], G=1, N=1, K=32, size=1,
                  extra=[datr(0, tables.dtype("E5M2").code, 0)]), "Fault_TileLegality")


def test_mx_shared_scale_rows_follow_a_rows():
    # G = 17, K = 32: PE1 reads A row 16 and sA row 16
    st = Core()
    st.shared(44, "E4M3", [[1] * 32 for _ in range(17)], size=4)
    st.shared(45, "E8M0", [[r + 1] for r in range(17)])
    st.shared(46, "E5M2", [[1]] * 32)
    st.shared(47, "E8M0", [[1]])
    out = ok(st.state(), coop("TMATMULMX", "E4M3", [44, 45, 46, 47], G=17, N=1, K=32, size=1,
                              extra=[datr(0, tables.dtype("E5M2").code, 0)]))
    check_frag(out, 0, 0, "CUBE_M16", "FP32", 16, 1, 1, [[32 * (r + 1)] for r in range(16)], 0b1000)
    check_frag(out, 1, 0, "CUBE_M16", "FP32", 1, 1, 1, [[32 * 17]], 0b0100)


# ----------------------------------------------------------------- numeric profiles


def test_both_profiles_fp16_fragments():
    fp16 = lambda x: int(np.float16(x).view(np.uint16))              # noqa: E731
    A = [[1.5, -2.0] for _ in range(17)]
    A[16] = [0.25, 3.0]
    B = [[2.0, 1.0], [0.5, -1.0]]
    st = Core(IEEE)
    st.shared(40, "FP16", [[fp16(x) for x in row] for row in A], size=2)
    st.shared(41, "FP16", [[fp16(x) for x in row] for row in B])
    s = st.state()
    words = coop("TMATMUL", "FP16", [40, 41], G=17, N=2, K=2)
    f32 = lambda x: int(np.float32(x).view(np.uint32))               # noqa: E731
    out = ok(s, words, cfg=IEEE)
    exact = [[sum(A[r][k] * B[k][n] for k in range(2)) for n in range(2)] for r in range(17)]
    check_frag(out, 0, 0, "CUBE_M16", "FP32", 16, 2, 2, [[f32(x) for x in row] for row in exact[:16]],
               0b1000)
    check_frag(out, 1, 0, "CUBE_M16", "FP32", 1, 2, 2, [[f32(x) for x in exact[16]]], 0b0100)
    # portable: raw carrier words
    out = ok(s, words)
    raw = matmul_ref([[fp16(x) for x in row] for row in A], [[fp16(x) for x in row] for row in B])
    check_frag(out, 1, 0, "CUBE_M16", "FP32", 1, 2, 2, raw[16:], 0b0100)


# ----------------------------------------------------------------- structural negatives


@pytest.mark.parametrize("case", ["three_shared", "ios_size", "n_not_pow2", "k_not_pow2",
                                  "g_zero", "g_129", "trans_a_local", "tgemv", "tgemv_old",
                                  "no_fpatr"])
def test_structural_negatives(case):
    s, As, B, Cs, a, c, bias, layout, vm = right_only_state(17)
    st = Core()
    st.s, st.addr, st.reg = s, 0xA00, 12
    st.shared(40, "U16", [[1, 1]] * 17, size=2)
    s = ok(st.s, st.words)
    cfg, fault = SMALL, "Fault_TileLegality"
    words = {
        "three_shared": coop("TMATMUL", "U16", [40, 41, 42], G=17, N=2, K=2),
        "ios_size": coop("TMATMUL", "U16", [40, 41], G=17, N=2, K=2, ios_size=1),
        "n_not_pow2": coop("TMATMUL", "U16", [40, 41], G=17, N=3, K=2),
        "k_not_pow2": coop("TMATMUL", "U16", [41], [a], G=17, N=2, K=3),
        "g_zero": coop("TMATMUL", "U16", [40, 41], G=0, N=2, K=2),
        "g_129": coop("TMATMUL", "U16", [40, 41], G=129, N=2, K=2),
        "trans_a_local": coop("TMATMUL", "U16", [41], [a], G=17, N=2, K=2, fp=fpatr(trans_a=1)),
        "tgemv": coop("TGEMV", "U16", [41], [a], N=2, K=2),
        "tgemv_old": coop("TGEMV", "U16", [41], [a], N=2, K=2),
        "no_fpatr": [w for w in coop("TMATMUL", "U16", [40, 41], G=17, N=2, K=2) if w != FPATR0],
    }[case]
    if case == "tgemv_old":
        cfg = OLD
    if case == "no_fpatr":
        fault = "Fault_BundleControl"
    fails(s, words, fault, cfg=cfg)


# ----------------------------------------------------------------- Shared negatives


def shared_neg_state(**over):
    """group_M 17 both-Shared with S40 = A [17, 2], S41 = B [2, 2] as `over` edits them."""
    st = Core()
    A = over.get("A", [[1, 2]] * 17)
    st.shared(40, over.get("a_dt", "U16"), A, size=2, cols=over.get("a_cols"),
              pemode=over.get("a_pemode", 7))
    st.shared(41, over.get("b_dt", "U16"), [[1, 2], [3, 4]], cols=over.get("b_cols"))
    return st.state()


@pytest.mark.parametrize("case", ["unallocated", "alloc_mask", "initialized", "published",
                                  "contents", "dtype", "columns", "valid_rows", "b_columns"])
def test_shared_negatives(case):
    words = coop("TMATMUL", "U16", [40, 41], G=17, N=2, K=2)
    if case == "unallocated":
        s, words = shared_neg_state(), coop("TMATMUL", "U16", [40, 99], G=17, N=2, K=2)
    elif case == "alloc_mask":
        s = shared_neg_state(a_pemode=6)                          # allocation 1110
    elif case == "initialized":
        s = poke_shared(shared_neg_state(), 40, initialized_mask=0b1110)
    elif case == "published":
        s = poke_shared(shared_neg_state(), 40, published=False)
    elif case == "contents":
        s = poke_shared(shared_neg_state(), 40, contents_defined=False)
    elif case == "dtype":
        s = shared_neg_state(b_dt="S16")
    elif case == "columns":
        s = shared_neg_state(a_cols=4)                            # stored columns 4 != K
    elif case == "valid_rows":
        s = shared_neg_state(A=[[1, 2]] * 16)                     # 16 valid rows < group_M
    else:
        s = shared_neg_state(b_cols=4)
    fails(s, words, "Fault_TileLegality")
    for p in (0, 3):                                              # idle PE3 checks them too
        fails(s, words, "Fault_TileLegality", core=False, pe=p)


def test_shared_a_with_more_rows_than_group_m():
    s = shared_neg_state(A=[[r, 1] for r in range(30)])
    out = ok(s, coop("TMATMUL", "U16", [40, 41], G=17, N=2, K=2))
    check_frag(out, 1, 0, "CUBE_M16", "U32", 1, 2, 2, [[16 + 3, 32 + 4]], 0b0100)
