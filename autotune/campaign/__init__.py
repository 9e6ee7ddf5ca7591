"""Running campaigns: the study loop and its phases, confirmation, multi-fidelity, per-path
campaigns, resume, budgets and the quarterly re-tune."""
