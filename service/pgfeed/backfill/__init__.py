"""Backfills: a table's current rows read into a feed while it keeps streaming (chunks judged by snapshot, DBLog-style).

``model`` (records the change log keeps), ``window`` (pure: chunk windows on the capture
side), ``source`` (reading chunks; nothing is written to the source), ``manager`` (workers,
states, the API's verbs).
"""
