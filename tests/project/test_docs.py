"""The README is a front page and the docs site builds: `mkdocs build --strict` (broken links,
anchors and nav fail) with the API reference rendered from the docstrings, the README's length and
first screen, and its headline figures generated from the one results file the reproduction pages
are built from (figures are typed once)."""

from __future__ import annotations

import html
import importlib
import importlib.util
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
HOOK = ROOT / "docs" / "hooks" / "reproductions.py"
SPECS = ROOT / "src" / "semsearch" / "experiments" / "specs"


def _hook():
    spec = importlib.util.spec_from_file_location("docs_reproductions_hook", HOOK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The docs site, built once with ``mkdocs build --strict`` (a warning fails the build)."""
    out = tmp_path_factory.mktemp("docs") / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def _text(page: Path) -> str:
    """A built page's text: tags dropped, entities decoded, whitespace runs made one space."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page.read_text(encoding="utf-8"))).split())


def test_mkdocs_build_strict(site):
    page = (site / "reproductions" / "homedepot" / "index.html").read_text(encoding="utf-8")
    assert "spec_table" not in page and "<table" in page


def test_api_reference_renders_every_export(site):
    """Each docs/api page renders its package's exports (``__all__``) from the docstrings: an
    export is a heading under the package's path or, when the page renders it on its own, under
    its defining module's; and Bundle's docstring is on the index page, so the test fails when
    mkdocstrings stops rendering."""
    pages = {
        m.group(1): md
        for md in sorted((ROOT / "docs" / "api").glob("*.md"))
        if (m := re.search(r"^::: (semsearch\.\w+)\s*$", md.read_text(encoding="utf-8"), re.M))
    }
    assert {"semsearch.index", "semsearch.clicks", "semsearch.evaluation", "semsearch.data"} <= set(pages)
    for name, md in pages.items():
        built = site / "api" / md.stem / "index.html"
        assert built.exists(), f"{md.relative_to(ROOT)} was not built (is it in mkdocs.yml's nav?)"
        ids = set(re.findall(r'id="([\w.]+)"', built.read_text(encoding="utf-8")))
        package = importlib.import_module(name)
        missing = []
        for export in package.__all__:
            obj = getattr(package, export)
            defined = f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', '')}"
            if f"{name}.{export}" not in ids and defined not in ids:
                missing.append(export)
        assert not missing, f"{built} lacks {missing}: an export without a docstring is not rendered (give it one)"
    bundle = importlib.import_module("semsearch.index").Bundle
    summary = " ".join(inspect.getdoc(bundle).split("\n\n")[0].replace("`", "").split())
    assert summary in _text(site / "api" / "semsearch.index" / "index.html"), "Bundle's docstring is not rendered"


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
