"""The transport scenarios of the oracle's tests (E1..E6, E9, every C.5..C.8
check, stream and header rules) run on the JAX executor. Random words and
hand-made (garbage) States run on pj.run and on the reference model, which
must agree: same fault, fault address, executed count and every State leaf.
An open block with values header processing never leaves is not a State the
model can be in: both models refuse it (block_domain.check_block)."""

import jax
import numpy as np
import pytest

import ptojax as pj
from ptojax import tables
from ptojax.block_domain import block_domain_errors
from ptojax.isa.encode import BSTOP, datr, dim, ior, iot_dst, iot_src
from _bundles import X2, X3, bstart, cube_load, cube_store, poke, poke_tiles, small, with_regs
from _differential import Outcome, assert_same
from _scenarios import rebind

# test_encoders_match_golden_words runs no bundle: it runs once, in the oracle's file
globals().update(rebind("test_reference_transport.py", pj.run, "_transport_on_jax",
                        reference_only=("test_encoders_match_golden_words",)))


def assert_same_as_reference(s, words, on_fault, case):
    got = pj.run(s, words, on_fault=on_fault)
    want = pj.reference.run(s, words, on_fault=on_fault)
    text = f"{case}, on_fault={on_fault}, words {[f'{w:#010x}' for w in words]}"
    assert got.fault_address == want.fault_address, text
    assert_same("pj.run", text, Outcome.of(got), Outcome.of(want))


def test_any_word_matches_the_reference():
    """Each of 240 random words twice in an otherwise legal CUBE TLOAD block."""
    rng = np.random.default_rng(7)
    s = with_regs(small(), x2=0x123, x3=0xFFFFFFFFFFFFFFF7)
    for i in range(40):
        for w in rng.integers(0, 1 << 32, 6, dtype=np.uint64).tolist():
            words = [bstart("TLOAD", "FP16"), w, datr(22, 31, 0), dim(0, 2), dim(1, 2),
                     iot_dst(1), w, BSTOP]
            assert_same_as_reference(s, words, "abandon", f"round {i}")


PICKS = np.array([0, 1, 2, 3, 7, 15, 16, 21, 22, 25, 31, 63, 64, 128, 1024, 65535, 65536,
                  -1, -7, 2**31 - 1], np.int64)


def garbage_state(rng, base, block=True, picks=PICKS):
    """`base` with random values (from `picks`) in about half of every Local
    descriptor field (payload words and definedness kept), a random
    tile_capacity and, with `block`, every block field random (an open block of
    any operation id, bindings, dims): States that run never produces."""
    t = {k: np.asarray(v).copy() for k, v in base.tiles.items() if k not in ("words", "defined")}
    for _k, a in t.items():
        hit = rng.random(a.shape) < 0.5
        a[hit] = (rng.random(a.shape) < 0.5)[hit] if a.dtype == bool else rng.choice(picks, a.shape)[hit]
    b = {k: np.asarray(v).copy() for k, v in base.block.items()}
    for k, a in b.items():
        if not block:
            break
        if a.dtype == bool:
            b[k] = rng.random(a.shape) < 0.5
        elif a.dtype == np.int32:
            b[k] = rng.choice(picks, a.shape).astype(np.int32)
        else:
            b[k] = rng.integers(0, 2**31, a.shape).astype(a.dtype)
    with jax.enable_x64(True):
        s = base.replace(tiles=base.tiles.replace(**{k: jax.numpy.asarray(v) for k, v in t.items()}),
                         block=base.block.replace(**{k: jax.numpy.asarray(v) for k, v in b.items()}))
    return poke(s, tile_capacity=int(rng.choice([0, 128, 4096, 262144])))


def test_hand_made_descriptors_match_the_reference():
    """25 States with garbage Local descriptors and tile_capacity (no block
    open), each running whole CUBE and ordinary TLOAD/TSTORE blocks that
    allocate over them or read them as sources (capacities up to 2^31-1 too:
    test_budget_charge_of_huge_capacity)."""
    rng = np.random.default_rng(12)
    base = small()
    streams = (cube_load(22, "FP16", 2, 2, hand=1), cube_store(25, "FP16", 2, 2, src=16),
               [bstart("TLOAD", "U32"), dim(0, 2), dim(1, 2), iot_dst(0), BSTOP],
               [bstart("TSTORE", "U32"), iot_src(0), BSTOP])
    for i in range(25):
        s = garbage_state(rng, base, block=False)
        for words in streams:
            on_fault = str(rng.choice(["abandon", "hold"]))
            assert_same_as_reference(s, words, on_fault, f"garbage descriptors {i} (seed 12)")


