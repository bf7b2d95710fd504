"""`python deploy/validate [-v] [CHECK...]` (or `python -m deploy.validate` from the repository's root):
run the checks and print their summary."""

from __future__ import annotations

import sys
from pathlib import Path

if __package__:  # python -m deploy.validate
    from . import main
else:  # python deploy/validate: its own folder is on sys.path, where a module could shadow a library
    HERE = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
    sys.path.insert(0, str(HERE.parent))
    from validate import main  # type: ignore[no-redef]  # the package, from deploy/

sys.exit(main())
