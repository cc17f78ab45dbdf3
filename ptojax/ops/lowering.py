"""Lowering: how the executor's semantics become one XLA program, kept apart
from the semantics. Nothing here is a spec rule: `settle` makes XLA compute a
value once, `branch` and `trip_count` keep conditionals and loops cheap under
pj.batch.run's vmap, `under_batch` tells which of the two a trace is in."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

import jax
import jax.numpy as jnp

from ..state import max_tile_words


# pj.batch.run vmaps the executor under this axis name (see trip_count)
BATCH_AXIS = "batch"

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


def under_batch() -> bool:
    """Whether the code being traced runs under pj.batch.run's vmap (static)."""
    try:
        # unused: dropped from the program (jax.lax.pmax is unannotated in jax, hence the ignore)
        jax.lax.pmax(jnp.int32(0), BATCH_AXIS)  # type: ignore[no-untyped-call]
    except NameError:       # no such axis: one State (pj.run)
        return False
    return True


def branch(fn: F) -> F:
    """A conditional's costly branch `fn`, as a jitted call under pj.batch.run.

    vmap batches each branch of a cond twice (once to learn which results
    vary by State, once to build them), so a cond inside a cond traced its
    inner branches four times. A jitted call is batched once per batching
    of its operands and then reused. XLA inlines the call: the compiled
    program is about the same (1.6% more HLO for a campaign's), and tracing
    it takes about 40% less time at the presets with several lane classes."""
    return cast(F, jax.jit(fn)) if under_batch() else fn


def trip_count(n: jax.Array) -> jax.Array:
    """The trip count of a loop that runs `n` times for this State: under
    pj.batch.run the batch's largest n, else n. The body masks its own
    iterations past n. A loop whose bound differs across the batch becomes,
    under vmap, a loop that selects its whole carry per iteration (a CAS
    loop re-selected every State's GM that way each lane); one bound shared by
    the batch keeps an iteration's cost to what it touches."""
    # jax.lax.pmax is unannotated in jax
    return jax.lax.pmax(n, BATCH_AXIS) if under_batch() else n  # type: ignore[no-untyped-call]


def settle(tree: T) -> T:
    """The leaves of `tree`, computed once.

    XLA:CPU fuses cheap scalar code into every consumer, so a fault code or an
    enable that feeds the per-leaf selects of a State is recomputed inside
    each of their fused kernels: the check list is copied once per leaf and
    the program grows tenfold. A dynamic-update-slice cannot be fused into
    its consumers, and its index hides behind an optimization barrier so that
    the simplifier can neither see that it is 0 nor that the read returns
    what was written. The buffer is one element longer than the value (a
    full-size update would simplify away): under vmap every State pays for
    it, and a buffer twice the value's size cost pj.batch.run a fifth of its
    throughput.
    """
    put = jax.lax.optimization_barrier(jnp.int32(0))  # type: ignore[no-untyped-call]  # unannotated in jax

    def hold(v: jax.Array) -> jax.Array:
        flat = v.reshape(-1)
        buf = jax.lax.dynamic_update_slice(jnp.zeros(flat.size + 1, v.dtype), flat, (put,))
        return buf[:flat.size].reshape(v.shape)

    leaves, treedef = jax.tree_util.tree_flatten(tree)
    leaves = [jnp.asarray(v) for v in leaves]
    # scalars travel stacked, one round trip per dtype
    out = {i: hold(v) for i, v in enumerate(leaves) if v.ndim}
    by_type: dict[Any, list[int]] = {}      # keyed by numpy dtype
    for i, v in enumerate(leaves):
        if not v.ndim:
            by_type.setdefault(v.dtype, []).append(i)
    for _dtype, idx in by_type.items():
        held = hold(jnp.stack([leaves[i] for i in idx]))
        out.update({i: held[k] for k, i in enumerate(idx)})
    return cast(T, jax.tree_util.tree_unflatten(treedef, [out[i] for i in range(len(leaves))]))


def settle_pair(a: jax.Array, b: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Two int32 arrays of one shape, computed once, in one kernel.

    settle holds each leaf in its own kernel, and each kernel recomputes the
    leaf's whole elementwise producer: a lane's (row, col) held as two
    leaves costs the coordinate arithmetic twice. Held as one int64 per lane
    (row in the high half), it is computed once."""
    both = (a.astype(jnp.int64) << 32) | (b.astype(jnp.int64) & 0xFFFFFFFF)
    both = settle(both)
    return (both >> 32).astype(jnp.int32), both.astype(jnp.int32)


def once_per_batch(fn: Callable[..., T], *scalars: Any, active: jax.Array | None = None) -> T:
    """fn(*scalars): lane-wide values that depend on nothing but these per-State
    scalars, computed once for the whole batch where every State of
    pj.batch.run's batch that is `active` has the same scalars (a bundle
    repeated over a batch, a golden GEMM's chunk), else once per State as
    usual. The result is the same either way for an active State; an inactive
    one (a completion that is not enabled, whose results nobody reads) may get
    the active States' values. Outside pj.batch.run it is fn(*scalars).

    A lane map (a tile's payload slot -> row and column) is tens of integer
    operations a lane, a tenth of a batched TLOAD (benchmarks/profile.py)."""
    if not under_batch():
        return fn(*scalars)
    values = [jnp.asarray(v) for v in scalars]
    on = jnp.bool_(True) if active is None else jnp.asarray(active)
    # the first active State's scalars (all_gather under vmap is the batch itself: unbatched)
    gather: Callable[[jax.Array], jax.Array] = \
        lambda v: jax.lax.all_gather(v, BATCH_AXIS)
    i = jnp.argmax(gather(on))
    first = [gather(v)[i] for v in values]
    same = jnp.stack([jnp.all(v == f) for v, f in zip(values, first)]).all() | ~on
    uniform = jax.lax.pmin(same.astype(jnp.int32), BATCH_AXIS) > 0  # type: ignore[no-untyped-call]
    return cast(T, jax.lax.cond(uniform, lambda a, _: fn(*a), lambda _, b: fn(*b), first, values))


def lane_classes(W: int) -> tuple[int, ...]:
    """The lane counts a completion is traced for on a machine of W tile Words:
    256, 512, then 1024 x 4^k, up to a quarter of W, and W. A block runs at the
    least one that holds every tile it names (dispatch.lanes_needed), so a 16x16 tile
    costs about what it costs on a 256-Word machine. Each class is one more
    copy of the completion program: a class within 4x of W would cost more to
    compile than it saves its rare tiles. 512 is the exception to the 4x step:
    a 16x32 FP16 matrix operand, the commonest one, has 512 Words and would
    otherwise run at twice its width. Where the model's packed tiles go past W
    (state.max_tile_words: an 8-bit tile of 64 KiB, a large 4-bit one) their
    blocks run at one more class (asl: 256, 512, 1024, 4096, 32768, 131072)."""
    classes: list[int] = []
    L = 256
    while 4 * L <= W:
        classes.append(L)
        L *= 2 if L < 1024 else 4
    top = max_tile_words(W)
    return tuple(classes) + (W,) + ((top,) if top > W else ())
