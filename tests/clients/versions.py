"""Prints, as one JSON object, the environment's prefix and the installed version of each named distribution.

    python versions.py <distribution>...
"""

from __future__ import annotations

import json
import sys
from importlib import metadata

if __name__ == "__main__":
    print(json.dumps({"prefix": sys.prefix, "versions": {name: metadata.version(name) for name in sys.argv[1:]}}))
