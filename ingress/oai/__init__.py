"""OpenAI wire types (msgspec Structs) and their codec."""
