"""4-bit ordinary tiles in the model's packed carriers (issue 53, item 1;
docs/spec-notes.md rows 58-59).

The ASL model keeps a 4-bit ordinary tile in packed carriers
(packed-boundary.asl): payload slot j holds elements 16j..16j+15, nibble i
element 16j+i, and the slots after the last carrier keep the reset's zero.
`pj.read_tile(...).words` shows those slots (layouts/carriers.py), while
`defined` stays one bit per element, as the model prints it. MGATHER.CAS
reads its sources' raw slots (atomics.asl: index_payload[[e]]), so a 4-bit
Index's lane e reads carrier e, whose low nibble is element 16e.

The vectors below ran on the 0.58.3 model (`run_model.py --json`, every
block on PE 0); the tiles (every nonzero slot, the defined slots), the GM
bytes that changed and the final fault are the model's. Each runs on
pj.run and pj.reference.run.
"""

import numpy as np
import pytest
from hypothesis import given, strategies as st

import ptojax as pj
from ptojax.layouts.carriers import model_slots, pack_carriers
from ptojax.reference.carriers import raw_slot
from ptojax.state import state_differences

CFG = pj.MachineConfig(semantics="0.58.3")

# name: program (blocks split by ---), GPRs, GM bytes, the model's final fault,
# its tiles by TileIndex (shape = dtype, rows, columns, valid rows, valid columns;
# the number of slots it printed; the nonzero slots; the defined slots as
# [start, stop) runs) and the GM bytes after, where they changed
MODEL_VECTORS = {
    'A_issue': dict(
        text="""BSTART.TLOAD S4X2
B.DIM zero, 6, ->LB0
B.DIM a7, 0, ->LB1
B.DIM zero, 8, ->LB2
B.IOR s0, s7
B.IOT mask=1000, last, ->U<1>
BSTOP
---
BSTART.TMOV S4X2
B.IOT U#1, mask=1000, last, ->T<1>
BSTOP""",
        gpr={'a7': 4, 's0': 512, 's7': 3},
        gm={512: '4b709cc1fd37d9023d1fa2ad'},
        fault='Fault_None',
        tiles={
            0: dict(shape=('S4X2', 32, 8, 4, 6), slots=256, words={0: 0x0037fdc1009c704b, 1: 0x00ada21f003d02d9},
                      defined=[(0, 6), (8, 14), (16, 22), (24, 30)]),
            16: dict(shape=('S4X2', 32, 8, 4, 6), slots=256, words={0: 0x0037fdc1009c704b, 1: 0x00ada21f003d02d9},
                      defined=[(0, 6), (8, 14), (16, 22), (24, 30)]),
        },
        gm_after={}),
    'B_u4_lb16': dict(
        text="""BSTART.TLOAD U4X2
B.DIM zero, 10, ->LB0
B.DIM zero, 3, ->LB1
B.DIM zero, 16, ->LB2
B.IOR a0, a1
B.IOT mask=1000, last, ->T<1>
BSTOP
---
BSTART.TSTORE U4X2
B.DIM zero, 10, ->LB0
B.DIM zero, 3, ->LB1
B.IOR a2, a3
B.IOT T#1, mask=1000, last
BSTOP""",
        gpr={'a0': 512, 'a1': 5, 'a2': 768, 'a3': 6},
        gm={512: '52870ab8685653cf68c0c454bd1530', 768: '0ee6deee653db65de1cbd51a82ae66217697'},
        fault='Fault_None',
        tiles={
            0: dict(shape=('U4X2', 16, 16, 3, 10), slots=256, words={0: 0x00000068b80a8752, 1: 0x000000c068cf5356, 2: 0x0000003015bd54c4},
                      defined=[(0, 10), (16, 26), (32, 42)]),
        },
        gm_after={0x300: 0x52, 0x301: 0x87, 0x302: 0x0a, 0x303: 0xb8, 0x304: 0x68, 0x306: 0x56, 0x307: 0x53, 0x308: 0xcf, 0x309: 0x68, 0x30a: 0xc0, 0x30c: 0xc4, 0x30d: 0x54, 0x30e: 0xbd, 0x30f: 0x15, 0x310: 0x30}),
    'C_s4_lb2': dict(
        text="""BSTART.TLOAD S4X2
B.DIM zero, 2, ->LB0
B.DIM zero, 5, ->LB1
B.DIM zero, 2, ->LB2
B.IOR a0, a1
B.IOT mask=1000, last, ->T<1>
BSTOP""",
        gpr={'a0': 512, 'a1': 1},
        gm={512: 'df6a91c016'},
        fault='Fault_None',
        tiles={
            0: dict(shape=('S4X2', 128, 2, 5, 2), slots=256, words={0: 0x00000016c0916adf},
                      defined=[(0, 10)]),
        },
        gm_after={}),
    'D_u4_sz2_lb64': dict(
        text="""BSTART.TLOAD U4X2
B.DIM zero, 20, ->LB0
B.DIM zero, 3, ->LB1
B.DIM zero, 64, ->LB2
B.IOR a0, a1
B.IOT mask=1000, last, ->T<2>
BSTOP""",
        gpr={'a0': 512, 'a1': 11},
        gm={512: 'e02e54316d870ab168cacabdc84690ffef8221cd827fcfc4391b5ea86033b54a6d'},
        fault='Fault_None',
        tiles={
            0: dict(shape=('U4X2', 8, 64, 3, 20), slots=512, words={0: 0xb10a876d31542ee0, 1: 0x000000000000ca68, 4: 0x2182efff9046c8bd, 5: 0x00000000000082cd, 8: 0x3360a85e1b39c4cf, 9: 0x0000000000004ab5},
                      defined=[(0, 20), (64, 84), (128, 148)]),
        },
        gm_after={}),
    'E_s4_lb2_absent': dict(
        text="""BSTART.TLOAD S4X2
B.DIM zero, 7, ->LB0
B.DIM zero, 2, ->LB1
B.IOR a0, a1
B.IOT mask=1000, last, ->T<1>
BSTOP""",
        gpr={'a0': 512, 'a1': 4},
        gm={512: 'd50f234d173c7c2a'},
        fault='Fault_TileAllocation',
        tiles={
        },
        gm_after={}),
    'F_u4_full': dict(
        text="""BSTART.TLOAD U4X2
B.DIM zero, 32, ->LB0
B.DIM zero, 8, ->LB1
B.DIM zero, 32, ->LB2
B.IOR a0, a1
B.IOT mask=1000, last, ->T<1>
BSTOP""",
        gpr={'a0': 512, 'a1': 16},
        gm={512: 'e9598f99a918561499e227a17f63c565171ba02e17ff5e492749d5c77e5413efe94095e5a799107d4ee05fb40c57822cc8f38314f10f4a40fd3a40cea440db0b40f5b65f4032574447c9bf14245dd45d91ea3505afaa7d8f21c03bb0752a6e176761d8e359332e9e2592c3cd3e0472b2a90fda8048137e66a301a4e300721e09'},
        fault='Fault_None',
        tiles={
            0: dict(shape=('U4X2', 8, 32, 8, 32), slots=256, words={0: 0x145618a9998f59e9, 1: 0x65c5637fa127e299, 2: 0x495eff172ea01b17, 3: 0xef13547ec7d54927, 4: 0x7d1099a7e59540e9, 5: 0x2c82570cb45fe04e, 6: 0x404a0ff11483f3c8, 7: 0x0bdb40a4ce403afd, 8: 0x445732405fb6f540, 9: 0x5dd45d2414bfc947, 10: 0x8f7daaaf0535ea91, 11: 0x176e2a75b03bc021, 12: 0x9e2e3359e3d86167, 13: 0xb272043ecdc39225, 14: 0x667e134880da0fa9, 15: 0x091e7200e3a401a3},
                      defined=[(0, 256)]),
        },
        gm_after={}),
    'G_cas_u4_index': dict(
        text="""BSTART.TLOAD U4X2
B.DIM zero, 4, ->LB0
B.DIM zero, 2, ->LB1
B.DIM zero, 8, ->LB2
B.IOR a0, a1
B.IOT mask=1000, last, ->T<1>
BSTOP
---
BSTART.TLOAD U32
B.DIM zero, 4, ->LB0
B.DIM zero, 2, ->LB1
B.DIM zero, 4, ->LB2
B.IOR a2, a3
B.IOT mask=1000, last, ->T<1>
BSTOP
---
BSTART.TLOAD U32
B.DIM zero, 4, ->LB0
B.DIM zero, 2, ->LB1
B.DIM zero, 4, ->LB2
B.IOR a4, a3
B.IOT mask=1000, last, ->T<1>
BSTOP
---
BSTART.MGATHER.CAS U32
B.DIM zero, 4, ->LB0
B.DIM zero, 2, ->LB1
B.IOT T#1, T#2, mask=1000
B.IOT T#3, mask=1000, last, ->T<1>
B.IOR a5
BSTOP""",
        gpr={'a0': 512, 'a1': 2, 'a2': 640, 'a3': 16, 'a4': 704, 'a5': 1040},
        gm={512: '840c48c0', 640: '666666660000adde0100adde0200adde0300adde0400adde0500adde0600adde', 704: '0000c0ab0100c0ab0200c0ab0300c0ab0400c0ab0500c0ab0600c0ab0700c0ab', 1024: '1111111122222222333333334444444455555555666666667777777788888888'},
        fault='Fault_None',
        tiles={
            0: dict(shape=('U4X2', 32, 8, 2, 4), slots=256, words={0: 0x0000c04800000c84},
                      defined=[(0, 4), (8, 12)]),
            1: dict(shape=('U32', 8, 4, 2, 4), slots=32, words={0: 0x0000000066666666, 1: 0x00000000dead0000, 2: 0x00000000dead0001, 3: 0x00000000dead0002, 4: 0x00000000dead0003, 5: 0x00000000dead0004, 6: 0x00000000dead0005, 7: 0x00000000dead0006},
                      defined=[(0, 8)]),
            2: dict(shape=('U32', 8, 4, 2, 4), slots=32, words={0: 0x00000000abc00000, 1: 0x00000000abc00001, 2: 0x00000000abc00002, 3: 0x00000000abc00003, 4: 0x00000000abc00004, 5: 0x00000000abc00005, 6: 0x00000000abc00006, 7: 0x00000000abc00007},
                      defined=[(0, 8)]),
            3: dict(shape=('U32', 8, 4, 2, 4), slots=32, words={0: 0x0000000066666666, 1: 0x0000000055555555, 2: 0x0000000055555555, 3: 0x0000000055555555, 4: 0x0000000055555555, 5: 0x0000000055555555, 6: 0x0000000055555555, 7: 0x0000000055555555},
                      defined=[(0, 32)]),
        },
        gm_after={0x414: 0x00, 0x415: 0x00, 0x416: 0xc0, 0x417: 0xab}),
    'H_cas_s4_index': dict(
        text="""BSTART.TLOAD S4X2
B.DIM zero, 4, ->LB0
B.DIM zero, 2, ->LB1
B.DIM zero, 8, ->LB2
B.IOR a0, a1
B.IOT mask=1000, last, ->T<1>
BSTOP
---
BSTART.TLOAD U32
B.DIM zero, 4, ->LB0
B.DIM zero, 2, ->LB1
B.DIM zero, 4, ->LB2
B.IOR a2, a3
B.IOT mask=1000, last, ->T<1>
BSTOP
---
BSTART.TLOAD U32
B.DIM zero, 4, ->LB0
B.DIM zero, 2, ->LB1
B.DIM zero, 4, ->LB2
B.IOR a4, a3
B.IOT mask=1000, last, ->T<1>
BSTOP
---
BSTART.MGATHER.CAS U32
B.DIM zero, 4, ->LB0
B.DIM zero, 2, ->LB1
B.IOT T#1, T#2, mask=1000
B.IOT T#3, mask=1000, last, ->T<1>
B.IOR a5
BSTOP""",
        gpr={'a0': 512, 'a1': 2, 'a2': 640, 'a3': 16, 'a4': 704, 'a5': 1040},
        gm={512: '8c0448c0', 640: '444444440000adde0100adde0200adde0300adde0400adde0500adde0600adde', 704: '0000c0ab0100c0ab0200c0ab0300c0ab0400c0ab0500c0ab0600c0ab0700c0ab', 1024: '1111111122222222333333334444444455555555666666667777777788888888'},
        fault='Fault_None',
        tiles={
            0: dict(shape=('S4X2', 32, 8, 2, 4), slots=256, words={0: 0x0000c0480000048c},
                      defined=[(0, 4), (8, 12)]),
            1: dict(shape=('U32', 8, 4, 2, 4), slots=32, words={0: 0x0000000044444444, 1: 0x00000000dead0000, 2: 0x00000000dead0001, 3: 0x00000000dead0002, 4: 0x00000000dead0003, 5: 0x00000000dead0004, 6: 0x00000000dead0005, 7: 0x00000000dead0006},
                      defined=[(0, 8)]),
            2: dict(shape=('U32', 8, 4, 2, 4), slots=32, words={0: 0x00000000abc00000, 1: 0x00000000abc00001, 2: 0x00000000abc00002, 3: 0x00000000abc00003, 4: 0x00000000abc00004, 5: 0x00000000abc00005, 6: 0x00000000abc00006, 7: 0x00000000abc00007},
                      defined=[(0, 8)]),
            3: dict(shape=('U32', 8, 4, 2, 4), slots=32, words={0: 0x0000000044444444, 1: 0x0000000055555555, 2: 0x0000000055555555, 3: 0x0000000055555555, 4: 0x0000000055555555, 5: 0x0000000055555555, 6: 0x0000000055555555, 7: 0x0000000055555555},
                      defined=[(0, 32)]),
        },
        gm_after={0x40c: 0x00, 0x40d: 0x00, 0x40e: 0xc0, 0x40f: 0xab}),
}


