"""Unit tests of pgfeed.encoding."""
