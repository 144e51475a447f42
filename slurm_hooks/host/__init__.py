"""Layer 1: this host, read hang-safely: the runner (children with deadlines), /proc,
mountinfo, kernel log, NVML, job processes, syscalls and what a task waits on.
Imports core only."""
