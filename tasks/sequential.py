"""Group-sequential bounds for a comparison judged at several looks at its growing data.

A ladder that judges its pooled dapo - warmup row after 3 seeds and again after 5 takes two looks
at one comparison. At 95% each, the chance of a false claim across both is above 5%. A
spending function fixes that: it says how much of the overall two-sided alpha may be spent by
information fraction t (here seeds so far / seeds planned), and each look's bound on |z| spends
exactly the increment. Lan and DeMets' O'Brien-Fleming-type function,

    alpha(t) = 2 - 2 Phi(z_{1 - alpha/2} / sqrt(t)),

spends almost nothing early, so the last look's bound stays near the fixed-sample 1.96.

The bounds come from the standardised statistic's law under the null: Z_k sqrt(t_k) is a Brownian
motion at times t_k. The first bound is closed-form, z_{1 - alpha(t_1)/2} = z_{1-alpha/2}/sqrt(t_1).
Each later one solves P(continue to look k-1, then |Z_k| >= c_k) = alpha(t_k) - alpha(t_{k-1})
(the recursive integration of Armitage, McPherson and Rowe): the sub-density of the motion on the
continuation region is carried from look to look on a grid (Simpson's rule), and c_k is found
by bisection. Pure numpy and the standard library (no scipy), tested against closed forms and,
in the tests, scipy's bivariate normal.

`error_rate` runs the same recursion forwards: the chance under the null that a procedure which
judged its looks at any given bounds claimed at one of them. A look judged at the fixed-sample 1.96
before a design existed, followed by the design's later bounds, errs more often than the design's
alpha, and this says by how much.

A bound z maps to the two-sided level 1 - 2 (1 - Phi(z)) of the interval that excludes 0 exactly
when |Z| >= z; a bootstrap interval at that level is the sequential test's interval.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist

import numpy as np

GRID = 1601
"""Grid points over a look's continuation region (odd, for Simpson's rule)."""
_NORMAL = NormalDist()


def phi_cdf(z: float | np.ndarray) -> np.ndarray:
    """The standard normal CDF."""
    return 0.5 * (1.0 + _erf(np.asarray(z, dtype=float) / math.sqrt(2.0)))


def obrien_fleming_spent(t: float, alpha: float = 0.05) -> float:
    """Two-sided alpha spent by information fraction t (0 < t <= 1), Lan-DeMets O'Brien-Fleming."""
    if not 0 < t <= 1:
        raise ValueError(f"An information fraction lies in (0, 1] (got {t}).")
    return float(2.0 - 2.0 * phi_cdf(_NORMAL.inv_cdf(1 - alpha / 2) / math.sqrt(t)))


def bounds(fractions: Sequence[float], alpha: float = 0.05) -> list[float]:
    """Two-sided |z| bounds of looks at the increasing information `fractions` (the last <= 1)."""
    ts = [float(t) for t in fractions]
    if not ts or any(b <= a for a, b in zip(ts, ts[1:])) or not 0 < ts[0] or ts[-1] > 1:
        raise ValueError(f"Looks need increasing information fractions in (0, 1] (got {ts}).")
    spent = [obrien_fleming_spent(t, alpha) for t in ts]
    out = [_NORMAL.inv_cdf(1 - spent[0] / 2)]
    grid, density = _continuation(out[0] * math.sqrt(ts[0]), None, None, ts[0])
    for k in range(1, len(ts)):
        step = ts[k] - ts[k - 1]
        target = spent[k] - spent[k - 1]
        crossing = _crossing(grid, density, step, math.sqrt(ts[k]))
        low, high = 0.0, 40.0                    # crossing(c) falls as c rises
        for _ in range(100):
            mid = (low + high) / 2
            low, high = (mid, high) if crossing(mid) > target else (low, mid)
        out.append((low + high) / 2)
        grid, density = _continuation(out[-1] * math.sqrt(ts[k]), grid, density, step)
    return out


def error_rate(fractions: Sequence[float], zs: Sequence[float]) -> float:
    """Two-sided chance under the null that some look k has |Z_k| >= zs[k], the looks at the
    increasing information `fractions`: the false-claim rate of a procedure that judged them at
    `zs`. `error_rate(f, bounds(f, alpha))` is the alpha spent by f's last look (alpha at 1)."""
    ts, cs = [float(t) for t in fractions], [float(z) for z in zs]
    if len(ts) != len(cs) or not cs or any(c <= 0 for c in cs):
        raise ValueError(f"One positive bound per look is needed (got looks {ts}, bounds {cs}).")
    bounds(ts)                                    # the same checks of the fractions
    total = float(2.0 * (1.0 - phi_cdf(cs[0])))
    grid, density = _continuation(cs[0] * math.sqrt(ts[0]), None, None, ts[0])
    for k in range(1, len(ts)):
        step = ts[k] - ts[k - 1]
        total += _crossing(grid, density, step, math.sqrt(ts[k]))(cs[k])
        grid, density = _continuation(cs[k] * math.sqrt(ts[k]), grid, density, step)
    return total


def level(z: float) -> float:
    """The two-sided confidence level whose interval excludes 0 exactly when |Z| >= z."""
    return float(1.0 - 2.0 * (1.0 - phi_cdf(z)))


def _crossing(grid: np.ndarray, density: np.ndarray, step: float, scale: float):
    """c -> P(continued so far, then |B(t_k)| >= c sqrt(t_k)), B moving N(0, step) from `grid`."""
    weights = density * _simpson(grid)
    sd = math.sqrt(step)

    def crossing(c: float) -> float:
        edge = c * scale
        outside = phi_cdf((-edge - grid) / sd) + 1.0 - phi_cdf((edge - grid) / sd)
        return float(weights @ outside)

    return crossing


def _continuation(edge: float, grid: np.ndarray | None, density: np.ndarray | None,
                  step: float) -> tuple[np.ndarray, np.ndarray]:
    """The sub-density of B on (-edge, edge) after moving N(0, step): from the point 0 when
    `grid` is None, else from the sub-density `density` on `grid`."""
    new = np.linspace(-edge, edge, GRID)
    kernel = lambda x: np.exp(-x ** 2 / (2 * step)) / math.sqrt(2 * math.pi * step)  # noqa: E731
    if grid is None:
        return new, kernel(new)
    return new, kernel(new[:, None] - grid[None, :]) @ (density * _simpson(grid))


def _simpson(grid: np.ndarray) -> np.ndarray:
    """Simpson's rule weights over an evenly spaced grid of odd length."""
    w = np.ones(len(grid))
    w[1:-1:2], w[2:-1:2] = 4.0, 2.0
    return w * (grid[1] - grid[0]) / 3.0


_erf = np.vectorize(math.erf, otypes=[float])
