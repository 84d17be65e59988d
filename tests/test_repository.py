"""The repository keeps its promises: CI runs the README's test command."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    quick_start = text.split("## Quick start", 1)[1].split("\n#", 1)[0]  # up to the next heading of any level
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", quick_start, re.S)]


def test_readme_gives_exactly_two_setup_commands():
    commands = _readme_commands()
    assert len(commands) == 2, commands
    assert all("\n" not in c for c in commands)
    assert "pytest" in commands[1]


def test_ci_runs_the_readme_test_command_verbatim():
    ci = (ROOT / ".ci" / "run").read_text()
    assert _readme_commands()[1] in ci.splitlines()


def test_install_pins_the_cpu_torch_build():
    for command in _readme_commands():
        assert "torch==2.13.0" in command
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'"torch>=2\.\d+"', pyproject)
