"""A State knows its rules (issue 35, item 4).

pj.reset(cfg) records cfg.semantics and cfg.profile in the State (State.rules,
static like its sizes), and pj.run, pj.run_core, pj.batch.run and
pj.reference.run run those rules when no cfg= is given. Before, a State reset
for "0.58.3" or "ieee" ran ADR 0100's rules and the portable profile unless
every call repeated cfg=, with no warning.

The programs are those of tests/test_reference_shared.py (a cooperative
TMATMUL with a sparse PE mask: legal under 0.58.3 only) and
tests/test_reference_matmul.py (a 1x3x1 FP16 product whose ieee result
depends on the order of its roundings), so their compiled programs are the
ones those files' JAX twins use.
"""

import jax
import numpy as np
import pytest

import ptojax as pj
from ptojax.state import Rules, config_of
from _bundles import FP16, OLD, SMALL, Setup, coop, e6_mask_state, matmul_words, matrix_of

IEEE = SMALL.replace(profile="ieee")
# a sparse-mask (1100) cooperative TMATMUL on S40 x S41: 0.58.3 completes it,
# ADR 0100 faults Fault_TileLegality (matrix.md E6)
SPARSE = coop("TMATMUL", "U16", [40, 41], G=1, N=1, K=1, size=1, pemode=5)


@pytest.fixture(scope="module")
def states():
    return {"adr0100": e6_mask_state(SMALL, run_core=pj.reference.run_core),
            "0.58.3": e6_mask_state(OLD, run_core=pj.reference.run_core)}


def test_reset_records_the_rules():
    for cfg in (SMALL, OLD, IEEE, OLD.replace(profile="ieee")):
        s = pj.reset(cfg)
        assert s.rules == Rules(cfg.semantics, cfg.profile)
        assert config_of(s) == cfg.replace(cas_lane_order="row-major", cas_seed=0)
    assert pj.reset().rules == Rules("adr0100", "portable")


def test_rules_are_static_and_leafless():
    s = pj.reset(OLD)
    assert len(jax.tree_util.tree_leaves(s)) == len(jax.tree_util.tree_leaves(pj.reset(SMALL)))
    assert jax.jit(lambda s: s)(s).rules == s.rules
    batch = jax.tree_util.tree_map(lambda *x: np.stack(x), s, s)
    assert jax.vmap(lambda s: s)(batch).rules == s.rules
    # States of different rules do not mix, as States of different sizes do not
    with pytest.raises(ValueError):
        jax.tree_util.tree_map(lambda a, b: a, s, pj.reset(SMALL))


@pytest.mark.parametrize("bad", [{"semantics": "0.59"}, {"profile": "fast"}])
def test_unknown_rules_are_refused(bad):
    with pytest.raises(ValueError, match="not in"):
        Rules(**bad)
    with pytest.raises(ValueError, match="not in"):
        SMALL.replace(**bad)


@pytest.mark.parametrize("runner", ["run", "reference.run"])
def test_run_uses_the_states_semantics(states, runner):
    fn = pj.run if runner == "run" else pj.reference.run
    assert fn(states["0.58.3"], SPARSE).fault == "Fault_None"
    assert fn(states["adr0100"], SPARSE).fault == "Fault_TileLegality"
    # cfg= given: its rules hold for the call; the State keeps its own
    r = fn(states["adr0100"], SPARSE, cfg=OLD)
    assert r.fault == "Fault_None" and r.state.rules == Rules("adr0100", "portable")
    assert fn(states["0.58.3"], SPARSE, cfg=SMALL).fault == "Fault_TileLegality"


@pytest.mark.parametrize("runner", ["run_core", "reference.run_core"])
def test_run_core_uses_the_states_semantics(states, runner):
    fn = pj.run_core if runner == "run_core" else pj.reference.run_core
    assert fn(states["0.58.3"], SPARSE).fault == "Fault_None"
    assert fn(states["adr0100"], SPARSE).fault == "Fault_TileLegality"


def test_batch_run_uses_the_states_semantics(states):
    for name, fault in (("0.58.3", "Fault_None"), ("adr0100", "Fault_TileLegality")):
        batch = jax.tree_util.tree_map(lambda x: np.stack([x, x]), states[name])
        r = pj.batch.run(batch, np.array([SPARSE, SPARSE], np.uint32), core=True)
        assert list(r.faults) == [fault, fault]
        assert r.state.rules == states[name].rules


