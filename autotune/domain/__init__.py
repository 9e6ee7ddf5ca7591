"""The vocabulary: engine arguments, deployments, models and GPUs, SLOs and the records a trial is
made of. Values and pure functions only; every other layer builds on these."""
