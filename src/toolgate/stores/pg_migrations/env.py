"""Alembic's environment for toolgate's PostgreSQL schema.

toolgate runs it itself (:func:`toolgate.stores.postgres_schema.upgrade`), handing over the
connection in ``config.attributes["connection"]``; there is no ``alembic.ini``. Each migration
runs in its own transaction, so a failure leaves the database at the last one that succeeded.
"""

from alembic import context

connection = context.config.attributes["connection"]
context.configure(connection=connection, transaction_per_migration=True)
with context.begin_transaction():
    context.run_migrations()