def test_run_uses_the_states_profile():
    # 1 + 2^-24 + 2^-24 in ascending k: each ieee add ties to even (1.0)
    def product(reset_for, **kw):
        st = Setup(reset_for, run=pj.reference.run)
        a = st.cube("CUBE_M16", "FP16", [[FP16[1.0]] * 3], size=4)
        b = st.cube("CUBE_N8", "FP16", [[FP16[1.0]], [FP16[2 ** -24]], [FP16[2 ** -24]]], size=4)
        r = pj.run(st.state(), matmul_words("TMATMUL", "FP16", [a, b], 1, 1, 3), **kw)
        assert r.fault == "Fault_None"
        return matrix_of(r.state, 0, "CUBE_M16", "FP32", 1, 1)

    ieee = product(IEEE)
    assert ieee == [[0x3F800000]]
    assert product(IEEE, cfg=IEEE) == ieee
    assert product(SMALL) == product(IEEE, cfg=SMALL) != ieee


def test_cfg_with_other_sizes_is_refused(states):
    s = states["0.58.3"]
    for fn in (pj.run, pj.run_core, pj.reference.run):
        with pytest.raises(ValueError, match="does not match"):
            fn(s, SPARSE, cfg=OLD.replace(gm_bytes=OLD.gm_bytes * 2))
    batch = jax.tree_util.tree_map(lambda x: x[None], s)
    with pytest.raises(ValueError, match="does not match"):
        pj.batch.run(batch, np.array([SPARSE], np.uint32), cfg=OLD.replace(hand_slots=1))


def test_arch_state_keeps_the_rules():
    s = pj.reset(OLD.replace(profile="ieee"))
    env = pj.interop.to_arch_state(s)
    assert (env["artifact"]["semantics"], env["artifact"]["profile"]) == ("0.58.3", "ieee")
    assert pj.interop.from_arch_state(env).rules == s.rules
    # an explicit cfg decides, as for pj.run
    assert pj.interop.from_arch_state(env, cfg=OLD.replace(semantics="adr0100")).rules == Rules()
    env["artifact"]["semantics"] = "0.99"
    with pytest.raises(ValueError, match="envelope.artifact.semantics"):
        pj.interop.from_arch_state(env)


def test_a_late_pe_fault_undoes_the_earlier_pes_writes():
    """A Core block whose PE2 faults after PE0 and PE1 have loaded their tiles keeps
    no PE's effects (dispatch.complete_core's undo), in one State and in a batch
    beside a State whose block succeeds (the undo runs only where it is needed)."""
    from ptojax.isa.asm import assemble
    from ptojax.state import state_leaves
    cfg = pj.preset("tiny")
    words = assemble("BSTART.TLOAD FP16\nB.DATR {ND2M16, DTYPE_NONE, Max}\nB.DIM zero, 3, ->LB0\n"
                     "B.DIM zero, 2, ->LB1\nB.IOR a0, a1\nB.IOT mask=1111, last, ->M<1>\nBSTOP\n")

    def start(bad_pe):
        s = pj.reset(cfg)
        for pe in range(4):          # FP16 at an odd address: Fault_DataAlignment on that PE
            s = pj.write_gpr(s, "a0", 0x101 if pe == bad_pe else 0x100, pe)
            s = pj.write_gpr(s, "a1", 6, pe)
        return s

    one = pj.run_core(start(2), words, cfg=cfg)
    assert one.fault == "Fault_DataAlignment"
    res = pj.batch.run(pj.batch.stack_states([start(None), start(2), start(0)]),
                       np.array([words] * 3, np.uint32), 0, cfg=cfg, core=True)
    got = [pj.batch.unstack_state(res.state, i) for i in range(3)]
    assert np.asarray(got[0].tiles.allocated).sum() == 4          # every PE loaded
    for i, bad in ((1, 2), (2, 0)):
        want = state_leaves(start(bad))
        have = state_leaves(got[i])
        changed = sorted(k for k in want if not np.array_equal(np.asarray(want[k]), np.asarray(have[k])))
        assert all("fault" in k or k in (".pc",) for k in changed), changed
        assert np.array_equal(np.asarray(have[".tiles.allocated"]), np.asarray(want[".tiles.allocated"]))
    assert state_leaves(got[1]).keys() == state_leaves(one.state).keys()
    for k, v in state_leaves(one.state).items():
        assert np.array_equal(np.asarray(v), np.asarray(state_leaves(got[1])[k])), k
