"""Backfills: a table's current rows read into a feed while it keeps streaming (DBLog watermarks).

``model`` (records the change log keeps), ``window`` (pure: watermark windows on the capture
side), ``source`` (reading chunks and writing watermarks on the source), ``manager`` (workers,
states, the API's verbs).
"""
