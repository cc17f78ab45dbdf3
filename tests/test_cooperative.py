"""The Shared-tile, Core and cooperative-TMATMUL scenarios of the oracle's tests
(tests/test_reference_shared.py: ADR 0100's acceptance points, every ordered
check of docs/shared-decisions.md, both semantics and profiles) run on the JAX
executor, pj.run and pj.run_core.

Every scenario runs through one compiled program per (single PE | Core,
config): words padded to one length, every effect group traced. The issue's
"done when" scenarios run in CI; the rest of the file is marked slow
(`pytest -m slow`), since each extra config costs a compile of a minute or two
on a small machine.
"""

import numpy as np
import jax.numpy as jnp
import pytest

from ptojax.machine import ALL_EFFECTS, as_words, check_config, check_on_fault, run_stream
from ptojax.result import RunResult
from ptojax._x64 import x64
from _scenarios import rebind

LENGTH, COMMITS = 64, 8


@x64
def _run(state, words, pe, on_fault, cfg, core):
    w = as_words(words)
    cfg = check_config(state, cfg)
    n = max(LENGTH, 1 << (len(w) - 1).bit_length())
    padded = np.zeros(n, np.uint32)
    padded[: len(w)] = w
    st, executed = run_stream(state, jnp.asarray(padded), jnp.int32(len(w)), jnp.int32(pe),
                              jnp.bool_(check_on_fault(on_fault)), cfg.replace(cas_seed=0),
                              COMMITS, ALL_EFFECTS, jnp.int64(cfg.cas_seed & 0xFFFFFFFF), core)
    return RunResult.from_state(st, int(executed))


def run(state, words, pe=0, *, on_fault="abandon", cfg=None):
    return _run(state, words, pe, on_fault, cfg, False)


def run_core(state, words, *, on_fault="abandon", cfg=None):
    return _run(state, words, 0, on_fault, cfg, True)


# the acceptance points (all on the default "small" config)
CI = {
    "test_group_m_fragments", "test_sparse_masks_rejected", "test_zero_mask_is_a_no_op",
    "test_current_pe_shared_a_rows", "test_active_fragment_allocation_and_local_pool",
    "test_right_only_idle_pes_keep_their_garbage", "test_structural_negatives",
    "test_shared_negatives", "test_collective_fault_on_pe2_leaves_pe0_and_pe1_untouched",
    "test_shared_tload_partial_mask_initializes_only_its_quarters",
    "test_shared_tstore_spart_stores_only_its_quarters", "test_e6_transpose",
}

for _name, _test in rebind("test_reference_shared.py", {"run": run, "run_core": run_core},
                           "_shared_on_jax").items():
    globals()[_name] = _test if _name in CI else pytest.mark.slow(_test)
