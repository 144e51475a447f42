"""Layer 8: the run pipeline (engine) and the three Slurm-run entry points (hooks)."""
