"""The project's own tables (prefix autotune_); Optuna keeps its own tables beside them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    String,
    Text,
    UniqueConstraint,
    true,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


class Base(DeclarativeBase):
    pass


class Deployment(Base):
    __tablename__ = "autotune_deployments"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    model: Mapped[str] = mapped_column(String(200))
    gpu: Mapped[str] = mapped_column(String(100))
    gpu_count: Mapped[int] = mapped_column(Integer)
    tensor_parallel_size: Mapped[int] = mapped_column(Integer)
    max_model_len: Mapped[int] = mapped_column(Integer)
    traffic_profile: Mapped[str] = mapped_column(String(20))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    # What its real engines load (`tune --model-path`: a local directory or a Hugging Face id),
    # the latest campaign's; None until a campaign runs real engines.
    model_path: Mapped[str | None] = mapped_column(String(1000), nullable=True)
    # Whether its campaigns may search values that change the model's numerics
    # (DeploymentSpec.allow_accuracy_affecting); deployments made before it allowed them.
    allow_accuracy_affecting: Mapped[bool] = mapped_column(Boolean, default=True,
                                                           server_default=true())

    campaigns: Mapped[list[Campaign]] = relationship(back_populates="deployment")


class Campaign(Base):
    """One tuning run of a deployment, e.g. 2026Q4."""

    __tablename__ = "autotune_campaigns"
    __table_args__ = (UniqueConstraint("deployment_id", "name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    deployment_id: Mapped[int] = mapped_column(ForeignKey("autotune_deployments.id"))
    name: Mapped[str] = mapped_column(String(100))
    slo: Mapped[dict[str, float]] = mapped_column(JSON)  # e.g. {"ttft_p99_ms": 2000}
    trace_ref: Mapped[str] = mapped_column(Text)
    trace_digest: Mapped[str] = mapped_column(String(100))
    backend: Mapped[str] = mapped_column(String(50))
    executor: Mapped[str] = mapped_column(String(50))
    search_space: Mapped[str] = mapped_column(Text)
    study_name: Mapped[str] = mapped_column(String(250), unique=True)
    max_trials: Mapped[int] = mapped_column(Integer)
    seed: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(20))  # running, completed, failed
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    wall_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    message: Mapped[str | None] = mapped_column(Text, nullable=True)
    # The job running the campaign (autotune.storage.lease.Lease): its token, and a counter it bumps
    # every heartbeat. A counter that stops moving means the job is dead; no clocks compared.
    lease_owner: Mapped[str | None] = mapped_column(String(200), nullable=True)
    lease_renewals: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    lease_heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True),
                                                                nullable=True)
    # The quarter a `quarterly` campaign is for (2026Q4); None for a campaign run by `tune`.
    period: Mapped[str | None] = mapped_column(String(20), nullable=True)
    # What was spent: engine wall time x GPUs over its trials and confirmation runs.
    gpu_hours: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    # The budget it ran under: max_trials, max_gpu_hours, deadline (ISO), as asked.
    budget: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    # Why the search stopped: "max_trials", "max_gpu_hours", "deadline" (None: not yet).
    stop_reason: Mapped[str | None] = mapped_column(String(200), nullable=True)
    # The quarterly job's decision (published, kept_incumbent, no_feasible) and why.
    decision: Mapped[str | None] = mapped_column(String(30), nullable=True)
    decision_note: Mapped[str | None] = mapped_column(Text, nullable=True)
    decided_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    # Multi-fidelity (autotune.campaign.multifidelity): the simulator that screened the search space
    # and how many of its best configs `backend` measured; None for a one-backend campaign.
    screen_backend: Mapped[str | None] = mapped_column(String(50), nullable=True)
    screen_top: Mapped[int | None] = mapped_column(Integer, nullable=True)

    deployment: Mapped[Deployment] = relationship(back_populates="campaigns")
    trials: Mapped[list[Trial]] = relationship(back_populates="campaign",
                                               order_by="Trial.number")
    confirmations: Mapped[list[Confirmation]] = relationship(
        back_populates="campaign", order_by="Confirmation.lcb_output_tok_s.desc()")


class Trial(Base):
    __tablename__ = "autotune_trials"
    __table_args__ = (UniqueConstraint("campaign_id", "number"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    campaign_id: Mapped[int] = mapped_column(ForeignKey("autotune_campaigns.id"))
    number: Mapped[int] = mapped_column(Integer)  # Optuna's trial number
    role: Mapped[str] = mapped_column(String(30))  # vllm-default, guide-heuristic, proposed
    # The backend that measured it: the campaign's backend, or its screen_backend for a
    # screening trial (never published, never compared with the others' capacities).
    fidelity: Mapped[str] = mapped_column(String(50))
    engine_config: Mapped[dict[str, Any]] = mapped_column(JSON)
    # measured: ran and was measured; rejected: broke an interaction rule, no engine started;
    # failed: the engine or the worker failed
    state: Mapped[str] = mapped_column(String(20))
    feasible: Mapped[bool] = mapped_column()
    capacity_output_tok_s: Mapped[float] = mapped_column(Float)
    capacity_rate_scale: Mapped[float] = mapped_column(Float)
    latency: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)  # at capacity
    latency_recorded_rate: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    # null where a value was not finite (JSON has no infinity)
    constraints: Mapped[dict[str, float | None]] = mapped_column(JSON)
    replays: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    failure_class: Mapped[str | None] = mapped_column(String(50), nullable=True)
    failure_message: Mapped[str | None] = mapped_column(Text, nullable=True)
    start_s: Mapped[float] = mapped_column(Float)  # engine start-up
    measure_s: Mapped[float] = mapped_column(Float)  # capacity search
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    finished_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    worker: Mapped[dict[str, Any]] = mapped_column(JSON)  # host, pid, GPUs it was given
    telemetry: Mapped[dict[str, Any]] = mapped_column(JSON)  # GPU memory, utilisation, watermark
    # The sampler proposed a config already measured: its result is reused, no engine started.
    repeat_of: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # Engine wall time (start + measure) x the GPUs the trial held, in hours; 0 with no engine.
    gpu_hours: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")

    campaign: Mapped[Campaign] = relationship(back_populates="trials")


class Confirmation(Base):
    """One config's confirmation: R re-runs with other arrival seeds (autotune.campaign.confirm)."""

    __tablename__ = "autotune_confirmations"
    __table_args__ = (UniqueConstraint("campaign_id", "trial_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    campaign_id: Mapped[int] = mapped_column(ForeignKey("autotune_campaigns.id"))
    trial_id: Mapped[int] = mapped_column(ForeignKey("autotune_trials.id"))  # the search trial
    role: Mapped[str] = mapped_column(String(30))  # the trial's role (incumbent, proposed...)
    engine_config: Mapped[dict[str, Any]] = mapped_column(JSON)
    seeds: Mapped[list[int]] = mapped_column(JSON)  # the replay seed of each run
    samples: Mapped[list[float]] = mapped_column(JSON)  # capacity per run (0: missed the SLO)
    failures: Mapped[list[str | None]] = mapped_column(JSON)  # failure_class per run
    n: Mapped[int] = mapped_column(Integer)  # runs that measured the config (not infra losses)
    mean_output_tok_s: Mapped[float] = mapped_column(Float)
    std_output_tok_s: Mapped[float] = mapped_column(Float)
    cv: Mapped[float | None] = mapped_column(Float, nullable=True)  # std / mean
    lcb_output_tok_s: Mapped[float] = mapped_column(Float)  # one-sided 90% lower bound
    gpu_hours: Mapped[float] = mapped_column(Float)
    winner: Mapped[bool] = mapped_column(Boolean)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))

    campaign: Mapped[Campaign] = relationship(back_populates="confirmations")
    trial: Mapped[Trial] = relationship()


