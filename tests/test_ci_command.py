"""CI runs exactly README.md's test command (which installs the chromium the browser test needs)."""

from __future__ import annotations

import re

from dash_support import REPO


def test_ci_runs_the_readme_test_command():
    readme = (REPO / "README.md").read_text()
    block = re.search(r"# tests \(what CI runs[^\n]*\n([^\n]+)\n", readme)
    assert block, "README's set-up section lost its '# tests (what CI runs...)' command"
    command = block.group(1).strip()
    ci = [line for line in (REPO / ".ci" / "run").read_text().splitlines() if line and not line.startswith(("#", "set ", "cd "))]
    assert ci == [command]
    assert "apt-get install -y -qq chromium" in command and command.endswith("pytest")
