"""The attribute keys autotune stores on Optuna studies and trials, one name each. Resume, the
report, the API and the dashboard read them back, so a key's string never changes."""

from __future__ import annotations

# Trial user attributes (the dashboard shows these).
ROLE = "role"  # autotune.vocabulary.Role
FIDELITY = "fidelity"  # the backend that measured the trial
FEASIBLE = "feasible"
FAILURE_CLASS = "failure_class"  # autotune.vocabulary.FailureClass
FAILURE_MESSAGE = "failure_message"
CAPACITY = "capacity_output_tok_s"
CONSTRAINT_PREFIX = "constraint:"  # + the SLO metric: its value over the limit (<= 0: met)
REPEAT_OF = "repeat_of"  # the earlier trial that measured the same effective config
SLOW_RULES = "slow_rules"  # rules of severity "slow" the config breaks
BACKEND_NOTES = "backend_notes"  # how a simulated engine was modelled
VLLM_EFFECTIVE = "vllm_effective"  # the config as vLLM runs it, defaults resolved
VLLM_OVERRIDES = "vllm_overrides"  # values vLLM replaces silently (fp8 -> fp8_ds_mla)
PINNED = "pinned"  # values the model requires, outside the search space
# Per SLO ceiling, the share of it the config used at capacity (P99 / ceiling): the ceiling
# nearest 1 is the one that bound the capacity, which tells the line sweep where to move.
SLO_USE = "slo_use_at_capacity"
PEAK_IN_FLIGHT = "peak_requests_in_flight_at_capacity"  # the most requests the engine held
ENGINE_CONFIG = "engine_config"  # the exact config an enqueued reference runs
ENQUEUE_TAG = "enqueue_tag"  # which reference it is, so none is enqueued twice
SCREEN_OF = "screen_of"  # the screening trial a real trial measures again
# measured, rejected or failed (autotune.vocabulary.RecordState), as the trial's row says: a
# rejected trial is COMPLETE with value 0 to Optuna (its samplers learn from complete trials'
# constraints), and this is what tells it from a measured 0 in the dashboard.
OUTCOME = "outcome"

# Trial system attributes (autotune's bookkeeping, hidden from the dashboard).
FIXED_PARAMS = "fixed_params"  # Optuna's own key: the parameters an enqueued trial must use
SWEEP_AXIS = "autotune:sweep_axis"  # the argument a sweep trial moved
RETRY_OF = "autotune:retry_of"
REQUEUED_AS = "autotune:requeued_as"
SCREENING_CLOSED = "autotune:screening_closed"  # a waiting trial screening left unrun

# Study user attributes.
SLO = "slo"
SAMPLER = "sampler"
DEPLOYMENT = "deployment"
COMPARE = "autotune:compare"  # the comparison configs' confirmed results
PATH = "autotune:path"  # a path campaign's path, rule and parent
PHASE = "autotune:phase"  # REAL_PHASE once multi-fidelity screening is closed
REAL_PHASE = "real"
