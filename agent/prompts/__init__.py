"""Prompt templates (package data), rendered with `string.Template` (`$name` placeholders).

- `system_<scaffold>.md`: the scaffold's tools and the action format; `$demo` takes the one-shot
  demonstration `demo_<scaffold>.md` when `AgentConfig.one_shot_demo` is on (Nebius used one for
  RFT data collection), else nothing.
- `issue.md`: the first user message; guidance, when given, is appended after it (agent.guidance).
- `format_error.md`: the observation of a malformed turn.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files
from string import Template

from swe_rlvr.config import AgentConfig
from swe_rlvr.instances import Instance


@cache
def template(name: str) -> Template:
    """The named template file of this package."""
    return Template(files(__name__).joinpath(name).read_text(encoding="utf-8"))


def system_prompt(cfg: AgentConfig, workdir: str) -> str:
    scaffold = cfg.scaffold.replace("-", "_")
    demo = template(f"demo_{scaffold}.md").template if cfg.one_shot_demo else ""
    return template(f"system_{scaffold}.md").safe_substitute(workdir=workdir, demo=demo).strip()


def issue_message(instance: Instance) -> str:
    return template("issue.md").safe_substitute(repo=instance.repo,
                                                problem_statement=instance.problem_statement.strip()).strip()


def format_error(problem: str) -> str:
    return template("format_error.md").safe_substitute(problem=problem).strip()
