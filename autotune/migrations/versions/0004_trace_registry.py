"""trace registry: imported and captured Parquet traces, with their time range and statistics,
so a job can ask for the last N days of one deployment's traffic

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-17 10:00:00
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'autotune_traces',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('deployment_id', sa.Integer(), nullable=True),
        sa.Column('path', sa.Text(), nullable=False),
        sa.Column('digest', sa.String(length=100), nullable=False),
        sa.Column('format', sa.String(length=30), nullable=False),
        sa.Column('kind', sa.String(length=20), nullable=False),
        sa.Column('rows', sa.Integer(), nullable=False),
        sa.Column('start_epoch_s', sa.Float(), nullable=True),
        sa.Column('end_epoch_s', sa.Float(), nullable=True),
        sa.Column('duration_s', sa.Float(), nullable=False),
        sa.Column('stats', sa.JSON(), nullable=False),
        sa.Column('registered_at', sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(['deployment_id'], ['autotune_deployments.id']),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('path', 'digest'),
    )
    op.create_index('ix_autotune_traces_deployment_end', 'autotune_traces',
                    ['deployment_id', 'end_epoch_s'])


def downgrade() -> None:
    op.drop_index('ix_autotune_traces_deployment_end', table_name='autotune_traces')
    op.drop_table('autotune_traces')
