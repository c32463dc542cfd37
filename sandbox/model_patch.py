"""Applying the model patch in the grading sandbox (step 1 of `sandbox.grading`): `git apply`, then
`git apply --3way`, then `patch --batch --fuzz=5 -p1`, the first that works; a patch that names a
path inside `.git`, or whose application changes anything there but git's index, is refused."""

from __future__ import annotations

import dataclasses

from sandbox.base import Sandbox
from sandbox.tamper import GIT
from swe_rlvr.patches import header_paths

PATCH_FILE = ".git/swe-rlvr-model.patch"
APPLY_METHODS = (
    ("git-apply", f"{GIT} apply --verbose {PATCH_FILE}"),
    ("3way", f"{GIT} apply --verbose --3way {PATCH_FILE}"),
    ("patch-fuzz", f"patch --batch --fuzz=5 -p1 -i {PATCH_FILE}"),
)
MARK_FILE = ".git/swe-rlvr-apply.mark"
GIT_CHANGED = (f"find .git -newer {MARK_FILE} ! -path .git ! -path .git/index ! -path .git/index.lock "
               f"! -path '.git/objects*' ! -path {PATCH_FILE} ! -path {MARK_FILE} -print")
"""Paths under .git that an application touched: only git's own index may change."""
def apply_model_patch(sb: Sandbox, patch: str) -> tuple[str, str]:
    """Apply with the first method that works: (method, log), or ("", log of every attempt).
    A patch that names a path inside `.git` in any header that git or `patch` reads is refused,
    and an application that changed anything under `.git` anyway (git's index aside) fails."""
    bad = [f for f in header_paths(patch) if ".git" in f.split("/")]
    if bad:
        return "", f"Refused: the patch writes inside .git ({', '.join(bad[:5])})."
    sb.write_file(PATCH_FILE, patch if patch.endswith("\n") else patch + "\n")
    logs = []
    for method, cmd in APPLY_METHODS:
        result = sb.execute(f"touch {MARK_FILE} && {cmd}", timeout=120)
        if result.exit_code == 0:
            changed = sb.execute(GIT_CHANGED, timeout=120).output.split()
            if not changed:
                return method, result.output
            result = dataclasses.replace(result, output=result.output + f"\nRefused: applying "
                                         f"it changed .git ({', '.join(changed[:5])}).")
        logs.append(f"$ {cmd}\n{result.output}")
        sb.execute(f"{GIT} checkout -- . && {GIT} clean -fdq -e .git", timeout=120)
    return "", "Patch failed to apply:\n" + "\n".join(logs)
