"""GPU test setup: tests/gpu on the import path, and the accuracy records written at the end."""

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


def pytest_sessionfinish(session, exitstatus):
    from accuracy import RECORDS

    target = os.environ.get("CODA_ACCURACY_JSON")
    if target and RECORDS:
        target = Path(target)
        worker = os.environ.get("PYTEST_XDIST_WORKER")  # one file per xdist worker
        if worker:
            target = target.with_name(f"{target.stem}-{worker}{target.suffix}")
        target.write_text(json.dumps(RECORDS, indent=1))
