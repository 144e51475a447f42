"""Layer 4: decisions, pure functions over findings, state and a node view: policy,
correlation, the breaker. Imports core and slurm.api only."""
