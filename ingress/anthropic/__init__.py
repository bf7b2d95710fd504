"""Anthropic's Messages API wire types (msgspec Structs) and their codec, as `oai/` holds OpenAI's:
`messages.py` names what a client sends (its content blocks in `blocks.py`, its decoder `messages_codec.py`;
`messages_to_chat.py` reads it as a chat request), `answers.py` what goes back (the `message` object, the stream's
events and the error envelope)."""
