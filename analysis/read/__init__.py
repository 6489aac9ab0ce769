"""Reading: the logs and records a run left, as typed runs, failures and frames."""
