"""Every runnable command block of the docs runs, at tiny size (tests/doc_support.py says how).

A block that runs a whole flow (`train`, `quickstart`, `evaluate`, ...) is in the e2e tier; the
rest (listing instances, grading, the ladder's plan and report) run in the unit tier. A command
the docs show that stops working fails here, so the docs cannot drift from the CLI.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import doc_support
from doc_support import Block, BlockFailed, collect, doc_files


def _params() -> list:
    blocks = [b for path in doc_files() for b in collect(path)]
    return [pytest.param(b, id=b.where, marks=[pytest.mark.e2e] if b.runs_flow else [])
            for b in blocks]


@pytest.mark.parametrize("block", _params())
def test_documented_block_runs(block: Block, tiny_model_dir, tmp_path):
    doc_support.run(block, tiny_model_dir, tmp_path / "block")


def _page(tmp_path: Path, body: str) -> Path:
    page = tmp_path / "page.md"
    page.write_text(body)
    return page


def test_a_broken_block_fails_and_names_its_place(tmp_path):
    """A runnable block with a subcommand the CLI lacks fails the test with its file and line."""
    page = _page(tmp_path, "# Page\n\n<!-- doctest: run -->\n```bash\nswe-rlvr no-such-command\n```\n")
    [block] = collect(page)
    with pytest.raises(BlockFailed, match=r"page\.md:4 exited 2"):
        doc_support.run(block, "unused", tmp_path / "block")


def test_a_later_failing_command_fails_the_block(tmp_path):
    """`set -e`: the first command succeeding does not hide the second one's failure."""
    page = _page(tmp_path, "<!-- doctest: run -->\n```bash\nswe-rlvr --help\n"
                           "swe-rlvr instances list no-such-file.jsonl\n```\n")
    with pytest.raises(BlockFailed):
        doc_support.run(collect(page)[0], "unused", tmp_path / "block")


def test_append_goes_on_every_command_that_takes_overrides_before_its_comment(tmp_path):
    page = _page(tmp_path, (
        'Text.\n\n<!-- doctest: run append="eval.limit=1 engine.model={tiny_model}" -->\n```bash\n'
        "swe-rlvr train --config configs/quickstart.yaml \\\n    orchestration.iterations=4   # four\n"
        "ls runs\n.venv/bin/swe-rlvr instances list builtin\n```\n\n```bash\nswe-rlvr not-runnable\n```\n"))
    [block] = collect(page)
    assert block.runs_flow and block.line == 4
    lines = doc_support.script(block, "/m", Path("/t")).splitlines()
    assert lines == ["set -euo pipefail",
                     "swe-rlvr train --config configs/quickstart.yaml orchestration.iterations=4 "
                     "sandbox.workdir=/t/work eval.limit=1 engine.model=/m",
                     "ls runs",
                     "swe-rlvr instances list builtin"]


def test_only_flow_commands_put_a_block_in_the_e2e_tier(tmp_path):
    page = _page(tmp_path, "<!-- doctest: run -->\n```bash\nswe-rlvr experiment ladder --plan\n```\n"
                           "<!-- doctest: run -->\n```bash\nswe-rlvr experiment ladder --seeds 1\n```\n")
    plan, ladder = collect(page)
    assert not plan.runs_flow and ladder.runs_flow


@pytest.mark.parametrize("body, error", [
    ("<!-- doctest: run -->\n\n```bash\nls\n```\n", "directly before"),
    ("<!-- doctest: run -->\n```python\nprint()\n```\n", "directly before"),
    ("<!-- doctest: run apend=\"x\" -->\n```bash\nls\n```\n", "unknown doctest options"),
    ("<!-- doctest: run -->\n```bash\nls\n", "never closed"),
])
def test_a_malformed_marker_is_an_error_not_a_skipped_block(tmp_path, body, error):
    with pytest.raises(ValueError, match=error):
        collect(_page(tmp_path, body))


def test_the_docs_have_runnable_blocks_in_both_tiers():
    blocks = [b for path in doc_files() for b in collect(path)]
    assert any(b.runs_flow for b in blocks) and any(not b.runs_flow for b in blocks)
    assert any(b.path.name == "getting-started.md" and b.runs_flow for b in blocks)


def test_a_marker_shown_inside_another_fence_is_text(tmp_path):
    page = _page(tmp_path, "```markdown\n<!-- doctest: run -->\n```\n\n<!-- doctest: run -->\n```bash\nls\n```\n")
    [block] = collect(page)
    assert block.line == 6 and block.commands == ("ls",)