def test_out_of_domain_blocks_are_rejected_by_both_models():
    """A State whose open-block fields hold values header processing never
    leaves (a reserved code, a count past its slots, a field set before its
    command) is not a State the model can be in: pj.run, pj.run_core,
    pj.batch.run and pj.reference.run all refuse it with a ValueError naming
    the field."""
    rng = np.random.default_rng(11)
    base = small()
    for i in range(25):
        s = garbage_state(rng, base)
        assert block_domain_errors(s.block), f"garbage State {i} passed the domain check"
        for run in (pj.run, pj.reference.run, pj.run_core, pj.reference.run_core,
                    lambda s, w: pj.batch.run(s, [w, w])):
            with pytest.raises(ValueError, match=r"State\.block\.\w+"):
                run(s, [BSTOP])


def test_block_check_of_a_first_large_batch():
    """The first block check of a process on a batch of >= 1024 open blocks
    runs in the jitted chunk (block_domain._bad_chunk), which builds the rules it
    reads: they must come out concrete there (a first pj.batch.run of 4096
    States raised TracerArrayConversionError)."""
    from ptojax import block_domain
    s = small()
    n = 1024
    block = jax.tree_util.tree_map(lambda a: np.broadcast_to(np.asarray(a), (n,) + a.shape),
                                   s.block)
    opened = block.replace(active=np.ones(n, bool), op=np.full(n, tables.OP_ID["TLOAD"], np.int32),
                           dtype=np.full(n, tables.DTYPE_BY_NAME["FP16"].code, np.int32))
    bad = opened.replace(op=np.full(n, 999, np.int32))         # an operation id past the table
    with jax.enable_x64(True):                                 # as pj.batch.run checks it
        for rows, want in ((opened, False), (bad, True)):
            # as in a fresh process: rules not built, the chunk not traced yet
            block_domain._block_rules.cache_clear()
            block_domain._bad_chunk.clear_cache()
            assert (block_domain._bad_rows(rows) == want).all()
            assert block_domain._bad_chunk._cache_size() == 1, "the open rows were not screened in the chunk"


def test_block_screen_matches_every_rule():
    """block_domain._bad_rows screens closed blocks by comparing each field with its
    reset value and only open ones by every rule: on a batch of reset blocks,
    closed ones with one field off its reset value, garbage blocks and open
    in-domain ones, its verdict is the full rules' on every row."""
    from ptojax import block_domain
    rng = np.random.default_rng(5)
    base = small()
    blocks = []
    for i in range(80):
        kind = i % 4
        if kind == 0:
            blocks.append(base.block)
        elif kind == 1:
            name, shape, _ = block_domain.BLOCK_FIELDS[int(rng.integers(1, len(block_domain.BLOCK_FIELDS)))]
            off = np.asarray(getattr(base.block, name)).copy() + 1
            blocks.append(_with_block(base, {name: off}).block)
        elif kind == 2:
            blocks.append(garbage_state(rng, base).block)
        else:
            blocks.append(in_domain_block(rng, base).block)
    batch = jax.tree_util.tree_map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *blocks)
    with jax.enable_x64(True):
        got = block_domain._bad_rows(batch)
        want = block_domain._bad_positions(block_domain._packed_rows(batch, np), np).any(-1)
    np.testing.assert_array_equal(got, want)
    active = np.asarray(batch.active)
    for rows in (active, ~active):      # both verdicts among the open and the closed rows
        assert set(want[rows].tolist()) == {False, True}


def test_packed_block_round_trip():
    """Phase 1 carries the block packed (storage.pack_block, each binding row
    one int32 of bit fields): unpacking returns every field of in-domain
    blocks, and of rows whose every column holds its widest value."""
    from ptojax.state import BLOCK_FIELDS
    from ptojax.storage import ROW_BITS, pack_block, unpack_block
    rng = np.random.default_rng(6)
    base = small()
    widest = {name: np.broadcast_to((1 << np.array(bits)) - 1,
                                    np.shape(getattr(base.block, name))).astype(np.int32)
              for name, bits in ROW_BITS.items()}
    cases = [_with_block(base, widest).block] + [in_domain_block(rng, base).block for _ in range(30)]
    for b in cases:
        with jax.enable_x64(True):
            got = unpack_block(pack_block(b))
        for name, _, _ in BLOCK_FIELDS:
            np.testing.assert_array_equal(np.asarray(getattr(got, name)),
                                          np.asarray(getattr(b, name)), err_msg=name)


