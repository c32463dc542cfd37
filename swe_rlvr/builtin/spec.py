"""Authoring format of the built-in instances: one YAML file per project under `specs/`.

A spec names the instance's tier and split, its issue text, the bug as exact text replacements in
the upstream sources (`find` must occur exactly once), and its new tests as edits of test files
(`append` adds text at the end, `find`/`replace` changes text, `create` writes a new file).
The build turns specs into `instances.jsonl`; loading and materialising never read specs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

SPECS_DIR = Path(__file__).parent / "specs"


class SpecError(ValueError):
    """A spec does not match the upstream sources it edits."""


@dataclass(frozen=True)
class Edit:
    """One text edit of one file."""

    file: str
    find: str = ""
    replace: str = ""
    append: str = ""
    create: str = ""

    def apply(self, root: Path) -> None:
        path = root / self.file
        if self.create:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(self.create)
            return
        text = path.read_text()
        if self.append:
            path.write_text(text.rstrip("\n") + "\n\n\n" + self.append.lstrip("\n"))
            return
        if text.count(self.find) != 1:
            raise SpecError(f"{self.file}: the text to replace occurs {text.count(self.find)} "
                            f"times, it must occur exactly once; widen `find`:\n{self.find}")
        path.write_text(text.replace(self.find, self.replace))


@dataclass(frozen=True)
class InstanceSpec:
    """One instance as authored."""

    project: str
    number: int
    tier: str
    split: str
    issue: str
    bug: tuple[Edit, ...]
    tests: tuple[Edit, ...]
    created_at: str

    @property
    def instance_id(self) -> str:
        return f"swe-rlvr__{self.project}-{self.number}"

    @property
    def repo(self) -> str:
        return f"swe-rlvr/{self.project}"


def load_specs() -> list[InstanceSpec]:
    """Every instance spec of every project, ordered by project then number."""
    specs: list[InstanceSpec] = []
    for path in sorted(SPECS_DIR.glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        specs.extend(_instance(data["project"], item) for item in data["instances"])
    return specs


def _instance(project: str, item: dict) -> InstanceSpec:
    return InstanceSpec(
        project=project, number=int(item["n"]), tier=item["tier"], split=item["split"],
        issue=item["issue"].strip() + "\n",
        bug=tuple(Edit(**e) for e in item["bug"]),
        tests=tuple(Edit(**e) for e in item["tests"]),
        created_at=str(item.get("created_at", "2024-01-01T00:00:00Z")))
