"""Environments of plain SWE-bench records, from the `swebench` package's own specs.

A SWE-bench, SWE-Gym or SWE-smith record carries no environment: the official harness builds it
from `MAP_REPO_VERSION_TO_SPECS[repo][version]` (swebench 4.1.0, called as a library; its tables
are not copied here). `swebench_env` is the one place that looks a spec up. It maps the spec onto
`EnvSpec` the way SWE-bench's env and repo scripts use it:
- `python`, `pip_packages`, `pre_install` and `install` carry over, and so does `test_cmd` (a list,
  which only non-Python specs use, is joined with " && " like a SWE-rebench list);
- `packages: "requirements.txt"` names the repo's requirement files, `MAP_REPO_TO_REQS_PATHS[repo]`:
  candidates of which the first that exists wins. Only the checkout holds them (there is no
  network), so `requirements_text` reads and cleans that file at build time;
- `packages: "environment.yml"` is a conda environment, which the local backend cannot build;
- any other `packages` string is conda packages in SWE-bench and extra pip requirements here (for
  every Python spec of swebench 4.1.0 they have the same names on PyPI: numpy, "mpmath flake8", ...).

Where the local backend cannot build the environment (no spec for the repo/version, a spec that is
not Python, a conda spec) the instance still loads, and `EnvSpec.build_error` says why and what to
do. The local backend raises it as an infrastructure failure. It never falls back to a default
environment: that ran SWE-bench's tests in swe-rlvr's own interpreter and failed them silently.

Every install (spec-derived, or a record's own `install_config`) gets
`SETUPTOOLS_SCM_PRETEND_VERSION_FOR_<PKG>` from the record's version (`scm_pretend_env`). The
repo store's clones are shallow and tagless, so setuptools_scm would otherwise report 0.1.dev1,
and pytest, for one, then refuses its own `minversion`: gold would score an infrastructure
failure.

Simplifications:
- SWE-bench reads the requirement file at `environment_setup_commit`; this reads it at the base
  commit, the only commit the repo store is sure to hold.
- `eval_commands` (locale set-up and exports before the tests), `apt-pkgs` and `docker_specs` are
  not carried: they need the image, and the Docker backend runs the record's `eval_script`,
  which contains them.
"""

from __future__ import annotations

import configparser
import re
import shlex
from pathlib import Path

from swe_rlvr.instances import DEFAULT_TEST_CMD, EnvSpec

SWEBENCH = "swebench"
"""`EnvSpec.origin` of an environment derived from SWE-bench's spec."""
REQUIREMENTS_FILE = "requirements.swebench.txt"
"""Where the build writes the cleaned requirement text (in the environment, not the checkout)."""


def swebench_env(repo: str, version: str, eval_script: str = "", image: str = "") -> EnvSpec:
    """The environment SWE-bench builds for `repo` at `version`, or one whose `build_error` says
    why the local backend cannot build it."""
    spec, reqs_paths = _lookup(repo, version)
    if spec is None:
        return EnvSpec(eval_script=eval_script, origin=SWEBENCH,
                       build_error=no_spec_reason(repo, version, image))
    return env_from_spec(spec, repo, version, reqs_paths, eval_script, image)


def _lookup(repo: str, version: str) -> tuple[dict | None, tuple[str, ...]]:
    """The spec and requirement-file candidates; swebench is imported here, on first use only
    (the import takes seconds, and files without plain records never need it)."""
    from swebench.harness.constants import MAP_REPO_TO_REQS_PATHS, MAP_REPO_VERSION_TO_SPECS

    spec = MAP_REPO_VERSION_TO_SPECS.get(repo, {}).get(version)
    return spec, tuple(MAP_REPO_TO_REQS_PATHS.get(repo, ()))


def env_from_spec(spec: dict, repo: str, version: str, reqs_paths: tuple[str, ...] = (),
                  eval_script: str = "", image: str = "") -> EnvSpec:
    """One SWE-bench spec as an `EnvSpec` (see the module docstring for the mapping)."""
    if not spec.get("python"):
        return EnvSpec(eval_script=eval_script, origin=SWEBENCH, build_error=(
            f"SWE-bench's spec for {repo} version {version!r} is not a Python environment (it "
            f"names no Python), so the local backend cannot build it. {_fix(image)}"))
    packages = spec.get("packages", "") or ""
    extra: tuple[str, ...] = ()
    reqs: tuple[str, ...] = ()
    error = ""  # the fields are still filled in: they tell a reader what the image holds
    if packages == "requirements.txt":
        reqs = reqs_paths
        if not reqs:
            error = (f"SWE-bench's spec for {repo} version {version!r} installs requirement "
                     f"files, but MAP_REPO_TO_REQS_PATHS names none for {repo}. {_fix(image)}")
    elif packages == "environment.yml":
        error = (f"SWE-bench's spec for {repo} version {version!r} builds a conda environment "
                 f"from the repo's environment.yml; the local backend builds virtualenvs and "
                 f"cannot do that. {_fix(image)}")
    elif packages:
        extra = tuple(shlex.split(packages))
    test_cmd = spec.get("test_cmd") or DEFAULT_TEST_CMD
    return EnvSpec(
        python=str(spec["python"]), reqs_path=reqs,
        pip_packages=extra + tuple(spec.get("pip_packages", ())),
        pre_install=tuple(spec.get("pre_install", ())), install=spec.get("install", ""),
        test_cmd=" && ".join(test_cmd) if isinstance(test_cmd, list) else test_cmd,
        eval_script=eval_script, origin=SWEBENCH, build_error=error)