def start(v):
    s = pj.reset(CFG)
    for address, data in v["gm"].items():
        s = pj.write_memory(s, address, np.frombuffer(bytes.fromhex(data), np.uint8))
    for reg, value in v["gpr"].items():
        s = pj.write_gpr(s, reg, value)
    return s


@pytest.fixture(scope="module")
def results():
    out = {}
    for name, v in MODEL_VECTORS.items():
        s, words = start(v), pj.asm.assemble(v["text"].replace("\n---\n", "\n"))
        out[name] = (s, pj.run(s, words, cfg=CFG), pj.reference.run(s, words, cfg=CFG))
    return out


@pytest.mark.parametrize("name", list(MODEL_VECTORS))
@pytest.mark.parametrize("model", ["jax", "reference"])
def test_model_vectors(results, name, model):
    v = MODEL_VECTORS[name]
    before, jax_r, ref_r = results[name]
    r = jax_r if model == "jax" else ref_r
    assert r.fault == v["fault"]
    for index in range(64):
        t = pj.read_tile(r.state, index)
        want = v["tiles"].get(index)
        assert t.allocated == (want is not None), index
        if want is None:
            continue
        assert (t.dtype, t.rows, t.columns, t.valid_rows, t.valid_columns) == want["shape"]
        words = np.zeros(want["slots"], np.uint64)
        words[list(want["words"])] = list(want["words"].values())
        defined = np.zeros(want["slots"], bool)
        for lo, hi in want["defined"]:
            defined[lo:hi] = True
        np.testing.assert_array_equal(t.words, words)
        np.testing.assert_array_equal(t.defined, defined)
    gm0, gm1 = np.asarray(before.gm), np.asarray(r.state.gm)
    changed = {int(a): int(gm1[a]) for a in np.flatnonzero(gm0 != gm1)}
    assert changed == v["gm_after"]


