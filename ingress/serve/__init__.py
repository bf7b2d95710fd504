"""The lifecycle: the edge application assembled and run (`app.py`), the supervisor and its workers
(`server.py`), and the garbage collector tuned for a long-lived server (`gctune.py`)."""
