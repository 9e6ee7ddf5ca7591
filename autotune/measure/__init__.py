"""Measuring one config: the backend and executor plug-in points, the capacity search of a trial,
closed-loop sweeps, calibration and the local model directories real CPU engines serve."""
