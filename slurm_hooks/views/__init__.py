"""Layer 7: what admins read: diagnose, job-report, status, explain, config check."""
