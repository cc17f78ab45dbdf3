"""Batched execution: `pj.run` under `jax.vmap`, sharded over local devices."""

from .execute import BatchResult, run, stack_states, unstack_state

__all__ = ["BatchResult", "run", "stack_states", "unstack_state"]
