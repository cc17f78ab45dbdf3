"""Shapes that do not depend on the work: pj.batch.run pads the batch to a
power-of-two bucket, so batch sizes of one bucket share one compiled program.

Every run here has 8 rows compiled (B = 5, 6, 7, 8), words of one length
bucket and one completion bound, so the module compiles the executor once
kept and once donated.
"""

import jax
import numpy as np
import pytest

import ptojax as pj
from ptojax.batch.execute import _run_donated, _run_kept, batch_rows
from ptojax.state import state_differences

CFG = pj.preset("tiny")
TEXT = "\n".join(["BSTART.TLOAD U32", "B.DIM zero, 4, ->LB0", "B.DIM zero, 4, ->LB1",
                  "B.IOR a0, a1", "B.IOT mask=1000, last, ->T<1>", "BSTOP"])
WORDS = pj.asm.assemble(TEXT)


def state(i: int):
    """GM holds a 4x4 U32 matrix that differs per row."""
    data = (np.arange(16, dtype=np.uint32) * (i + 1) + 7 * i).astype("<u4").tobytes()
    s = pj.write_memory(pj.reset(CFG), 0x100, data)
    return pj.write_gpr(pj.write_gpr(s, "a0", 0x100), "a1", 16)


def streams(B):
    # every row the TLOAD; row 2 stops before its BSTOP, row 4 runs nothing
    out = [list(WORDS) for _ in range(B)]
    if B > 2:
        out[2] = out[2][:-1]
    if B > 4:
        out[4] = []
    return out


def rows_of(res, i):
    return jax.tree_util.tree_map(lambda a: np.asarray(a[i]), res.state)


def same(x, y):
    return not state_differences(x, y)


@pytest.fixture(scope="module")
def full():
    return pj.batch.run(pj.batch.stack_states([state(i) for i in range(8)]), streams(8), cfg=CFG)


def test_batch_rows_buckets():
    assert [batch_rows(b) for b in (1, 2, 3, 5, 8, 9, 1000, 4096)] == [1, 2, 4, 8, 8, 16, 1024, 4096]
    assert batch_rows(5, 3) == 9 and batch_rows(1, 2) == 2
    with pytest.raises(ValueError):
        batch_rows(0)


def test_sizes_in_one_bucket_share_one_program(full):
    assert full.faults == ["Fault_None"] * 8
    assert list(full.executed) == [6, 6, 5, 6, 0, 6, 6, 6]
    compiled = _run_kept._cache_size()
    for B in (5, 7):
        res = pj.batch.run(pj.batch.stack_states([state(i) for i in range(B)]), streams(B), cfg=CFG)
        assert len(res) == B and res.state.gm.shape[0] == B
        assert res.fault_code.shape == res.executed.shape == res.fault_address.shape == (B,)
        assert np.array_equal(res.executed, full.executed[:B])
        for i in range(B):
            assert same(rows_of(res, i), rows_of(full, i))
        assert res[B - 1].ok
    # one State for every stream: broadcast to the same 8 rows
    res = pj.batch.run(state(3), [WORDS] * 6, cfg=CFG)
    assert len(res) == 6 and all(same(rows_of(res, i), rows_of(full, 3)) for i in range(6))
    assert _run_kept._cache_size() == compiled


def test_donated_padded_batch(full):
    given = pj.batch.stack_states([state(i) for i in range(6)])
    res = pj.batch.run(given, streams(6), cfg=CFG, donate=True)
    assert len(res) == 6 and np.array_equal(res.executed, full.executed[:6])
    assert all(same(rows_of(res, i), rows_of(full, i)) for i in range(6))
    assert given.gm.is_deleted()                 # consumed, as donation does
    compiled = _run_donated._cache_size()
    again = pj.batch.stack_states([state(i) for i in range(8)])
    res8 = pj.batch.run(again, streams(8), cfg=CFG, donate=True)
    assert same(jax.tree_util.tree_map(np.asarray, res8.state), jax.tree_util.tree_map(np.asarray, full.state))
    assert _run_donated._cache_size() == compiled
