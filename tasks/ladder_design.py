"""A ladder's declared sequential design: `design.json` beside its seed files.

    {"comparison": ["dapo", "warmup"], "alpha": 0.05, "spending": "obrien-fleming",
     "looks": [3, 5], "declared": "2026-11-30", "why": "<why these looks, in words>"}

A comparison judged again as seeds are added is a sequence of looks at one question, and 95% at
every look overstates what the last one shows. A results folder with this file judges its
`comparison`'s pooled row by the design's bound for the number of seeds pooled
(`tasks.sequential`): `looks` are the pooled seed counts at which it is judged, the last one the
planned total, and each look's information fraction is its seeds over that total. A report
pooling a seed count between looks shows the row and does not judge it: a look the design did
not plan would raise the bounds of the looks after it, and the report, regenerated after every
seed, would take one at each count. Past the last look it is refused. Without the file, every
row is judged at 95% as before.

`judged` records looks that were in fact judged at another bound than the design's, e.g. one
judged at the fixed-sample 1.96 before the design was declared:

    "judged": [{"seeds": 3, "bound": 1.96, "why": "<when and why>"}]

The design's bounds still judge every look, and a later look's report states the error rate of
the procedure as followed (`sequential.error_rate` over the looks so far, each at the bound it was
judged at), which is above the design's alpha when an earlier look was judged more leniently.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from swe_rlvr.config import ConfigError
from tasks import sequential
from tasks.ladder_stats import excludes_zero

FILE = "design.json"
SPENDING = ("obrien-fleming",)


@dataclasses.dataclass(frozen=True)
class Judged:
    """A look judged at another |z| bound than the design's, and why."""

    seeds: int
    bound: float
    why: str = ""


@dataclasses.dataclass(frozen=True)
class Design:
    comparison: tuple[str, str]
    looks: tuple[int, ...]
    alpha: float = 0.05
    spending: str = "obrien-fleming"
    declared: str = ""
    why: str = ""
    judged: tuple[Judged, ...] = ()

    def judge(self, seeds: int) -> dict:
        """Where `seeds` pooled seeds stand: the look count, the information fraction, whether it
        is a look (`planned`), and for a look its index, |z| bound and the two-sided level of the
        interval that tests it; between looks, the next look's seed count instead."""
        if seeds > self.looks[-1]:
            raise ConfigError(f"{FILE}: {seeds} seeds are pooled, but the design's last look is "
                              f"at {self.looks[-1]}; a new design (a new results folder) is a new "
                              f"experiment.")
        where = {"looks": len(self.looks), "seeds": seeds, "fraction": seeds / self.looks[-1],
                 "planned": seeds in self.looks}
        if not where["planned"]:
            return {**where, "next": min(n for n in self.looks if n > seeds)}
        taken = [n for n in self.looks if n <= seeds]
        fractions = [n / self.looks[-1] for n in taken]
        designed = sequential.bounds(fractions, self.alpha)
        look = {**where, "look": len(taken), "bound": designed[-1],
                "level": sequential.level(designed[-1])}
        earlier = {j.seeds: j for j in self.judged if j.seeds < seeds}
        if not earlier:
            return look
        followed = [earlier[n].bound if n in earlier else z for n, z in zip(taken, designed)]
        return {**look, "judged": [earlier[n] for n in taken if n in earlier],
                "designed": designed[:-1], "error_rate": sequential.error_rate(fractions, followed)}


def load(folder: Path) -> Design | None:
    """The design in `folder`, None when it has none; a malformed one is refused with the field."""
    path = Path(folder) / FILE
    if not path.exists():
        return None
    raw = json.loads(path.read_text())
    comparison, looks = raw.get("comparison"), raw.get("looks")
    if not (isinstance(comparison, list) and len(comparison) == 2
            and all(isinstance(a, str) for a in comparison)):
        raise ConfigError(f"{path}: `comparison` must name two arms, A and B of A − B, e.g. "
                          f'["dapo", "warmup"] (got {comparison!r}).')
    if not (isinstance(looks, list) and looks and all(isinstance(n, int) and n >= 1 for n in looks)
            and looks == sorted(set(looks))):
        raise ConfigError(f"{path}: `looks` must be increasing seed counts, the last one the "
                          f"planned total, e.g. [3, 5] (got {looks!r}).")
    alpha = raw.get("alpha", 0.05)
    if not (isinstance(alpha, (int, float)) and 0 < alpha < 1):
        raise ConfigError(f"{path}: `alpha` is the overall two-sided error rate, in (0, 1) "
                          f"(got {alpha!r}).")
    spending = raw.get("spending", "obrien-fleming")
    if spending not in SPENDING:
        raise ConfigError(f"{path}: `spending` must be one of {', '.join(SPENDING)} "
                          f"(got {spending!r}).")
    judged = _judged(path, raw.get("judged", []), looks)
    unknown = set(raw) - {f.name for f in dataclasses.fields(Design)}
    if unknown:
        raise ConfigError(f"{path}: unknown field(s) {', '.join(sorted(unknown))}; the fields are "
                          f"{', '.join(f.name for f in dataclasses.fields(Design))}.")
    return Design((comparison[0], comparison[1]), tuple(looks), float(alpha), spending,
                  str(raw.get("declared", "")), str(raw.get("why", "")), judged)


