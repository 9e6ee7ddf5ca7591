"""budget, confirmation and the quarterly decision: what a campaign spent, why it stopped, the
winner's confirmation runs, and whether the quarterly job published

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-16 10:00:00
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('autotune_campaigns') as batch:
        batch.add_column(sa.Column('period', sa.String(length=20), nullable=True))
        batch.add_column(sa.Column('gpu_hours', sa.Float(), nullable=False, server_default='0'))
        batch.add_column(sa.Column('budget', sa.JSON(), nullable=True))
        batch.add_column(sa.Column('stop_reason', sa.String(length=200), nullable=True))
        batch.add_column(sa.Column('decision', sa.String(length=30), nullable=True))
        batch.add_column(sa.Column('decision_note', sa.Text(), nullable=True))
        batch.add_column(sa.Column('decided_at', sa.DateTime(timezone=True), nullable=True))
    with op.batch_alter_table('autotune_trials') as batch:
        batch.add_column(sa.Column('gpu_hours', sa.Float(), nullable=False, server_default='0'))
    op.create_table(
        'autotune_confirmations',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('campaign_id', sa.Integer(), nullable=False),
        sa.Column('trial_id', sa.Integer(), nullable=False),
        sa.Column('role', sa.String(length=30), nullable=False),
        sa.Column('engine_config', sa.JSON(), nullable=False),
        sa.Column('seeds', sa.JSON(), nullable=False),
        sa.Column('samples', sa.JSON(), nullable=False),
        sa.Column('failures', sa.JSON(), nullable=False),
        sa.Column('n', sa.Integer(), nullable=False),
        sa.Column('mean_output_tok_s', sa.Float(), nullable=False),
        sa.Column('std_output_tok_s', sa.Float(), nullable=False),
        sa.Column('cv', sa.Float(), nullable=True),
        sa.Column('lcb_output_tok_s', sa.Float(), nullable=False),
        sa.Column('gpu_hours', sa.Float(), nullable=False),
        sa.Column('winner', sa.Boolean(), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(['campaign_id'], ['autotune_campaigns.id']),
        sa.ForeignKeyConstraint(['trial_id'], ['autotune_trials.id']),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('campaign_id', 'trial_id'),
    )


def downgrade() -> None:
    op.drop_table('autotune_confirmations')
    with op.batch_alter_table('autotune_trials') as batch:
        batch.drop_column('gpu_hours')
    with op.batch_alter_table('autotune_campaigns') as batch:
        for column in ('decided_at', 'decision_note', 'decision', 'stop_reason', 'budget',
                       'gpu_hours', 'period'):
            batch.drop_column(column)