class Publication(Base):
    """A config published for a deployment; the newest one is the current config."""

    __tablename__ = "autotune_publications"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    deployment_id: Mapped[int] = mapped_column(ForeignKey("autotune_deployments.id"))
    campaign_id: Mapped[int] = mapped_column(ForeignKey("autotune_campaigns.id"))
    trial_id: Mapped[int] = mapped_column(ForeignKey("autotune_trials.id"))
    engine_config: Mapped[dict[str, Any]] = mapped_column(JSON)
    period_label: Mapped[str] = mapped_column(String(20))
    published_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    published_by: Mapped[str] = mapped_column(String(100))
    note: Mapped[str | None] = mapped_column(Text, nullable=True)
    # The `model` its YAML names, fixed when published (autotune.release.publish.served_model); None in
    # publications made before it was recorded.
    served_model: Mapped[str | None] = mapped_column(String(1000), nullable=True)
    # Its values that change the model's numerics, judged when published
    # (autotune.search.spaces.accuracy.NumericsChange.as_json); None in publications made before.
    accuracy_affecting: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON, nullable=True)

    deployment: Mapped[Deployment] = relationship()
    campaign: Mapped[Campaign] = relationship()
    trial: Mapped[Trial] = relationship()


class TraceFile(Base):
    """A Parquet trace written by `traffic import` or the capture proxy, registered so a job can
    ask for a deployment's recent traffic. start/end are None where the trace has no wall-clock
    times (it then never matches a time window)."""

    __tablename__ = "autotune_traces"
    __table_args__ = (UniqueConstraint("path", "digest"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    deployment_id: Mapped[int | None] = mapped_column(ForeignKey("autotune_deployments.id"),
                                                      nullable=True)
    path: Mapped[str] = mapped_column(Text)  # absolute
    digest: Mapped[str] = mapped_column(String(100))
    format: Mapped[str] = mapped_column(String(30))  # the source format (azure, openai-log...)
    kind: Mapped[str] = mapped_column(String(20))  # imported or captured
    rows: Mapped[int] = mapped_column(Integer)
    start_epoch_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    end_epoch_s: Mapped[float | None] = mapped_column(Float, nullable=True)  # the last arrival
    duration_s: Mapped[float] = mapped_column(Float)
    stats: Mapped[dict[str, Any]] = mapped_column(JSON)  # autotune.traffic.stats.trace_stats
    registered_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))

    deployment: Mapped[Deployment | None] = relationship()
