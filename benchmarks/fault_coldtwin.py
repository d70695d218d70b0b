"""The cold-twin kill -9 loops, longer than the suite runs them: `python benchmarks/fault_coldtwin.py [N]`.

Runs tests/test_coldtwin_faults.py with N kills per loop (default 100) for plain model folders and
for a Hugging Face cache; after every kill each file must be complete in at least one place.
"""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main():
    kills = sys.argv[1] if len(sys.argv) > 1 else "100"
    env = dict(os.environ, MOETOOLS_COLDTWIN_KILLS=kills, MOETOOLS_COLDTWIN_HF_KILLS=kills)
    command = [sys.executable, "-m", "pytest", "-q", "tests/test_coldtwin_faults.py"]
    return subprocess.call(command, cwd=ROOT, env=env)


if __name__ == "__main__":
    sys.exit(main())
