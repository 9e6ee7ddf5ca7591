"""multi-fidelity campaigns: which backend measured each trial, and a campaign's screening

Revision ID: 0005
Revises: 0004
Create Date: 2027-01-08 10:00:00
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('autotune_campaigns') as batch:
        batch.add_column(sa.Column('screen_backend', sa.String(length=50), nullable=True))
        batch.add_column(sa.Column('screen_top', sa.Integer(), nullable=True))
    with op.batch_alter_table('autotune_trials') as batch:
        batch.add_column(sa.Column('fidelity', sa.String(length=50), nullable=True))
    # Every trial so far was measured by its campaign's one backend.
    op.execute("UPDATE autotune_trials SET fidelity = (SELECT c.backend FROM autotune_campaigns c "
               "WHERE c.id = autotune_trials.campaign_id)")
    with op.batch_alter_table('autotune_trials') as batch:
        batch.alter_column('fidelity', existing_type=sa.String(length=50), nullable=False)


def downgrade() -> None:
    with op.batch_alter_table('autotune_trials') as batch:
        batch.drop_column('fidelity')
    with op.batch_alter_table('autotune_campaigns') as batch:
        batch.drop_column('screen_top')
        batch.drop_column('screen_backend')
