"""A reference for the MLP kernels of smooth activations in extended precision (np.longdouble).

The layer recursion of a φ MLP (NTK parameterization, first-layer bias), at one pair of inputs:

    Σ¹ = var1·q + b1 (q the inputs' Gram entries /d);  for l = 1 … L:
    K^l = E φ(u)φ(v),  K̇^l = E φ′(u)φ′(v),  (u, v) ~ N(0, Σ^l);  Σ^{l+1} = var·[E φ², K^l, E φ²]
    Θ¹ = Σ¹₁₂,  Θ^{l+1} = var·K^l + var·K̇^l·Θ^l;   nngp = K^L,  ntk = K^L + K̇^L·Θ^L

with every 1-D and 2-D Gaussian expectation by the trapezoidal rule in whitened coordinates
(u = √a z₁, v = (c/√a) z₁ + √(b − c²/a) z₂, z ~ N(0, I), nodes ih on [−T, T]) in 80-bit floats
(ε = 1.1e-19).  For φ analytic in a strip (tanh, SiLU) the rule converges geometrically in 1/h,
so at h = 0.1 its discretisation error is far below ε; what is left is rounding — about
ε·√(nodes)·|value| per expectation — and the truncation at T = 12 (e^{−72}).  The reference's own
error is estimated by the same recursion at two steps (:func:`mlp_kernels`), h and 0.75·h: their
difference (rounding of two different sums, plus any discretisation error) is reported with the
value, and it is ~1e-18 — four hundred times below one float64 ulp of a value of order 1.

The Gram entries q are formed from the float64 inputs in longdouble (exact to 1e-19).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

LD = np.longdouble
Fn = Callable[[np.ndarray], np.ndarray]
PI = np.arccos(LD(-1))


def tanh(x: np.ndarray) -> np.ndarray:
    return np.tanh(x)


def dtanh(x: np.ndarray) -> np.ndarray:
    t = np.tanh(x)
    return 1 - t * t


def sigmoid(x: np.ndarray) -> np.ndarray:
    """1/(1 + e^{−x}) in the input's precision, without overflow (e^{−|x|} ≤ 1)."""
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def silu(x: np.ndarray) -> np.ndarray:
    """x·sigmoid(x)."""
    return x * sigmoid(x)


def dsilu(x: np.ndarray) -> np.ndarray:
    """silu′(x) = σ(x)(1 + x(1 − σ(x)))."""
    s = sigmoid(x)
    return s * (1 + x * (1 - s))


ACTIVATIONS: dict[str, tuple[Fn, Fn]] = {"tanh": (tanh, dtanh), "silu": (silu, dsilu)}


class Rule:
    """E f(u)g(v) and E f(u) by the trapezoidal rule of step h on [−T, T] (whitened, longdouble)."""

    def __init__(self, h: float, T: float = 12.0) -> None:
        n = int(round(T / h))
        self.z = LD(h) * np.arange(-n, n + 1).astype(LD)
        self.w = LD(h) * np.exp(-self.z * self.z / 2) / np.sqrt(2 * PI)

    def pair(self, f: Fn, g: Fn, a, b, c) -> LD:
        a, b, c = LD(a), LD(b), LD(c)
        sa = np.sqrt(a)
        r = np.sqrt(max(b - c * c / a, LD(0)))
        u = sa * self.z
        v = (c / sa) * self.z[:, None] + r * self.z[None, :]
        inner = np.sum(g(v) * self.w[None, :], axis=1)            # E over z₂ for each z₁
        return np.sum(self.w * f(u) * inner)

    def single(self, f: Fn, a) -> LD:
        return np.sum(self.w * f(np.sqrt(LD(a)) * self.z))


def recursion(s11, s12, s22, depth: int, var: float, rule: Rule, phi: Fn, dphi: Fn) -> tuple[LD, LD]:
    """(nngp, ntk) of the module doc from the first layer's covariance (s11, s12, s22)."""
    var = LD(var)
    theta = LD(s12)
    for layer in range(1, depth + 1):
        k12 = rule.pair(phi, phi, s11, s22, s12)
        kdot = rule.pair(dphi, dphi, s11, s22, s12)
        if layer == depth:
            return k12, k12 + kdot * theta
        k11 = rule.single(lambda t: phi(t) ** 2, s11)
        k22 = k11 if s22 == s11 else rule.single(lambda t: phi(t) ** 2, s22)
        theta = var * k12 + var * kdot * theta
        s11, s12, s22 = var * k11, var * k12, var * k22
    raise ValueError("depth must be ≥ 1")


def mlp_kernels(X: np.ndarray, pairs, depth: int, var: float, var1: float, b1: float, act: str = "tanh",
                h: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    """(values (P, 2), own error estimates (P, 2)) of (nngp, ntk) at the pairs (i, j) of rows of X:
    the recursion at steps h and 0.75·h, the finer one's value and their difference."""
    phi, dphi = ACTIVATIONS[act]
    Xl = np.asarray(X, dtype=LD)
    d = LD(X.shape[1])
    fine, coarse = Rule(0.75 * h), Rule(h)
    vals, errs = [], []
    for i, j in pairs:
        q11, q12, q22 = (np.sum(Xl[s] * Xl[t]) / d for s, t in ((i, i), (i, j), (j, j)))
        s = tuple(LD(var1) * q + LD(b1) for q in (q11, q12, q22))
        if i == j:
            s = (s[0], s[0], s[0])
        one = np.array(recursion(*s, depth, var, fine, phi, dphi))
        two = np.array(recursion(*s, depth, var, coarse, phi, dphi))
        vals.append(one)
        errs.append(np.abs(one - two))
    return np.array(vals, dtype=LD), np.array(errs, dtype=LD)
