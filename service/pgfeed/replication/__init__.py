"""The walsender edge: replication frames and commands (pure), the stream, slot and publication
admin, the initial snapshot and the capture loop."""
