"""OpenAI wire types (msgspec Structs) and their codec. A module per API names what a client sends
(`chat.py`, `responses.py`) and `<api>_answers.py` what goes back (`chat_answers.py`,
`responses_answers.py`); `completions.py` and `embeddings.py` are small enough to hold both."""
