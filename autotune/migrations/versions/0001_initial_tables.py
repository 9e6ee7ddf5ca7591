"""initial tables

Revision ID: 0001
Revises:
Create Date: 2026-12-02 10:09:00.808878
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('autotune_deployments',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=100), nullable=False),
    sa.Column('model', sa.String(length=200), nullable=False),
    sa.Column('gpu', sa.String(length=100), nullable=False),
    sa.Column('gpu_count', sa.Integer(), nullable=False),
    sa.Column('tensor_parallel_size', sa.Integer(), nullable=False),
    sa.Column('max_model_len', sa.Integer(), nullable=False),
    sa.Column('traffic_profile', sa.String(length=20), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('name')
    )
    op.create_table('autotune_campaigns',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('deployment_id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=100), nullable=False),
    sa.Column('slo', sa.JSON(), nullable=False),
    sa.Column('trace_ref', sa.Text(), nullable=False),
    sa.Column('trace_digest', sa.String(length=100), nullable=False),
    sa.Column('backend', sa.String(length=50), nullable=False),
    sa.Column('executor', sa.String(length=50), nullable=False),
    sa.Column('search_space', sa.Text(), nullable=False),
    sa.Column('study_name', sa.String(length=250), nullable=False),
    sa.Column('max_trials', sa.Integer(), nullable=False),
    sa.Column('seed', sa.Integer(), nullable=False),
    sa.Column('status', sa.String(length=20), nullable=False),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('wall_s', sa.Float(), nullable=True),
    sa.Column('message', sa.Text(), nullable=True),
    sa.ForeignKeyConstraint(['deployment_id'], ['autotune_deployments.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('deployment_id', 'name'),
    sa.UniqueConstraint('study_name')
    )
    op.create_table('autotune_trials',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('campaign_id', sa.Integer(), nullable=False),
    sa.Column('number', sa.Integer(), nullable=False),
    sa.Column('role', sa.String(length=30), nullable=False),
    sa.Column('engine_config', sa.JSON(), nullable=False),
    sa.Column('state', sa.String(length=20), nullable=False),
    sa.Column('feasible', sa.Boolean(), nullable=False),
    sa.Column('capacity_output_tok_s', sa.Float(), nullable=False),
    sa.Column('capacity_rate_scale', sa.Float(), nullable=False),
    sa.Column('latency', sa.JSON(), nullable=True),
    sa.Column('latency_recorded_rate', sa.JSON(), nullable=True),
    sa.Column('constraints', sa.JSON(), nullable=False),
    sa.Column('replays', sa.JSON(), nullable=False),
    sa.Column('failure_class', sa.String(length=50), nullable=True),
    sa.Column('failure_message', sa.Text(), nullable=True),
    sa.Column('start_s', sa.Float(), nullable=False),
    sa.Column('measure_s', sa.Float(), nullable=False),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('worker', sa.JSON(), nullable=False),
    sa.Column('telemetry', sa.JSON(), nullable=False),
    sa.Column('repeat_of', sa.Integer(), nullable=True),
    sa.ForeignKeyConstraint(['campaign_id'], ['autotune_campaigns.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('campaign_id', 'number')
    )
    op.create_table('autotune_publications',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('deployment_id', sa.Integer(), nullable=False),
    sa.Column('campaign_id', sa.Integer(), nullable=False),
    sa.Column('trial_id', sa.Integer(), nullable=False),
    sa.Column('engine_config', sa.JSON(), nullable=False),
    sa.Column('period_label', sa.String(length=20), nullable=False),
    sa.Column('published_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('published_by', sa.String(length=100), nullable=False),
    sa.Column('note', sa.Text(), nullable=True),
    sa.ForeignKeyConstraint(['campaign_id'], ['autotune_campaigns.id'], ),
    sa.ForeignKeyConstraint(['deployment_id'], ['autotune_deployments.id'], ),
    sa.ForeignKeyConstraint(['trial_id'], ['autotune_trials.id'], ),
    sa.PrimaryKeyConstraint('id')
    )


def downgrade() -> None:
    op.drop_table('autotune_publications')
    op.drop_table('autotune_trials')
    op.drop_table('autotune_campaigns')
    op.drop_table('autotune_deployments')
