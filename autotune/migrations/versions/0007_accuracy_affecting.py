"""whether a deployment's campaigns may search values that change the model's numerics, and
which of a published config's values change them

Revision ID: 0007
Revises: 0006
Create Date: 2027-02-01 10:00:00
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Older deployments searched them (the chat space's fp8 KV cache): true keeps them as
    # they were.
    with op.batch_alter_table('autotune_deployments') as batch:
        batch.add_column(sa.Column('allow_accuracy_affecting', sa.Boolean(), nullable=False,
                                   server_default=sa.true()))
    # Null in publications made before: the document says "not recorded", not "none".
    with op.batch_alter_table('autotune_publications') as batch:
        batch.add_column(sa.Column('accuracy_affecting', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('autotune_publications') as batch:
        batch.drop_column('accuracy_affecting')
    with op.batch_alter_table('autotune_deployments') as batch:
        batch.drop_column('allow_accuracy_affecting')
