"""Every `python` block of README.md and docs/*.md runs as printed, in a fresh folder, with the
installed package; a block preceded by `<!-- docs-examples: not run: REASON -->` is left out
with its reason (fragments, and recipes that need PyTorch, JAX or TensorFlow)."""

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
MARKER = re.compile(r"<!-- docs-examples: not run: (.*) -->")
# `import torch`, `import numpy as np, torch`, `from torch import nn`, `import torch.nn`.
USES_TORCH = re.compile(r"^\s*(?:import\s+(?:[\w.]+(?:\s+as\s+\w+)?\s*,\s*)*torch\b|from\s+torch\b)", re.M)


def python_blocks():
    pages = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
    for page in pages:
        lines = page.read_text().splitlines()
        at = 0
        while at < len(lines):
            if lines[at].strip() == "```python":
                start = at + 1
                end = next(i for i in range(start, len(lines)) if lines[i].strip() == "```")
                reason = MARKER.match(lines[at - 1].strip()) if at > 0 else None
                name = "%s:%d" % (page.relative_to(ROOT), at + 1)
                code = "\n".join(lines[start:end])
                marks = [pytest.mark.pytorch] if USES_TORCH.search(code) else []
                yield pytest.param(code, reason and reason.group(1), id=name, marks=marks)
                at = end
            at += 1


BLOCKS = list(python_blocks())
RUN = [block for block in BLOCKS if block.values[1] is None]


def test_the_readme_has_a_python_example_that_runs():
    readme = [block for block in BLOCKS if block.id.startswith("README.md:")]
    assert readme and all(block in RUN for block in readme), readme


def test_every_block_not_run_says_why():
    for block in BLOCKS:
        reason = block.values[1]
        assert reason is None or len(reason.split()) >= 3, block.id


@pytest.mark.parametrize("code,not_run", RUN)
def test_python_block_runs_as_printed(code, not_run, tmp_path, monkeypatch, capsys):
    assert not_run is None
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "<docs>", "exec"), {"__name__": "__docs__"})
    assert capsys.readouterr().out.strip(), "the example prints what it shows"
