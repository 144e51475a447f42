"""Layer 0: what every layer shares and nothing below it: the records a run makes
(model), configuration loading, local state, the hook lock, local errors, text rules.
Imports nothing of slurm_hooks but itself."""
