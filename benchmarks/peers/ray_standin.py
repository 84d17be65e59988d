"""Writes a stand-in ``ray`` package into a folder, for running FuxiCTR where ray is not installed.

    python benchmarks/peers/ray_standin.py SITE_DIR

FuxiCTR 2.3.10 imports ray at import time (``fuxictr.preprocess.build_dataset`` and the Parquet
dataloader, through its package ``__init__`` files); the npz path ``run_fuxictr.py`` uses never calls
it. The stand-in's modules hand out, for any name, a class that refuses to be instantiated or called,
so the imports (a subclass of ``FilenameProvider`` included) succeed and any real use fails loudly.
Only ``benchmarks/gpu_speed.sh`` uses it, on machines where ray cannot be installed.
"""

from __future__ import annotations

import sys
from pathlib import Path

MODULES = ("ray", "ray.data", "ray.data.datasource", "ray.data.datasource.filename_provider")

BODY = '''"""Stand-in for ray, written by benchmarks/peers/ray_standin.py: ray is not installed here."""


class _NotInstalled:
    def __init__(self, *args, **kwargs):
        raise ImportError("ray is not installed here: this is the stand-in of benchmarks/peers/ray_standin.py")


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return type(name, (_NotInstalled,), {})
'''


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    site = Path(argv[0])
    for module in MODULES:
        folder = site.joinpath(*module.split("."))
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "__init__.py").write_text(BODY)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
