"""The simulator backend: a model of vLLM V1's scheduler and a roofline step-time model."""
