"""Pure pgoutput decoding: bytes -> protocol message objects (no I/O)."""
