"""What a replay sends: a trace open-loop at a rate multiplier, or closed-loop clients.

Open loop: each request leaves at its recorded arrival time divided by `rate_scale`, whether
or not earlier ones finished (production traffic). Closed loop: `max_concurrency` clients, each
sending its next request, in order, when its last one finished, as `vllm bench serve
--max-concurrency N` does at its default request rate of inf and GuideLLM's concurrent profile
does (the tools users compare against). A closed loop's requests have fixed lengths
(`--input-len`/`--output-len`, as vLLM bench's random dataset with a range ratio of 0) or the
lengths, and prefix hashes, of a trace's requests.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autotune.errors import SettingError, placeholder
from autotune.traffic.trace import Trace

# vllm bench serve's --num-prompts default (vllm/benchmarks/datasets/datasets.py::
# add_dataset_parser, DEFAULT_NUM_PROMPTS in vLLM 0.32).
DEFAULT_NUM_PROMPTS = 1000


@dataclass(frozen=True)
class OpenLoop:
    rate_scale: float = 1.0

    def __post_init__(self) -> None:
        if not self.rate_scale > 0:
            raise SettingError("{rate_scale} {value:g}: must be positive", value=self.rate_scale)

    def describe(self) -> dict[str, object]:
        return {"mode": "open_loop", "rate_scale": self.rate_scale}


@dataclass(frozen=True)
class ClosedLoop:
    """`max_concurrency` clients; `num_prompts` requests of `input_len`/`output_len` tokens, or
    (lengths None) the trace's requests: the first `num_prompts` of them, all if None."""

    max_concurrency: int
    num_prompts: int | None = None
    input_len: int | None = None
    output_len: int | None = None

    def __post_init__(self) -> None:
        if self.max_concurrency < 1:
            raise SettingError("{max_concurrency} {value}: needs at least 1 client",
                               value=self.max_concurrency)
        if self.num_prompts is not None and self.num_prompts < 1:
            raise SettingError("{num_prompts} {value}: must be at least 1", value=self.num_prompts)
        if (self.input_len is None) != (self.output_len is None):
            raise SettingError("{input_len} and {output_len} go together: give both, or neither "
                               "and {trace} for the trace's lengths")
        for setting, value in (("input_len", self.input_len), ("output_len", self.output_len)):
            if value is not None and value < 1:
                raise SettingError(placeholder(setting) + " {value}: must be at least 1 token",
                                   value=value)

    @property
    def fixed_lengths(self) -> bool:
        return self.input_len is not None

    def requests(self, trace: Trace | None, max_model_len: int) -> Trace:
        """The requests in the order the clients send them (arrival times unused)."""
        if self.fixed_lengths:
            if trace is not None:
                raise SettingError("give {trace} or {input_len}/{output_len}, not both")
            assert self.input_len is not None and self.output_len is not None
            if self.input_len + self.output_len > max_model_len:
                raise SettingError("{input_len} {inputs} + {output_len} {outputs} exceed "
                                   "max_model_len {limit}: the engine would refuse every "
                                   "request; shorten them or raise {max_model_len}",
                                   inputs=self.input_len, outputs=self.output_len,
                                   limit=max_model_len)
            n = self.num_prompts or DEFAULT_NUM_PROMPTS
            return Trace.from_columns(
                f"fixed-{self.input_len}in-{self.output_len}out", arrival_s=np.zeros(n),
                prompt_tokens=np.full(n, self.input_len), output_tokens=np.full(n, self.output_len))
        if trace is None:
            raise SettingError("a closed loop needs lengths: {trace} FILE, or {input_len} N and "
                               "{output_len} M")
        if self.num_prompts is not None and self.num_prompts > len(trace):
            raise SettingError("{num_prompts} {value}: the trace has only {n} requests",
                               value=self.num_prompts, n=len(trace))
        return trace.slice(0, self.num_prompts) if self.num_prompts else trace

    def describe(self) -> dict[str, object]:
        lengths = (f"fixed {self.input_len} in / {self.output_len} out" if self.fixed_lengths
                   else "from the trace")
        return {"mode": "closed_loop", "max_concurrency": self.max_concurrency,
                "num_prompts": self.num_prompts, "lengths": lengths}


Load = OpenLoop | ClosedLoop