def test_one_pe_descriptor_table_round_trip():
    """A stream of one PE's blocks packs that PE's descriptors only
    (storage.pack_tiles with pe); unpacking writes that row back into the
    others' untouched fields: a round trip changes nothing, and a table
    changed while packed lands in PE pe's row and nowhere else."""
    from ptojax.state import TILE_FIELDS, state_differences
    from ptojax.storage import pack_tiles, unpack_tiles
    s = garbage_state(np.random.default_rng(8), small(), block=False)
    W = s.tiles.words.shape[-1]
    fields = [n for n in TILE_FIELDS if n != "allocated"]
    for pe in (0, 1, 2, 3, None):
        with jax.enable_x64(True):
            local = pack_tiles(s.tiles, pe)
            back = unpack_tiles(local, W, s.tiles, pe)
            bumped = unpack_tiles(local.replace(desc=local.desc + 1), W, s.tiles, pe)
        assert local.desc.shape == (4 if pe is None else 1,) + s.tiles.mask.shape[1:] \
            + (len(TILE_FIELDS),)
        assert state_differences(s.replace(tiles=back), s) == [], pe
        for n in fields:
            was, now = np.asarray(getattr(s.tiles, n)), np.asarray(getattr(bumped, n))
            rows = range(4) if pe is None else [pe]
            for p in range(4):
                want = was[p] + 1 if p in rows else was[p]
                np.testing.assert_array_equal(now[p], want, err_msg=f"{n}, PE {p}, packed {pe}")


def in_domain_block(rng, base):
    """A random open block of values header processing can leave: every field
    one its command decodes to (encoding.md section 4; reserved codes fault at
    decode) or at reset until its command is seen, bindings up to their count."""
    dtypes = [d.code for d in tables.DATATYPES]
    masks = [m for m in tables.PEMODE_MASK if m]
    pick = lambda xs: int(rng.choice(xs))
    b = {k: np.asarray(v).copy() for k, v in base.block.items()}
    # half of them a plain TLOAD/TSTORE header, so that blocks also complete
    plain = rng.random() < 0.5
    b.update(active=True, op=pick([tables.OP_ID["TLOAD"], tables.OP_ID["TSTORE"]] if plain
                                  else range(len(tables.OPS))),
             dtype=pick(dtypes), pc=rng.integers(0, 1 << 20) * 2)
    if rng.random() < 0.5 and not plain:
        b.update(datr_present=True, datr=np.array(
            [pick(list(tables.LAYOUT_CODES)), pick(dtypes + [tables.DTYPE_NONE]), pick(range(4)),
             pick(range(len(tables.CMODES))), pick(range(8)), pick(range(2)), pick(range(2))], np.int32))
    for t in range(3):
        if rng.random() < 0.5:
            b["lb_present"][t] = True
            b["lb"][t] = pick([1, 2, 3, 4] if plain else [0, 1, 2, 3, 7, 16, 32, 255, 0xFFFF])
    if rng.random() < 0.5:
        b.update(ior_present=True, ior=np.array([0, X2, X3, 0]) if plain
                 else rng.integers(0, tables.NUM_GPRS, 4).astype(np.int32))
    n_iot = pick([0, 1] if plain else range(4))
    mask = pick(masks)
    for r in range(n_iot):
        dst, s0, s1 = (rng.random(3) < 0.5).tolist()
        b["iot"][r] = [dst, pick(range(4)) * dst, pick(range(1, 11)) * dst, mask,
                       s0, s1, pick(range(64)) * s0, pick(range(64)) * s1]
    b.update(iot_count=n_iot, iot_closed=n_iot > 0 and rng.random() < 0.5)
    if plain:
        return _with_block(base, b)
    n_ios = pick(range(3))
    for r in range(n_ios):
        b["ios"][r] = [pick(range(256)), pick(range(13)), mask]
    b.update(ios_count=n_ios, zero_seen=rng.random() < 0.3)
    if rng.random() < 0.3:
        b.update(fpatr_present=True, fpatr=int(rng.integers(0, 1 << 32)))
    if rng.random() < 0.3:
        b.update(catr_present=True, catr=int(rng.integers(0, 1 << 32)))
    return _with_block(base, b)


