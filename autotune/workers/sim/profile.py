"""Versioned coefficient profiles for the simulator's step-time and memory model.

A profile is a small YAML file: which GPU and model it is for ("*" for any), a version, where
its numbers came from, and the coefficients. Lookup for a (GPU, model) pair: a calibrated
profile in the profile directory (setting `sim.profile_dir`) named `<gpu>__<model>.yaml`, the
newest version wins; else, for a GPU, its bundled profile fitted to the measured kernel tables
(`profiles/gpu/<gpu>.yaml`, written by `autotune sim kernels fit-roofline`); else the bundled
default for the device kind (`profiles/gpu.yaml` or `profiles/cpu.yaml`).
"""

from __future__ import annotations

import statistics
from dataclasses import MISSING, asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

import yaml

from autotune.atomic import atomic_write_text
from autotune.domain.step_model import TABLE_FIT
from autotune.errors import ConfigError

BUNDLED = Path(__file__).parent / "profiles"
BUNDLED_GPU_FITS = BUNDLED / "gpu"  # <gpu>.yaml: the roofline fitted to that GPU's tables


@dataclass(frozen=True)
class Coefficients:
    hbm_efficiency: float
    compute_efficiency: float
    cpu_step_s: float
    cpu_seq_s: float
    cpu_prefill_token_s: float
    block_s: float
    allreduce_latency_s: float
    eager_layer_s: float
    activation_bytes_per_token_hidden: float
    cuda_graph_gib: float
    cuda_graph_gib_per_512_seqs: float
    driver_reserved_gib: float
    context_gib: float
    noise_cv: float
    # Attention's share of the efficiencies above (KV bytes read and attention FLOPs at
    # hbm/compute_efficiency times this): its kernels are not the GEMMs of the linear layers,
    # and on the CPU build they fall further behind. 1 in profiles from before it existed.
    attention_efficiency: float = 1.0
    # A request's way through the serving frontend (HTTP, the API server, its hand-over to the
    # engine core and the first token's way back): added to every request's TTFT and E2E. Not
    # in profiles from before it existed, there 0.
    frontend_s: float = 0.0
    # The first `small_batch_seqs` sequences of a step each cost this much more CPU time: a
    # real step's cost is concave in its batch (the CPU build's decode step rose about 0.24 ms
    # a sequence from batch 1 to 4 and 0.12-0.13 ms after, run 17's fitted configs), where
    # cpu_seq_s alone makes it affine and a fit then overprices the one-sequence step. 0 in
    # profiles from before it existed.
    cpu_small_batch_seq_s: float = 0.0
    small_batch_seqs: float = 4.0
    # The routed experts' share of the two efficiencies (their grouped GEMMs run below the
    # dense GEMMs' rate: the measured tables put expert-heavy steps at 0.2-0.7 of the dense
    # roofline). 1 in profiles from before it existed.
    moe_efficiency: float = 1.0
    # GPU time per layer per step that no roofline part explains: the kernels' latencies,
    # which bound a small batch's step even under CUDA graphs. 0 in profiles from before it
    # existed.
    layer_floor_s: float = 0.0


EFFICIENCIES = ("hbm_efficiency", "compute_efficiency", "attention_efficiency", "moe_efficiency")
# Coefficients in seconds: a slower host scales them (Profile.slowed).
TIME_COEFFICIENTS = ("cpu_step_s", "cpu_seq_s", "cpu_prefill_token_s", "block_s",
                     "allreduce_latency_s", "eager_layer_s", "frontend_s", "cpu_small_batch_seq_s",
                     "layer_floor_s")


