"""The normalised instance schema shared by every stage.

An *instance* is one SWE task in SWE-bench's sense: a repository at a base commit, an issue, a
gold patch, a test patch, and the FAIL_TO_PASS / PASS_TO_PASS test lists that grade a fix. Every
loader in `swe_rlvr.loaders` turns its source format into this one dataclass, so the sandbox, the
agent and the trainer never see a dataset-specific field.

Simplifications: `meta_json` keeps source-specific extras (SWE-rebench `meta`, SWE-smith image
names) as a JSON string rather than typed fields, because no stage reads them beyond display.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from swe_rlvr.patches import patch_files

SOURCES = ("swe-bench", "swe-gym", "swe-rebench", "swe-smith", "internal", "builtin")
SPLITS = ("", "train", "test", "dev")
ALL = "all"
"""The split name that selects every instance of a file, whatever split its records carry (plain
SWE-bench, SWE-Gym and SWE-rebench files carry none)."""
DIFFICULTIES = ("", "easy", "medium", "hard", "generated")
DEFAULT_TEST_CMD = "python -m pytest -rA -p no:cacheprovider"
MAX_NAME_BYTES = 120
"""The longest name (UTF-8 bytes) of a file or directory this project names after an id: two names
joined with a suffix (`<model>.<run_id>.json` of `swe-rlvr grade`) still fit the file system's
255-byte limit. Real ids are far shorter (SWE-bench Lite's longest has 32 characters)."""


def name_problem(name: str) -> str:
    """Why `name` cannot be one path component, or "" when it can.

    Instance ids, model names and run ids become directory and file names (`<out>/<run_id>/<model>/
    <instance_id>/` of `swe-rlvr grade`, caches keyed by id), so each must name exactly one entry
    inside the directory it is joined to: never "." or "..", no path separator, no NUL, control
    character or lone surrogate (no file system takes one), no leading "-" (a command would read
    it as an option), and at most MAX_NAME_BYTES. The text completes "field 'x' ..." and ends
    with the fix."""
    shown = repr(name) if len(name) <= 60 else repr(name[:57]) + "..."
    fix = "use letters, digits and . _ - only"
    if not name.strip():
        return "is empty; give it a value"
    if name in (".", ".."):
        return f"is {shown}, which names a directory, not an entry in it; {fix}"
    if "/" in name or "\\" in name:
        return f"is {shown}, whose path separator would leave its directory; {fix}"
    if any(ord(c) < 32 or ord(c) == 127 or 0xD800 <= ord(c) <= 0xDFFF for c in name):
        return f"is {shown}, which holds a control character or a lone surrogate; {fix}"
    if name.startswith("-"):
        return f"is {shown}, which starts with '-' and so reads as an option to commands; {fix}"
    if len(name.encode()) > MAX_NAME_BYTES:
        return (f"is {shown}, {len(name.encode())} bytes long: over the {MAX_NAME_BYTES}-byte "
                f"limit of a name here; shorten it")
    return ""


def in_split(instance: Instance, split: str) -> bool:
    """Whether `instance` belongs to `split`: its own split, or any for `all`."""
    return split == ALL or instance.split == split


def split_problem(split: str, setting: str) -> str:
    """Why `split` (the value of config key `setting`) selects nothing, or "" when it can."""
    if split == ALL or (split and split in SPLITS):
        return ""
    return (f"{setting} is {split!r}, which names no split; choose one of "
            f"{', '.join(s for s in SPLITS if s)} or {ALL} (every instance, e.g. of a file whose "
            f"records carry no split).")


def shares_instances(train_split: str, eval_split: str) -> bool:
    """Whether training and evaluation can draw the same instance: one split, or either `all`."""
    return train_split == eval_split or ALL in (train_split, eval_split)


def sharing_problem(train_split: str, eval_split: str, allowed: bool) -> str:
    """Why training on `train_split` and evaluating on `eval_split` is refused, or ""."""
    if allowed or not shares_instances(train_split, eval_split):
        return ""
    return (f"instances.train_split={train_split!r} and eval.split={eval_split!r} share instances, "
            f"so pass@1 would be measured on instances the policy trained on; evaluate on a "
            f"held-out split, or set eval.share_train_instances=true to allow it.")


@dataclass(frozen=True)
class EnvSpec:
    """How to build and test the instance's environment (SWE-rebench `install_config` style)."""

    python: str = "3.11"
    """Python version of the environment, e.g. "3.9". The local backend needs it installed."""
    pre_install: tuple[str, ...] = ()
    """Shell commands run before installation (apt installs are skipped by the local backend)."""
    reqs_path: tuple[str, ...] = ()
    """Requirement files inside the repo, installed with `pip install -r`."""
    pip_packages: tuple[str, ...] = ()
    """Extra pip requirements, e.g. ("pytest==7.4.0",)."""
    install: str = ""
    """The command that installs the repo itself, e.g. "pip install -e ."."""
    test_cmd: str = DEFAULT_TEST_CMD
    """Test command; the grader appends the test files of the test patch."""
    eval_script: str = ""
    """SWE-bench's full evaluation script, when the source ships one (run in its Docker image)."""
    origin: str = ""
    """Where the spec comes from: "" (the record's install_config, or written by hand) or
    "swebench" (SWE-bench's spec for the repo and version, see `swe_rlvr.env_specs`). A
    "swebench" spec's `reqs_path` lists candidates of which the first that exists is installed,
    and its install gets the record's version as the setuptools_scm version."""
    build_error: str = ""
    """Why the local backend cannot build this environment ("" = it can): no SWE-bench spec for
    the repo and version, or a conda-only spec. The local backend raises it as an infrastructure
    failure; the Docker backend uses the instance's image and ignores it."""


@dataclass(frozen=True)
class Instance:
    """One SWE task, normalised. Field names follow SWE-bench, lower-cased."""

    instance_id: str
    repo: str
    """`owner/name` of the repository."""
    base_commit: str
    problem_statement: str
    patch: str
    """The gold patch that fixes the issue (for SWE-smith, the inverse of the bug patch)."""
    test_patch: str
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]
    env: EnvSpec = field(default_factory=EnvSpec)
    source: str = "internal"
    split: str = ""
    difficulty: str = ""
    version: str = ""
    environment_setup_commit: str = ""
    hints_text: str = ""
    created_at: str = ""
    image: str = ""
    """Docker image that holds the instance's environment, if the source names one."""
    log_parser: str = "pytest"
    """Name of the test-log parser in `sandbox.logparse`."""
    meta_json: str = "{}"

    def __post_init__(self) -> None:
        problem = (name_problem(self.instance_id) if isinstance(self.instance_id, str)
                   else f"must be a string, got {type(self.instance_id).__name__}")
        if problem:  # every stage joins the id into paths, so no Instance exists without a safe one
            raise ValueError(f"Instance field 'instance_id' {problem}.")

    def test_files(self) -> tuple[str, ...]:
        """Paths that the test patch touches, then the files that FAIL_TO_PASS / PASS_TO_PASS
        pytest ids name (`path.py::test`), in order of first appearance.

        The second part matters where the graded tests already exist at the base commit and the
        test patch is empty (SWE-smith-style instances): those files are still the instance's
        tests, so grading runs them and resets them to the base before it does.
        """
        named = [t.split("::", 1)[0] for t in self.fail_to_pass + self.pass_to_pass if "::" in t]
        return tuple(dict.fromkeys([*patch_files(self.test_patch),
                                    *(f for f in named if f.endswith(".py"))]))

    def fix_files(self) -> tuple[str, ...]:
        """Paths that the gold patch touches."""
        return patch_files(self.patch)

    def to_row(self) -> dict:
        """A flat dict for Arrow: lists for test ids, the env spec as a struct."""
        row = asdict(self)
        row["fail_to_pass"] = list(self.fail_to_pass)
        row["pass_to_pass"] = list(self.pass_to_pass)
        row["env"] = {k: list(v) if isinstance(v, tuple) else v for k, v in row["env"].items()}
        return row

    @classmethod
    def from_row(cls, row: dict) -> Instance:
        """Inverse of `to_row`; tolerant of lists or tuples."""
        spec: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in row["env"].items()}
        env = EnvSpec(**spec)
        kwargs = {f.name: row[f.name] for f in fields(cls) if f.name in row and f.name != "env"}
        kwargs["fail_to_pass"] = tuple(kwargs["fail_to_pass"])
        kwargs["pass_to_pass"] = tuple(kwargs["pass_to_pass"])
        return cls(env=env, **kwargs)

    def meta(self) -> dict:
        return json.loads(self.meta_json or "{}")
