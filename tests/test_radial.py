"""Exact radial integration of homogeneous integrands (tensorprog/expect/radial.py).

E f(ξ) = E[ρ^p]·E f(ξ/‖ξ‖) for f positively homogeneous of degree p and ξ ~ N(0, I_D): batchnorm's
backward pass gives such integrands (degree −2), whose variance is infinite in few dimensions, so
that plain QMC has no trustworthy error bar."""
from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp

from tensorprog.expect.budget import DEFAULT
from tensorprog.expect.engine import expect
from tensorprog.expect.radial import homogeneous_degrees, on_the_sphere, radius_moment


@pytest.mark.parametrize("p,D", [(-2, 4), (-1, 3), (1, 5), (2, 3), (-2.5, 6)])
def test_radius_moments_against_monte_carlo(p, D):
    """E ρ^p for ρ ~ χ_D, against a seeded Monte Carlo with a 5-SE tolerance."""
    rho = np.linalg.norm(np.random.default_rng(1).standard_normal((400_000, D)), axis=1)
    sample = rho ** p
    se = sample.std() / math.sqrt(len(sample))
    assert abs(radius_moment(p, D) - sample.mean()) <= 5 * se
    assert radius_moment(-D, D) == float("inf")


def test_degrees_are_found_and_non_homogeneous_is_refused():
    def f(x, y, z):
        r2 = x * x + y * y + z * z
        return np.stack([x * x / r2 ** 2, np.maximum(x, 0) * y, (x + y) / np.sqrt(r2)])
    assert list(homogeneous_degrees(f, 3)) == [-2.0, 2.0, 0.0]
    assert homogeneous_degrees(lambda x, y, z: np.stack([np.tanh(x) * y]), 3) is None
    assert homogeneous_degrees(lambda x, y, z: np.stack([x * y + 1.0]), 3) is None
    assert on_the_sphere(lambda x, y, z: np.stack([(x + y) / np.sqrt(x * x + y * y + z * z)]), 3) is None


def test_a_heavy_tailed_degree_minus_two_integrand_is_exact_to_its_error():
    """E[x₁²/‖x‖⁴] over N(0, I₄) = E ρ⁻² · E θ₁² = 1/(D − 2) · 1/D = 1/8; the integrand's variance is
    infinite (E ρ⁻⁴ = ∞ for D = 4), its angular part is a polynomial on the sphere."""
    xs = sp.symbols("x1:5", real=True)
    r2 = sum(x ** 2 for x in xs)
    exact = expect(xs[0] ** 2 / r2 ** 2, xs, sp.eye(4), budget=DEFAULT)     # the block rule (blocks.py)
    assert exact.method == "exact" and exact.exact == sp.Rational(1, 8)
    est = expect(xs[0] ** 2 / r2 ** 2, xs, np.eye(4), exact=False, budget=DEFAULT)
    assert est.method in ("qmc", "quadrature") and not est.heavy_tail
    assert abs(est.value - 0.125) <= est.error
    assert est.error < 1e-5
