"""campaign lease: which job runs a campaign, so a killed job's campaign can be resumed

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-09 10:00:00
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('autotune_campaigns', sa.Column('lease_owner', sa.String(length=200),
                                                  nullable=True))
    op.add_column('autotune_campaigns', sa.Column('lease_renewals', sa.Integer(), nullable=False,
                                                  server_default='0'))
    op.add_column('autotune_campaigns', sa.Column('lease_heartbeat_at',
                                                  sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('autotune_campaigns') as batch:
        batch.drop_column('lease_heartbeat_at')
        batch.drop_column('lease_renewals')
        batch.drop_column('lease_owner')
