"""The study controller: Optuna ask/tell around an executor, every trial stored as it ends.

References are enqueued first: the incumbent and warm starts (a quarterly campaign's, each
with its exact config), then the baselines (vLLM's defaults and the tuning guide's heuristic).
A config that breaks an interaction rule is told as infeasible without starting an engine.
Measured configs run on the executor, at most `slots` at a time; each outcome is told to Optuna
with its constraint values and written to the project's tables, with the GPU time it cost. The
search stops at max_trials, or when the budget (GPU-hours, deadline) is spent; then the best
configs, the incumbent and the baselines are confirmed (autotune.campaign.confirm) on the same executor,
all with the same seeds. A multi-fidelity campaign screens on the simulator first and measures
its best configs for real in between (autotune.campaign.multifidelity).

The modules: `request` (what a campaign asks for), `loop` (StudyController: ask, tell, what is
in flight, when to stop), `recorder` (a finished trial's Optuna attributes, constraints,
database row and GPU-hours), `phases` (the space, the references and the study they start
from; the hand-off from screening to the real backend), `repair` (what a dead job left in the
study; the references and baselines enqueued once), `confirmation` (the confirmation and
the comparison configs after the search) and `observer` (the hooks of progress displays).
"""

from autotune.campaign.study.confirmation import comparisons
from autotune.campaign.study.loop import ASKS_PER_TRIAL, MAX_INFRA_FAILURES_IN_A_ROW, StudyController
from autotune.campaign.study.observer import Observer
from autotune.campaign.study.request import CampaignRequest, Reference
from autotune.domain.trial_record import TrialRecord

__all__ = ["ASKS_PER_TRIAL", "MAX_INFRA_FAILURES_IN_A_ROW", "CampaignRequest", "Observer",
           "Reference", "StudyController", "TrialRecord", "comparisons"]
