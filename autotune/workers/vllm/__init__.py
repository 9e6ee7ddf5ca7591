"""The `vllm` engine backend: a real vLLM OpenAI server process per trial."""
