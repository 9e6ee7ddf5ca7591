"""the model a deployment's engines load, and the one each publication names

Revision ID: 0006
Revises: 0005
Create Date: 2027-01-20 10:00:00
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Both nullable: older deployments and publications name none (the document then falls
    # back to the catalogue's Hugging Face id).
    with op.batch_alter_table('autotune_deployments') as batch:
        batch.add_column(sa.Column('model_path', sa.String(length=1000), nullable=True))
    with op.batch_alter_table('autotune_publications') as batch:
        batch.add_column(sa.Column('served_model', sa.String(length=1000), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('autotune_publications') as batch:
        batch.drop_column('served_model')
    with op.batch_alter_table('autotune_deployments') as batch:
        batch.drop_column('model_path')
