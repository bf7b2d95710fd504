"""Where the limits' state lives: what a store does (`store.py`), one process's (`memory.py`), and the
fleet's on Redis (`redis.py`: one `limits.lua` call a request, through its own RESP client `resp.py`)."""