@dataclass(frozen=True)
class Profile:
    gpu: str
    model: str
    version: int
    source: str
    coefficients: Coefficients
    fit: dict[str, Any] | None = None  # calibration: what it was fitted to and how well

    def fit_words(self) -> str:
        """What the simulator's step-model label says of this profile's fit: not fitted,
        fitted (to real trials, `autotune sim calibrate`), or fitted to a GPU's measured
        kernel tables with the median of its per-model errors on models left out of the fit
        (`autotune sim kernels fit-roofline`)."""
        if not self.fit:
            return "not fitted"
        if not str(self.fit.get("to", "")).startswith("measured kernel tables"):
            return "fitted"
        left_out = [row["fitted_without_it"]["ape_median"]
                    for row in self.fit.get("leave_one_model_out", {}).values()
                    if "fitted_without_it" in row]
        words = f"{TABLE_FIT} of {self.gpu}"
        if left_out:
            # no parentheses: the label's reader ends this part at the first ")"
            words += (f": a model left out of the fit is priced {statistics.median(left_out):.0f}% "
                      f"off its own tables, median step over {len(left_out)} models")
        return words

    def with_coefficients(self, **values: float) -> Profile:
        return replace(self, coefficients=replace(self.coefficients, **values))

    def slowed(self, factor: float) -> Profile:
        """The same engine on a host `factor` times slower: every time coefficient times it,
        every efficiency divided by it, so that each step and each request's frontend time takes
        `factor` times as long (exactly so without tensor parallelism: the all-reduce's link
        bandwidth is the GPU's, not the profile's)."""
        if factor == 1.0:
            return self
        c = self.coefficients
        return self.with_coefficients(
            **{k: getattr(c, k) * factor for k in TIME_COEFFICIENTS},
            **{k: getattr(c, k) / factor for k in ("hbm_efficiency", "compute_efficiency")})

    def to_yaml(self) -> str:
        data: dict[str, Any] = {"version": self.version, "gpu": self.gpu, "model": self.model,
                                "source": self.source, "coefficients": asdict(self.coefficients)}
        if self.fit is not None:
            data["fit"] = self.fit
        return yaml.safe_dump(data, sort_keys=False)


def load_profile(path: Path) -> Profile:
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"simulator profile {path}: cannot read it ({exc})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"simulator profile {path}: expected a mapping at the top level")
    known = {f.name for f in fields(Coefficients)}
    optional = {f.name for f in fields(Coefficients) if f.default is not MISSING}
    coeffs = data.get("coefficients")
    if not isinstance(coeffs, dict):
        raise ConfigError(f"simulator profile {path}: 'coefficients' must be a mapping")
    missing, unknown = known - optional - set(coeffs), set(coeffs) - known
    if missing or unknown:
        raise ConfigError(f"simulator profile {path}: coefficients missing "
                          f"{sorted(missing) or 'none'}, unknown {sorted(unknown) or 'none'}")
    try:
        values = {k: float(v) for k, v in coeffs.items()}
        version = int(data["version"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"simulator profile {path}: a version and numeric coefficients are "
                          f"needed ({exc})") from None
    if any(v < 0 for v in values.values()):
        raise ConfigError(f"simulator profile {path}: coefficients must not be negative")
    if any(values.get(k, 1.0) <= 0 for k in EFFICIENCIES):  # step times divide by them
        raise ConfigError(f"simulator profile {path}: {', '.join(EFFICIENCIES)} must be above 0")
    return Profile(gpu=str(data.get("gpu", "*")), model=str(data.get("model", "*")),
                   version=version, source=str(data.get("source", "")),
                   coefficients=Coefficients(**values), fit=data.get("fit"))


def profile_filename(gpu: str, model: str, version: int) -> str:
    return f"{gpu}__{model}__v{version}.yaml"


def calibrated_profiles(profile_dir: Path, gpu: str, model: str) -> list[tuple[int, Path]]:
    if not profile_dir.is_dir():
        return []
    found = []
    for path in profile_dir.glob(f"{gpu}__{model}__v*.yaml"):
        try:
            found.append((int(path.stem.rsplit("__v", 1)[1]), path))
        except ValueError:
            continue
    return sorted(found)


def find_profile(gpu: str, model: str, device: str, profile_dir: Path | None) -> Profile:
    if profile_dir is not None:
        found = calibrated_profiles(profile_dir, gpu, model)
        if found:
            return load_profile(found[-1][1])
    fitted = BUNDLED_GPU_FITS / f"{gpu}.yaml"
    if device != "cpu" and fitted.is_file():
        return replace(load_profile(fitted), gpu=gpu, model=model)
    return replace(load_profile(BUNDLED / ("cpu.yaml" if device == "cpu" else "gpu.yaml")),
                   gpu=gpu, model=model)


def save_profile(profile: Profile, profile_dir: Path) -> Path:
    """Write the profile under the next free version; atomic, never overwrites a version."""
    profile_dir.mkdir(parents=True, exist_ok=True)
    found = calibrated_profiles(profile_dir, profile.gpu, profile.model)
    version = (found[-1][0] if found else 1) + 1  # the bundled default is version 1
    profile = replace(profile, version=version)
    path = profile_dir / profile_filename(profile.gpu, profile.model, version)
    atomic_write_text(path, profile.to_yaml())
    return path
