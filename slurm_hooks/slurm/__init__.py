"""Layer 2: the Slurm seam. `api` holds the protocol every backend implements, its
errors and the node-record helpers; `scontrol` and `pyslurm` implement it, `connect`
chooses one, `fake` is the in-memory one for tests of decisions. Imports core and host."""
