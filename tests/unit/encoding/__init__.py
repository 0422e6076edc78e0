"""Unit tests of service.encoding."""
