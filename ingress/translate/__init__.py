"""FlatBuffers answers → OpenAI structs (sans-I/O)."""
