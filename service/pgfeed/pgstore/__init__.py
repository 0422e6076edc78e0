"""The PostgreSQL store: change logs, feed catalogue, consumers, leases and replicas of several
``pgfeed serve`` processes in one schema of a PostgreSQL database (``--store postgresql://…``)."""
