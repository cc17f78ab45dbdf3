"""Differential campaigns against the reference model: seeded case
generation (`gen`), the campaign runner (`campaign`), the shrinker
(`shrink`) and replayable case files (`casefile`). `ptojax.batch` below it
only runs States; nothing here is imported by the executor."""
