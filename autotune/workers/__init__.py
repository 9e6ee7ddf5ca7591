"""Where trials run: engine backends (simulator, real vLLM), the Ray executor, telemetry.

Only this package imports ray, vllm and pynvml.
"""