def _judged(path: Path, raw, looks: list[int]) -> tuple[Judged, ...]:
    """`judged`'s entries, each a look of the design before its last, at most once."""
    example = '[{"seeds": 3, "bound": 1.96, "why": "judged at 95% before this design"}]'
    if not isinstance(raw, list):
        raise ConfigError(f"{path}: `judged` must be a list of looks, e.g. {example} "
                          f"(got {raw!r}).")
    out = []
    for entry in raw:
        seeds, bound = (entry.get("seeds"), entry.get("bound")) if isinstance(entry, dict) else (None, None)
        if not (isinstance(seeds, int) and seeds in looks[:-1] and isinstance(bound, (int, float))
                and bound > 0 and set(entry) <= {"seeds", "bound", "why"}):
            raise ConfigError(f"{path}: each `judged` entry names a look before the last "
                              f"({', '.join(map(str, looks[:-1])) or 'none'}), the positive |z| "
                              f"bound it was judged at and why, e.g. {example} (got {entry!r}).")
        out.append(Judged(seeds, float(bound), str(entry.get("why", ""))))
    if len({j.seeds for j in out}) < len(out):
        raise ConfigError(f"{path}: `judged` names a look twice (got {raw!r}).")
    return tuple(out)


def sequential_lines(pairs: list[dict], design: Design | None) -> list[str]:
    """The design's comparison judged at its look: the bound, the interval at its level, and
    whether it excludes 0 (nothing without a design or before both arms have seeds)."""
    rows = [r for r in pairs if "sequential" in r]
    if design is None or not rows:
        return []
    r, look = rows[0], rows[0]["sequential"]
    declared = (f"Declared {design.declared or '(undated)'} in `design.json`: {r['a']} − {r['b']} "
                f"is judged when {_spoken(design.looks)} seeds are pooled, with "
                f"{design.alpha:g} two-sided alpha over all looks spent by Lan-DeMets' "
                f"O'Brien-Fleming-type function (`tasks.sequential`).")
    why = f" Why: {design.why}" if design.why else ""
    if not look["planned"]:
        return ["## The claim's sequential design", "",
                f"{look['seeds']} seeds are pooled, between the design's looks: {r['a']} − "
                f"{r['b']} is shown above and not judged at this count. A look the design did "
                f"not plan would raise the bounds of the looks after it; the next look is at "
                f"{look['next']} seeds. {declared}{why}", ""]
    return ["## The claim's sequential design", "",
            "| A − B | look | seeds | information fraction | bound on abs(z) | interval | "
            "paired bootstrap CI | excludes 0 |", "|---|---|---|---|---|---|---|---|",
            f"| {r['a']} − {r['b']} | {look['look']} of {look['looks']} | {look['seeds']} | "
            f"{look['fraction']:.2f} | {look['bound']:.3f} | {100 * look['level']:.1f}% | "
            f"[{look['low']:+.3f}, {look['high']:+.3f}] | "
            f"{'yes' if excludes_zero(look) else 'no'} |", "",
            f"{declared} This is look {look['look']} of {look['looks']}. The claim stands only "
            f"where this interval excludes 0; the 95% interval above is the fixed-sample "
            f"one.{why}", "", *_as_judged(look, design)]


def _as_judged(look: dict, design: Design) -> list[str]:
    """The error rate of the looks as judged, where an earlier one was judged at another bound."""
    if "error_rate" not in look:
        return []
    names = {n: k + 1 for k, n in enumerate(design.looks)}
    earlier = "; ".join(f"look {names[j.seeds]} ({j.seeds} seeds) at |z| ≥ {j.bound:.3f}, not the "
                        f"design's {look['designed'][names[j.seeds] - 1]:.3f}"
                        + (f" ({j.why})" if j.why else "") for j in look["judged"])
    return [f"**As judged, not as designed:** {earlier}. A false claim at some look of the "
            f"procedure as followed has two-sided probability {look['error_rate']:.3f}, not the "
            f"design's {design.alpha:g} (`tasks.sequential.error_rate`). A claim at "
            f"{design.alpha:g} needs new seeds judged on their own.", ""]


def _spoken(looks: tuple[int, ...]) -> str:
    """(3, 5) -> "3 and 5"; (2, 3, 5) -> "2, 3 and 5"."""
    return " and ".join(filter(None, [", ".join(map(str, looks[:-1])), str(looks[-1])]))
