"""pgfeed: change data capture for PostgreSQL."""

__version__ = "0.1.0"
