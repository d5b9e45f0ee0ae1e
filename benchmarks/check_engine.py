"""CPU seconds of :func:`bernmf.testing.check_engine` for each built-in engine.

Each engine is checked in a fresh process (its compiled programs from the persistent
cache that ``BERNMF_COMPILE_CACHE`` names, as the test suite's are), with its
:data:`bernmf.testing.SMALL_OPTIONS`; the table gives the process CPU seconds of the call
(``time.process_time``: this machine is shared, wall-clock seconds would measure the
others' load) and the failed checks, if any.

Run: ``.venv/bin/python benchmarks/check_engine.py [ENGINE ...]``
"""

from __future__ import annotations

import json
import subprocess
import sys

SCRIPT = """
import json, sys, time, warnings
import bernmf.testing as testing
begin = time.process_time()
try:
    testing.check_engine(sys.argv[1])
    failed = []
except testing.EngineCheckError as error:
    failed = sorted(error.failures)
print(json.dumps({"seconds": time.process_time() - begin, "failed": failed}))
"""


def main(names: list[str]) -> None:
    import bernmf

    print(f"{'engine':8} {'CPU s':>7}  failed checks")
    for name in names or bernmf.engines():
        done = subprocess.run(
            [sys.executable, "-c", SCRIPT, name], capture_output=True, text=True, check=True
        )
        result = json.loads(done.stdout.splitlines()[-1])
        print(f"{name:8} {result['seconds']:7.1f}  {', '.join(result['failed']) or '-'}")


if __name__ == "__main__":
    main(sys.argv[1:])
