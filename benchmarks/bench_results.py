"""The results file of a scale benchmark: parts measured now replace theirs, the others are kept.

Each part names the command that measured it, so a run of some ``--parts``
never passes off older figures as its own.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path


def start(out: Path, argv: list[str] | None, script: str, parts: list[str], keys: dict[str, list[str]]) -> dict:
    """The results to fill: this machine, the commands per part, and every key of the parts not run now
    (``keys``: part → the result keys it writes) kept from an existing ``out``."""
    old = json.loads(out.read_text()) if out.is_file() else {}
    command = f"python benchmarks/{script} " + " ".join(argv or sys.argv[1:])
    commands = old.get("commands") or {part: old["command"] for part in keys if "command" in old}
    commands.update({part: command for part in parts})
    kept = {key: old.get(key) for part, names in keys.items() if part not in parts for key in names}
    return {"machine": {"cpus": os.cpu_count(), "python": platform.python_version()}, "commands": commands, **kept}


def write(out: Path, results: dict) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


def run(main: Callable[[], int]) -> None:
    """``main()`` as the script's exit status, with its wall time on stderr."""
    t0 = time.perf_counter()
    code = main()
    print(f"benchmark took {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    raise SystemExit(code)
