"""The documentation agrees with the code: the generated configuration reference is current, the
README keeps its shape, and the docs site's navigation names every page.

`mkdocs build --strict` (infra/test.sh's lint stage) checks the links; tests/test_doc_commands.py
runs the commands.
"""

from __future__ import annotations

import ast
from pathlib import Path

import yaml

from swe_rlvr import config_reference
from swe_rlvr.config import Config, to_dict

ROOT = Path(__file__).resolve().parents[1]


def test_the_committed_config_reference_is_what_the_code_generates():
    """After a change to a config field or its docstring, regenerate the page:
    `python -m swe_rlvr.config_reference`."""
    committed = (ROOT / config_reference.PAGE).read_text()
    assert committed == config_reference.render(), (
        f"{config_reference.PAGE} is stale: run `python -m swe_rlvr.config_reference` and commit it")


def test_the_reference_has_every_key_of_the_config_tree_with_its_docstring():
    keys = {f.key: f for _, _, fields in config_reference.sections() for f in fields}

    def dotted(tree: dict, prefix: str = "") -> set[str]:
        out = set()
        for name, value in tree.items():
            out |= dotted(value, f"{prefix}{name}.") if isinstance(value, dict) else {f"{prefix}{name}"}
        return out

    assert set(keys) == dotted(to_dict(Config()))
    assert all(f.doc for f in keys.values()), [k for k, f in keys.items() if not f.doc]
    assert keys["algorithm.clip_high"].default == "0.28"
    assert "clip" in keys["algorithm.clip_high"].doc.lower()


def test_check_mode_fails_on_a_stale_page(tmp_path, capsys):
    page = tmp_path / "config.md"
    assert config_reference.main(["--out", str(page)]) == 0
    assert config_reference.main(["--out", str(page), "--check"]) == 0
    page.write_text(page.read_text().replace("clip", "clap", 1))
    assert config_reference.main(["--out", str(page), "--check"]) == 1
    assert "stale" in capsys.readouterr().err


def test_a_field_docstring_is_read_from_the_source_not_imported(tmp_path):
    source = 'class Section:\n    size: int = 3\n    """How big:\n    in units."""\n    other: str = "x"\n'
    [cls] = ast.parse(source).body
    assert isinstance(cls, ast.ClassDef)
    size, other = config_reference.section_fields(cls, "s.", {})
    assert (size.key, size.type, size.default, size.doc) == ("s.size", "int", "3", "How big: in units.")
    assert (other.default, other.doc) == ("'x'", "")


def test_the_readme_is_a_short_guide_with_the_first_command_up_front():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 250
    first = next(i for i, line in enumerate(lines) if line.startswith("make quickstart"))
    assert first < 30


def test_every_page_is_in_the_site_navigation():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text().replace("!!python", "#"))

    def pages(nav) -> set[str]:
        found = set()
        for entry in nav:
            value = next(iter(entry.values())) if isinstance(entry, dict) else entry
            found |= pages(value) if isinstance(value, list) else {value}
        return found

    on_disk = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")}
    assert on_disk == pages(config["nav"])
