"""ingress: an edge proxy for LLM traffic — OpenAI-compatible JSON at the edge, FlatBuffers inside."""

__version__ = "0.1.0"
