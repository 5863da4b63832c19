"""The builtin heads' sympy assumptions (symbolic/heads.py): real at real arguments and finite at
finite real ones (as sympy's own tanh), unknown elsewhere; and the Hermite basis and the series'
truncation tails that the cold kernel call computes faster give the same bits as the formulas."""
import numpy as np
import sympy as sp

from tensorprog.builtins import BUILTINS
from tensorprog.symbolic.heads import HEADS, Delta
from tensorprog.symbolic.hermite import coefficients, hermite_basis, ld_rows


def own_heads():
    return [(name, HEADS[name]) for name, b in BUILTINS.items() if not isinstance(b.head, str)]


def test_heads_real_and_finite_at_real_arguments():
    x = sp.Symbol("x", real=True)
    z = sp.Symbol("z")                                   # no assumptions: could be complex
    assert own_heads()
    for name, head in own_heads():
        args = (x,) + (sp.Rational(1, 3),) * (BUILTINS[name].arity - 1)
        e = head(*args)
        if not isinstance(e, head):                      # folded to another expression: not ours to test
            continue
        assert e.is_extended_real is True and e.is_real is True and e.is_finite is True, name
        w = head(*((z,) + args[1:]))
        assert w.is_extended_real is None and w.is_finite is None, name
    assert Delta(x).is_finite is None                    # the Dirac mass is not finite anywhere near 0


def test_hermite_basis_recurrence_bits():
    """In long double, G[k+1] = (z·G[k] − √k·G[k−1])/√(k+1), each step as numpy rounds it on fresh
    arrays (:func:`ld_rows` does it in place); :func:`hermite_basis` is its rounding to float64."""
    LD = np.longdouble
    for K, h in ((0, 0.05), (1, 0.05), (9, 0.0379), (64, 0.031)):
        z, G = ld_rows.__wrapped__(K, h)
        sw = np.sqrt(LD(h) * np.exp(-z * z / 2) / np.sqrt(2 * np.arccos(LD(-1))))
        want = [sw, z * sw][:K + 1]
        for k in range(1, K):
            want.append((z * want[k] - np.sqrt(LD(k)) * want[k - 1]) / np.sqrt(LD(k + 1)))
        assert np.array_equal(G, np.array(want)), (K, h)
        z64, G64 = hermite_basis.__wrapped__(K, h)
        assert np.array_equal(G64, G[:K + 1].astype(float)) and np.array_equal(z64, z.astype(float))


def test_tail_at_is_the_truncated_tail():
    c = coefficients(np.tanh, np.array([0.3, 1.0, 2.5]), 64)
    for K in (8, 16, 32, 63):
        assert np.array_equal(c.tail_at(K), c.truncate(K).tail)
        assert not np.array_equal(c.tail_at(K), c.tail)   # the dropped coefficients count