def _with_block(s, fields):
    with jax.enable_x64(True):
        return s.replace(block=s.block.replace(**{
            k: jax.numpy.asarray(np.asarray(v, np.asarray(getattr(s.block, k)).dtype))
            for k, v in fields.items()}))


def test_hand_made_blocks_match_the_reference():
    """60 States with an open block of random in-domain fields (any operation,
    bindings, dims, attributes) over garbage descriptors, each completing its
    block (BSTOP), opening a new one (BSTART) and binding a tile first."""
    rng = np.random.default_rng(11)
    base = small()
    for i in range(60):
        s = in_domain_block(rng, garbage_state(rng, base, block=False))
        assert block_domain_errors(s.block) == [], (i, block_domain_errors(s.block))
        for words in ([BSTOP], [bstart("TLOAD", "FP16")], [iot_dst(1), ior(X2, X3), BSTOP]):
            on_fault = str(rng.choice(["abandon", "hold"]))
            assert_same_as_reference(s, words, on_fault, f"hand-made block {i} (seed 11)")


def test_budget_charge_of_huge_capacity():
    """Shrunk from a garbage-descriptor case: one allocated tile charging
    2 * (2^31-1) bytes exhausts a 262144-byte budget, so the next TLOAD faults."""
    s = poke(small(), tile_capacity=262144)
    for field, value in (("allocated", True), ("mask", 0b0110), ("capacity", 2**31 - 1)):
        s = poke_tiles(s, field, 2, value)
    assert pj.reference.run(s, cube_load(22, "FP16", 2, 2, hand=1)).fault == "Fault_TileAllocation"
    assert_same_as_reference(s, cube_load(22, "FP16", 2, 2, hand=1), "abandon", "huge capacity")


def test_lane_divmod_is_exact_over_every_lane_index():
    """ops.common.lane_divmod (float reciprocal + one correction) against integer
    division: every lane index of the largest tile (W = 32768) by every divisor up
    to 1024 and a spread of larger ones, then indices up to its 2**22 bound."""
    from ptojax.ops.common import lane_divmod
    f = jax.jit(jax.vmap(lane_divmod, in_axes=(None, 0)))
    j = np.arange(1 << 15, dtype=np.int32)
    ds = np.concatenate([np.arange(-2, 1025), np.unique(np.geomspace(1025, 1 << 22, 200).astype(np.int32)),
                         [32767, 32768, 32769]]).astype(np.int32)
    q, r = (np.asarray(a) for a in f(j, ds))
    d = np.maximum(ds, 1)[:, None]
    assert (q == j // d).all() and (r == j % d).all()
    big = np.arange((1 << 22) - (1 << 16), 1 << 22, dtype=np.int32)
    q, r = (np.asarray(a) for a in f(big, ds[-300:]))
    d = np.maximum(ds[-300:], 1)[:, None]
    assert (q == big // d).all() and (r == big % d).all()


def test_last_valid_element_has_the_largest_ordinary_index():
    """ops.common.ordinary_source_legal checks only (VR-1, VC-1) against the payload:
    in every ordinary layout whose rows/cols/fractal rules hold, no valid element
    has a larger index (every region of every legal shape up to 64 x 128)."""
    from ptojax.ops.common import ORDINARY_LAYOUTS, fractal_ok, ordinary_index
    grid = [(layout, rows, cols, bits) for bits in (4, 8, 16, 32, 64)
            for rows in (1, 2, 3, 16, 17, 32, 48, 64) for cols in (1, 2, 4, 8, 16, 32, 64, 128)
            for layout in ORDINARY_LAYOUTS]
    layout, rows, cols, bits = (np.array(v, np.int32) for v in zip(*grid))
    legal = np.asarray(fractal_ok(layout, rows, cols, bits))
    r, c = np.meshgrid(np.arange(64), np.arange(128), indexing="ij")
    idx = np.asarray(jax.jit(jax.vmap(lambda *d: ordinary_index(*d, r, c)))(layout, rows, cols, bits))
    assert legal.sum() > 300
    for k in np.flatnonzero(legal):
        sub = idx[k, :rows[k], :cols[k]]
        # the largest index over every region [0, vr) x [0, vc) is at its corner
        top = np.maximum.accumulate(np.maximum.accumulate(sub, 0), 1)
        assert (top == sub).all(), grid[k]
