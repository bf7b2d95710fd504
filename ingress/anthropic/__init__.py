"""Anthropic's Messages API wire types (msgspec Structs) and their codec, as `oai/` holds OpenAI's:
`messages.py` names what a client sends, `answers.py` what goes back (the `message` object, the stream's
events and the error envelope)."""