@pytest.mark.parametrize("name", list(MODEL_VECTORS))
def test_both_models_end_in_the_same_state(results, name):
    _, jax_r, ref_r = results[name]
    assert state_differences(jax_r.state, ref_r.state) == []


def test_elements_read_through_the_carriers(results):
    """TileView.element and to_nd read a carrier's nibbles: the issue's tile,
    rows 3 bytes apart, element (r, c) = nibble c of its row's bytes."""
    v = MODEL_VECTORS["A_issue"]
    raw = bytes.fromhex(v["gm"][0x200])
    want = np.array([[(raw[3 * r + c // 2] >> (4 * (c % 2))) & 0xF for c in range(6)] for r in range(4)],
                    np.uint64)
    for r in results["A_issue"][1:]:
        for index in (0, 16):
            t = pj.read_tile(r.state, index)
            assert t.elements_per_word == 16
            np.testing.assert_array_equal(t.to_nd(), want)
            assert t.element(1, 0) == int(want[1, 0])


def test_a_cube_4bit_tile_keeps_one_element_a_slot():
    """CUBE tiles are never packed (TileUsesPackedCarrierRepresentation is false
    for CUBE layouts): a U4X2 CUBE_N8 tile's slot 0 is element (0, 0) alone."""
    s = pj.write_memory(pj.reset(CFG), 0x400, np.array([0xBA], np.uint8))
    s = pj.write_gpr(pj.write_gpr(s, "a0", 0x400), "a1", 5)
    words = pj.asm.assemble("BSTART.TLOAD U4X2\nB.DATR {ND2N8, DTYPE_NONE, Null, EQ, Default, 0, 0}\nB.DIM zero, 9, ->LB0\nB.DIM zero, 2, ->LB1\n"
                            "B.IOR a0, a1\nB.IOT mask=1000, last, ->M<2>\nBSTOP")
    for r in (pj.run(s, words, cfg=CFG), pj.reference.run(s, words, cfg=CFG)):
        assert r.fault == "Fault_None"
        t = next(pj.read_tile(r.state, i) for i in range(64) if pj.read_tile(r.state, i).allocated)
        assert t.elements_per_word == 1 and (int(t.words[0]), int(t.words[32])) == (0xA, 0xB)


@given(st.lists(st.integers(0, (1 << 64) - 1), min_size=1, max_size=300), st.sampled_from([4, 8, 16, 32]))
def test_carriers_hold_each_element_in_its_lane(elements, bits):
    """Each carrier's lane i is element k*j + i's low bits; zero past the last carrier."""
    x = np.array(elements, np.uint64)
    packed = pack_carriers(x, bits)
    k, mask = 64 // bits, (1 << bits) - 1
    assert packed.shape == x.shape
    for j in range(-(-len(elements) // k)):
        for i in range(k):
            e = k * j + i
            lane = (int(packed[j]) >> (bits * i)) & mask
            assert lane == (elements[e] & mask if e < len(elements) else 0)
    assert not packed[-(-len(elements) // k):].any()


@given(st.lists(st.integers(0, 15), min_size=1, max_size=256), st.integers(0, 40))
def test_the_reference_raw_slot_is_the_view_carrier(elements, e):
    """reference.carriers.raw_slot (the oracle's own packing) agrees with the
    view's carriers slot for slot, and is the element itself where unpacked."""
    rows, cols = -(-len(elements) // 8), 8
    x = elements + [0] * (rows * cols - len(elements))
    u4, u8 = pj.tables.DTYPE_BY_NAME["U4X2"], pj.tables.DTYPE_BY_NAME["U8"]
    view = model_slots(np.array(x, np.uint64), "RowMajor", "U4X2", rows, cols)
    assert raw_slot(x, "RowMajor", u4, rows, cols, e) == (int(view[e]) if e < len(x) else 0)
    assert raw_slot(x, "RowMajor", u8, rows, cols, e) == (x[e] if e < len(x) else 0)