def no_spec_reason(repo: str, version: str, image: str = "") -> str:
    """Why a plain record with no SWE-bench spec cannot run on the local backend, and the fix."""
    what = f"version {version!r}" if version else "no version (the record has none)"
    return (f"No SWE-bench environment spec for {repo} with {what}: swebench's "
            f"MAP_REPO_VERSION_TO_SPECS has no entry, so the local backend does not know how to "
            f"build its environment. {_fix(image)}")


def _fix(image: str) -> str:
    where = f" ({image})" if image else ""
    return (f"Give the record an install_config (SWE-rebench style: python, pip_packages, "
            f"install, test_cmd), or use the Docker backend (sandbox.backend=docker) with the "
            f"instance's image{where}.")


# --------------------------------------------------------------------------- at build time


def requirements_text(checkout: Path, candidates: tuple[str, ...]) -> tuple[str, str] | None:
    """(path, text) of the first candidate requirement file that exists in `checkout`, read as
    SWE-bench reads it: `-r` includes inlined ahead of the file's own lines, lines starting with
    `-e .`, `#` or `.[test` dropped, and swebench's `clean_requirements` applied (it swaps
    packages since yanked from PyPI). None when no candidate exists."""
    for rel in candidates:
        path = checkout / rel
        if path.is_file():
            from swebench.harness.test_spec.python import clean_requirements

            return rel, clean_requirements(_inlined(path, checkout, depth=0))
    return None


_DROPPED = ("-e .", "#", ".[test")


def _inlined(path: Path, checkout: Path, depth: int) -> str:
    """SWE-bench's reading of one file (it inlines one level; nested includes are inlined too,
    since the text is installed from outside the checkout, where a relative `-r` cannot resolve)."""
    included, own = [], []
    for line in path.read_text(errors="replace").split("\n"):
        if line.strip().startswith("-r"):
            target = (path.parent / line.strip()[2:].strip()).resolve()
            if depth < 5 and target.is_file() and target.is_relative_to(checkout.resolve()):
                included.append(_inlined(target, checkout, depth + 1))
        elif not any(line.strip().startswith(x) for x in _DROPPED):
            own.append(line)
    return "\n".join([*included, "\n".join(own)])


def scm_pretend_env(checkout: Path, version: str) -> tuple[tuple[str, str], ...]:
    """The setuptools_scm version override for an install of `checkout`: the record's `version`
    padded to three parts, for the distribution the checkout declares. Empty when the repo does
    not use setuptools_scm (or hatch-vcs), declares no readable name, or the record's version is
    not a release number (none, or a name such as "main": no version setuptools_scm accepts)."""
    if not _RELEASE.fullmatch(version.strip()) or not _uses_scm(checkout):
        return ()
    name = distribution_name(checkout)
    if not name:
        return ()
    return tuple((var, pretend_version(version)) for var in pretend_version_vars(name))


def pretend_version(version: str) -> str:
    """A record version as a full release: "7.0" -> "7.0.0", "2" -> "2.0.0", "1.2.3" unchanged."""
    parts = version.strip().split(".")
    return ".".join(parts + ["0"] * (3 - len(parts)))


def pretend_version_vars(name: str) -> tuple[str, ...]:
    """`SETUPTOOLS_SCM_PRETEND_VERSION_FOR_<PKG>`, PKG the PEP 503-normalised name in upper case
    with `-` for `_` (setuptools_scm >= 7). setuptools_scm 6 upper-cased the name as written and
    replaced only `-`; that spelling is added where it differs, since a build may pin 6.x."""
    canonical = re.sub(r"[-_.]+", "-", name).lower().replace("-", "_").upper()
    legacy = name.upper().replace("-", "_")
    prefix = "SETUPTOOLS_SCM_PRETEND_VERSION_FOR_"
    return tuple(dict.fromkeys([prefix + canonical, prefix + legacy]))


_RELEASE = re.compile(r"\d+(\.\d+)*")
_SCM = re.compile(r"setuptools[_-]scm|hatch[_-]vcs|use_scm_version", re.IGNORECASE)


def _uses_scm(checkout: Path) -> bool:
    return any(_SCM.search(_read(checkout / f)) for f in ("pyproject.toml", "setup.cfg", "setup.py"))


def distribution_name(checkout: Path) -> str:
    """The distribution name that pyproject.toml ([project]), setup.cfg ([metadata]) or a literal
    `name="..."` in setup.py declares; "" when none is readable."""
    import tomllib

    try:
        name = tomllib.loads(_read(checkout / "pyproject.toml")).get("project", {}).get("name")
    except tomllib.TOMLDecodeError:
        name = None
    if isinstance(name, str) and name:
        return name
    cfg = configparser.ConfigParser(interpolation=None)
    try:
        cfg.read_string(_read(checkout / "setup.cfg"))
        name = cfg.get("metadata", "name", fallback="")
    except configparser.Error:
        name = ""
    if name:
        return name.strip()
    match = re.search(r"""\bname\s*=\s*["']([A-Za-z0-9][A-Za-z0-9._-]*)["']""",
                      _read(checkout / "setup.py"))
    return match.group(1) if match else ""


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""
