"""The words a trial's record is made of, one type each: why a trial failed, what role its
config plays, and the state its record ends in. They are StrEnums: stored, compared, serialised and
printed as the plain strings they always were (database rows, Optuna attributes, the API)."""

from __future__ import annotations

from enum import StrEnum


class FailureClass(StrEnum):
    """Why a trial has no capacity (its failure_class)."""

    NONE = "none"  # the failure_class attribute of a trial that did not fail
    OOM = "oom"  # out of memory at start (weights, activations, no room for one request's KV)
    INVALID_ARGS = "invalid_args"  # the engine refused its arguments
    START_TIMEOUT = "start_timeout"
    START_FAILED = "start_failed"
    ENGINE_CRASH = "engine_crash"  # the engine died during a replay
    MEMORY_PRESSURE = "memory_pressure"  # GPU memory crossed the abort watermark in a replay
    RULE_VIOLATION = "rule_violation"  # refused by a rule before any engine ran
    SLO_MISS = "slo_miss"  # it ran, but met the SLO at no rate
    CLIENT_BOUND = "client_bound"  # the replay client could not keep the schedule
    INFRASTRUCTURE = "infrastructure"  # a lost worker or node
    WORKER_ERROR = "worker_error"  # a bug in the worker


# Failures that say nothing about the config: retried or dropped, never counted against it.
NOT_THE_CONFIG = (FailureClass.INFRASTRUCTURE, FailureClass.WORKER_ERROR)
# An engine that did not start or did not survive: the config is unusable as it is.
ENGINE_FAILURES = (FailureClass.OOM, FailureClass.INVALID_ARGS, FailureClass.START_TIMEOUT,
                   FailureClass.START_FAILED, FailureClass.ENGINE_CRASH)


class Role(StrEnum):
    """Where a trial's config came from."""

    PROPOSED = "proposed"  # the sampler's
    VLLM_DEFAULT = "vllm-default"  # the baselines (autotune.search.baselines.BASELINES)
    GUIDE_HEURISTIC = "guide-heuristic"
    VLLM_RECIPE = "vllm-recipe"
    INCUMBENT = "incumbent"  # the published config a quarterly campaign must beat
    WARM_START = "warm-start"  # the previous campaign's best, enqueued first
    SINGLE_CONFIG = "single-config"  # a path campaign's start: the whole trace's winner


class RecordState(StrEnum):
    """How a trial ended, as its record (database row, API, report) says: not Optuna's
    TrialState, which says where the trial is in Optuna's own life cycle."""

    MEASURED = "measured"  # an engine ran and was measured (feasible or not)
    REJECTED = "rejected"  # refused by a rule: no engine ran
    FAILED = "failed"  # an engine ran and failed, or could not start
