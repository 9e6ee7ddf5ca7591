"""Which configs to try: search spaces, vLLM's rules, reference configs, samplers and the
objective they optimise."""
