"""Domain -> wire formats (JSON, Arrow, protobuf); pure, no I/O."""
