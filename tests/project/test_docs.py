"""The README is a front page and the docs site builds: `mkdocs build --strict` (broken links,
anchors and nav fail), the README's length and first screen, and its headline figures generated
from the one results file the reproduction pages are built from (figures are typed once)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
HOOK = ROOT / "docs" / "hooks" / "reproductions.py"
SPECS = ROOT / "src" / "semsearch" / "experiments" / "specs"


def _hook():
    spec = importlib.util.spec_from_file_location("docs_reproductions_hook", HOOK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_mkdocs_build_strict(tmp_path):
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    page = (tmp_path / "site" / "reproductions" / "homedepot" / "index.html").read_text(encoding="utf-8")
    assert "spec_table" not in page and "<table" in page


def test_readme_is_a_front_page():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines; the limit is 300 (move detail to docs/)"
    assert lines[0].startswith("# "), "the README starts with its title, nothing above it"
    first_screen = "\n".join(lines[:40])
    assert "make serve" in first_screen and "make test" in first_screen


def test_readme_headline_figures_come_from_the_results_file():
    text = README.read_text(encoding="utf-8")
    m = re.search(r"<!-- headline:start -->\n(.*?)\n<!-- headline:end -->", text, re.S)
    assert m, "README.md lacks the <!-- headline:start --> / <!-- headline:end --> block"
    assert m.group(1) == _hook().headline_table(), (
        "README's headline table differs from docs/reproductions/results.yaml: "
        "regenerate it with `python docs/hooks/reproductions.py`"
    )


def test_every_spec_has_results_and_a_page():
    hook = _hook()
    results = hook.load_results()["specs"]
    names = sorted(p.stem for p in SPECS.glob("*.toml"))
    assert sorted(results) == names, "docs/reproductions/results.yaml needs one entry per spec, no more"
    pages = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "docs" / "reproductions").glob("*.md"))
    shown = set(re.findall(r'spec_table\("([^"]+)"\)', pages))
    assert shown == set(names), f"specs without a table on a reproduction page: {sorted(set(names) - shown)}"
    for name in names:
        hook.spec_table(name)  # every recorded row names a row of its spec


def test_readme_python_example_runs(make_bundle, tmp_path):
    """The README's Python block runs as written against a bundle (the tiny one in place of
    bundles/homedepot), so the front page's API cannot drift from the code."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert blocks, "the README shows no Python example"
    bundle = make_bundle(tmp_path / "bundle")
    code = blocks[0].replace('"bundles/homedepot"', repr(str(bundle)))
    assert str(bundle) in code, "the README's example no longer loads bundles/homedepot"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 6 and all(line.split()[-1] in ("LEXICAL", "SEMANTIC", "BOTH") for line in lines[1:]), lines
