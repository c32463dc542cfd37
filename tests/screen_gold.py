"""Every gold patch the project can reach, screened (`sandbox.screen`): none may be flagged.

- the built-in suite: full files; each project's files are the fixed versions (the gold patch's
  `index` line ends at their blob), so the pristine file is the project's with each hunk's new
  side, found exactly where the hunk says, replaced by its old side (`unapply`);
- the real SWE-bench Lite set beside the project (`../shared/data/real/`): full files, the base
  commit's from the bare repositories in its tarballs, patched with `git apply`;
- SWE-bench Lite (`../shared/data/swebench_lite.parquet`): hunks only (`screen_patch`).

`python tests/screen_gold.py` prints the counts per source.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).parent)]

from real_support import REAL, extract_store  # noqa: E402
from sandbox.screen import Flag, instance_tests, screen, screen_patch  # noqa: E402
from swe_rlvr.patches import parse_patch, patch_files  # noqa: E402

LITE = REAL.parent / "swebench_lite.parquet"
PROJECTS = Path(__file__).resolve().parents[1] / "swe_rlvr" / "builtin" / "projects"

Result = tuple[int, list[tuple[str, Flag]]]
"""(instances screened, (instance id, flag) for each flagged one)."""


def unapply(files: dict[str, str | None], patch: str) -> dict[str, str | None]:
    """`files` (path -> patched text) before `patch`: every hunk's new side must stand at its
    place (ValueError otherwise); a file the patch created is None."""
    before: dict[str, str | None] = {}
    for section in parse_patch(patch):
        text = files[section.path]
        lines = [] if text is None else text.splitlines()
        for hunk in reversed(section.hunks):
            at = hunk.new_start - 1 if hunk.new_len else hunk.new_start
            if lines[at:at + len(hunk.new)] != hunk.new:
                raise ValueError(f"{section.path}: hunk at +{hunk.new_start} is not where it says")
            lines[at:at + len(hunk.new)] = hunk.old
        before[section.path] = None if section.new_file else "\n".join(lines) + "\n"
    return before


def apply(files: dict[str, str | None], patch: str) -> dict[str, str | None]:
    """`files` (path -> text; None: absent) with `patch` applied by `git apply` in a scratch
    directory; the same paths, None where the patch deleted the file."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for path, text in files.items():
            if text is not None:
                (root / path).parent.mkdir(parents=True, exist_ok=True)
                (root / path).write_text(text)
        done = subprocess.run(["git", "apply", "-"], cwd=root, input=patch,
                              text=True, capture_output=True)
        if done.returncode != 0:
            raise RuntimeError(f"git apply failed: {done.stderr.strip()}")
        return {path: (root / path).read_text() if (root / path).is_file() else None for path in files}


def sweep(cases: Iterator[tuple[str, Callable[[], Flag | None]]]) -> Result:
    count, flagged = 0, []
    for instance_id, run in cases:
        count += 1
        flag = run()
        if flag is not None:
            flagged.append((instance_id, flag))
    return count, flagged


def builtin_gold() -> Result:
    from swe_rlvr.builtin import load_builtin

    def case(instance):
        project = PROJECTS / instance.meta()["project"]
        after = {p: (project / p).read_text() if (project / p).is_file() else None
                 for p in patch_files(instance.patch)}
        before = unapply(after, instance.patch)
        return lambda: screen(instance.repo, before, after, tests=instance_tests(instance))
    return sweep((i.instance_id, case(i)) for i in load_builtin())


def real_gold(store: Path) -> Result:
    """The real set; `store` is an empty scratch directory for its bare repositories (the test
    skips without the set)."""
    from swe_rlvr.loaders import load_instances
    extract_store(store)

    def case(instance):
        git_dir = store / instance.repo.replace("/", "__")
        before = {p: _show(git_dir, instance.base_commit, p) for p in patch_files(instance.patch)}
        after = apply(before, instance.patch)
        return lambda: screen(instance.repo, before, after, tests=instance_tests(instance))
    instances = load_instances(REAL / "instances.jsonl", format="swe-bench").instances
    return sweep((i.instance_id, case(i)) for i in instances)


def _show(git_dir: Path, commit: str, path: str) -> str | None:
    done = subprocess.run(["git", "--git-dir", str(git_dir), "show", f"{commit}:{path}"],
                          capture_output=True, text=True)
    return done.stdout if done.returncode == 0 else None


def lite_gold() -> Result:
    from swe_rlvr.loaders import load_instances
    instances = load_instances(LITE).instances
    return sweep((i.instance_id, lambda i=i: screen_patch(i.repo, i.patch, tests=instance_tests(i)))
                 for i in instances)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as scratch:
        for source, (count, flagged) in (("builtin", builtin_gold()), ("real", real_gold(Path(scratch))),
                                         ("lite", lite_gold())):
            print(f"{source}: {count} screened, {len(flagged)} flagged")
            for instance_id, flag in flagged:
                print(f"  {instance_id}: {flag}")
