"""Layer 5: carrying decisions out: actions through a Slurm backend, actuation (spool,
ledger, hysteresis state, after-reboot), recovery without a reboot."""
