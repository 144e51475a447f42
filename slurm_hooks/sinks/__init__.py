"""Layer 6: where a run is recorded: journal, syslog, metrics textfile, the report."""
