"""A real, deterministic, FlatBuffers-speaking internal service, for trying and testing the edge."""
