"""The tail bound of Golikov's thesis, ch. 4, Theorem 4.3.1 (= §1.5.2, Theorem 1.5.3), for programs
of its class, beside the empirical tail at finite width.

The class (thesis eq. 4.39): one chain of fresh Gaussian matrices,

    g^1 ~ N(0, 1) iid,   g^{l+1} = A^l phi(g^l),   c^l = (1/n) sum_alpha chi(g^l_alpha)^2,

A^l with iid N(0, 1/n) entries, each used once; phi and chi lambda-Lipschitz, monotone and zero at 0.
The theorem: for every l, n and tau > 0,

    P(c^l − c̊^l > tau) <= B^l (exp(−n (tau / C_2^l(tau))^2) + n exp(−C_0 n)),   and the same for < −tau,

B^l = l, C_0 = 8 e^{−1/2} ≈ 4.85, K = sqrt(2 (3 + 64 e^{1/2})) ≈ 14.73,

    C_2^1(tau) = lambda^2 K,                         (4.41)
    C̄_2^l(tau) = lambda^2 (v̊^l + tau) K,            (4.41)
    C_2^{l+1}(tau) = lambda^2 C_2^l(tau/lambda^2) + C̄_2^l(tau/lambda^2),   (4.42, 4.70)

with v̊^l the limit of v^l = (1/n) sum phi(g^l)^2, the variance of g^{l+1}.  (The extraction of
(4.40) prints C̄_2^l in the exponent; the proof's last line (4.69) and the summary (1.58) have
C_2^l, which is what is evaluated here.)  Unrolled:

    C_2^L(tau) = K (lambda^{2L} v̊^0 + sum_{j=1}^{L−1} lambda^{2(L−j)} v̊^j + (L − 1) tau),  v̊^0 = 1,

whose large-lambda form with v̊^l = (rho lambda)^{2l} is Proposition 1.5.4 / eq. 4.44.

What a program may be (anything else is refused with TailBoundUnsupported, located at the
offending equation):

* the output is ``mean(chi(g) ** 2)`` or ``mean(chi(g) * chi(g))``, optionally times or divided by
  a positive constant (absorbed into chi), of one vector g of width n;
* g = g^L is reached by the chain g^{l+1} = W_l @ phi_l(g^l) from one initial vector g^1 ~ N(0, s^2)
  (mean 0); each phi_l is a function of g^l alone (no scalars, no other vectors);
* each W_l is an n x n matrix of law ``normal(var=sigma_l^2)`` used once in the chain, never
  transposed (the proof conditions on g^l and uses that A^l phi(g^l) is exactly Gaussian, so
  non-Gaussian laws are refused too);
* phi_l and chi are built from the identity, the builtins with a ``monotone`` rule in their
  records (relu, tanh, erf, sigmoid, softplus, selu, softsign, leaky_relu(., a) and elu(., a)
  with a >= 0), constants, +, −, * and / by constants and composition, vanish at 0 and are monotone
  (non-decreasing or non-increasing) — decided by syntactic rules on the expression, which also
  give the Lipschitz constant (an upper bound: exact for a single builtin times a constant).

Normalisation (the theorem has sigma_l = s = 1): A^l phi_l = (W_l / sigma_l)(sigma_l phi_l), so the
chain has lambda = max(max_l sigma_l Lip(phi_l), sqrt(c) Lip(chi)); a non-unit s enters as
v̊^0 = s^2 — the base case (4.46)-(4.51) is then exactly the conditional step (4.53)-(4.58) with the
deterministic variance s^2 for v^l.  Monotone non-increasing phi or chi are allowed because
A phi(g) = (−A)(−phi(g)) and −A has the law of A, so the chain's law is that of the
non-decreasing −phi.

This module is the comparison with finite width (:func:`tail_bound`, :func:`empirical_tail`,
:func:`compare`, :func:`render_rows`; on the command line ``tpc tailbound``); the others are

* :mod:`.chain`: :class:`Chain`, the bound's constants and recursion (``K_43``, ``C0_43``);
* :mod:`.recognise`: :func:`analyze`, the class check and the limits v̊^l, c̊
  (:class:`TailBoundUnsupported`);
* :mod:`.rules`: the Lipschitz / monotonicity rules on phi and chi.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ...errors import TPUsageError
from .recognise import TailBoundUnsupported, analyze
from .chain import C0_43, K_43, Chain

__all__ = ["analyze", "tail_bound", "empirical_tail", "compare", "render_rows", "Chain",
           "TailBoundUnsupported", "K_43", "C0_43"]


def _chain(program, output, lam=None) -> Chain:
    return program if isinstance(program, Chain) else analyze(program, output, lam)


def tail_bound(program, output: str, n: float, t: float, two_sided: bool = True,
               lam: float | None = None) -> float:
    """Theorem 4.3.1's bound on P(|c − c̊| > t) (``two_sided``) or P(c − c̊ > t) at width n, unclipped:
    a value >= 1 is vacuous.  ``program`` is a ``tensorprog.Program`` (or a :class:`Chain`)."""
    return _chain(program, output, lam).bound(n, t, two_sided)


def empirical_tail(program, output: str, n: int, t, trials: int, seed: int = 0,
                   limit: float | None = None, matrix_dist: str | None = None):
    """P(|c − c̊| > t) at width n over ``trials`` independent runs of the program, with its binomial
    standard error: ``(p, se)``, or two lists when ``t`` is a sequence.  ``limit`` defaults to the
    compiled limit.  Works for any program (the class matters only for :func:`tail_bound`)."""
    if limit is None:
        limit = program.compile().limit().entries[output].value
    r = program.execute(n=n, trials=trials, seed=seed, matrix_dist=matrix_dist)
    values = np.asarray(r.entries[output].values, dtype=float)
    ts = np.atleast_1d(np.asarray(t, dtype=float))
    if np.any(ts <= 0):
        raise TPUsageError(f"the deviation t must be > 0, not {t!r}")
    dev = np.abs(values - limit)
    ps = [float(np.mean(dev > x)) for x in ts]
    ses = [math.sqrt(p * (1 - p) / len(values)) for p in ps]
    if np.ndim(t) == 0:
        return ps[0], ses[0]
    return ps, ses


def compare(program, output: str, widths: Sequence[int], ts: Sequence[float], trials: int,
            seed: int = 0, lam: float | None = None, matrix_dist: str | None = None) -> list[dict]:
    """One row per (width, t): the bound, the empirical tail and its standard error, and whether
    the bound is vacuous (>= 1)."""
    chain = analyze(program, output, lam)
    limit = program.compile().limit().entries[output].value
    rows = []
    for k, n in enumerate(widths):
        ps, ses = empirical_tail(program, output, n, list(ts), trials, seed=seed + 7919 * k,
                                 limit=limit, matrix_dist=matrix_dist)
        for x, p, se in zip(ts, ps, ses):
            b = chain.bound(n, x)
            rows.append({"n": int(n), "t": float(x), "bound": b, "vacuous": b >= 1.0,
                         "empirical": p, "se": se, "trials": int(trials),
                         "n_needed_for_bound_0.05": chain.required_width(x, 0.05)})
    return rows


def render_rows(chain: Chain, rows: list[dict]) -> str:
    out = [chain.describe(), "",
           f"{'n':>6} {'t':>7} {'bound P(|c-c̊|>t)':>18} {'empirical':>10} {'± se':>8}  n for bound ≤ 0.05"]
    for r in rows:
        b = f"{r['bound']:.3g}" + (" (vacuous)" if r["vacuous"] else "")
        out.append(f"{r['n']:>6} {r['t']:>7.3g} {b:>18} {r['empirical']:>10.4f} {r['se']:>8.4f}  "
                   f"{r['n_needed_for_bound_0.05']}")
    return "\n".join(out)
