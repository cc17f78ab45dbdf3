"""Differential campaigns against the reference model: seeded case
generation (`gen`), the campaign runner (`campaign`), the shrinker
(`shrink`), replayable case files (`casefile`) and what a campaign writes
(`report`: mismatch files, exports, replay). `ptojax.batch` below it only
runs States; nothing here is imported by the executor."""
