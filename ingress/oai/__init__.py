"""OpenAI wire types (msgspec Structs) and their codecs. A module per API names what a client sends
(`chat.py`, `responses.py`) and `<api>_answers.py` what goes back (`chat_answers.py`,
`responses_answers.py`); a request is decoded and checked by its codec (`codec.py` for chat, which also
holds what every decoder shares; `responses_codec.py`), and a Responses request is read as a chat request
by `responses_to_chat.py`. `completions.py` and `embeddings.py` are small enough to hold all of it."""
