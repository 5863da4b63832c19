"""The Mehler coefficients' error against a 110-bit mpmath trapezoid (another step): the calibration of
tensorprog.symbolic.mehler.LD_COEFF_ROUNDING and the check that the stated δ covers.

    PYTHONPATH=. python bench/mehler_coefficients.py tanh,silu,dtanh2,silu2,dsilu 8,64 0.002,1.0,4.0

Per function, order K and variance: whether |α̃_k − α_k| ≤ δ + u|α̃_k| for every k (``cover``), the long
double coefficients' largest error and the stated δ in units of u_ld·√S (u_ld = 2⁻⁶⁴), the float64
coefficients' largest error in units of u·√S, and E φ²'s error and stated error in units of u_ld·S.
K = 512 takes minutes per variance (mpmath's Python loops).
"""
import sys
from pathlib import Path

import mpmath as mp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tensorprog.symbolic import mehler  # noqa: E402  (the long double rule itself: mehler._rule)
from tensorprog.symbolic.mehler import LD, UNIT, UNIT_LD, coefficients, step_for  # noqa: E402

mp.mp.prec = 110


def sig(x):
    """sigmoid in the input's precision, without overflow."""
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def mp_sig(t):
    return 1 / (1 + mp.exp(-t))


#: name -> (numpy φ, long double where its input is; mpmath φ)
FUN = {
    "tanh": (np.tanh, mp.tanh),
    "silu": (lambda t: t * sig(t), lambda t: t * mp_sig(t)),
    "tanh2": (lambda t: np.tanh(t) ** 2, lambda t: mp.tanh(t) ** 2),
    "dtanh": (lambda t: 1 - np.tanh(t) ** 2, lambda t: 1 - mp.tanh(t) ** 2),
    "dtanh2": (lambda t: (1 - np.tanh(t) ** 2) ** 2, lambda t: (1 - mp.tanh(t) ** 2) ** 2),
    "dsilu": (lambda t: sig(t) * (1 + t * (1 - sig(t))), lambda t: mp_sig(t) * (1 + t * (1 - mp_sig(t)))),
    "silu2": (lambda t: (t * sig(t)) ** 2, lambda t: (t * mp_sig(t)) ** 2),
}


def mp_coefficients(g, a: float, K: int, h: float) -> tuple[list, object]:
    """(α_0 … α_K, E φ²) of φ(√a z) by the trapezoidal rule of step h on [−14, 14] in mpmath."""
    n = int(14 / h) + 1
    sa, hh, c = mp.sqrt(mp.mpf(a)), mp.mpf(h), 1 / mp.sqrt(2 * mp.pi)
    out, S = [mp.mpf(0)] * (K + 1), mp.mpf(0)
    for i in range(-n, n + 1):
        z = hh * i
        f = g(sa * z)
        wf = hh * c * mp.exp(-z * z / 2) * f
        S += wf * f
        prev, cur = mp.mpf(0), mp.mpf(1)
        for k in range(K + 1):
            out[k] += wf * cur
            prev, cur = cur, (z * cur - mp.sqrt(k) * prev) / mp.sqrt(k + 1)
    return out, S


def exact(v) -> mp.mpf:
    """A long double as an mpmath number, exactly."""
    m, e = np.frexp(LD(v))
    return mp.mpf(int(np.ldexp(m, 64))) * mp.mpf(2) ** (int(e) - 64)


def main() -> None:
    names, orders = sys.argv[1].split(","), [int(k) for k in sys.argv[2].split(",")]
    a = np.array([float(v) for v in sys.argv[3].split(",")])
    for name in names:
        f, g = FUN[name]
        for K in orders:
            h = step_for(K, float(a.max()))
            c, r = coefficients(f, a, K, h), mehler._rule(f, a, K, h)
            for v in range(len(a)):
                ref, S = mp_coefficients(g, a[v], K, 0.8 * h)
                rs = float(mp.sqrt(S))
                ld_err = max(abs(exact(r.alpha[v, k]) - ref[k]) for k in range(K + 1))
                err64 = np.abs(c.alpha[v] - np.array([float(x) for x in ref]))
                cover = bool(np.all(err64 <= c.sup[v] + UNIT * np.abs(c.alpha[v])))
                print(name, K, a[v], "cover", cover,
                      "|α^ld−α|/(u_ld√S) %.1f δ/(u_ld√S) %.1f" % (float(ld_err) / (UNIT_LD * rs), c.sup[v] / (UNIT_LD * rs)),
                      "max|α̃−α|/(u√S) %.3f" % (err64.max() / (UNIT * rs)),
                      "S: err/(u_ld S) %.1f stated/(u_ld S) %.1f" % (float(abs(exact(r.square[v]) - S)) / (UNIT_LD * rs * rs),
                                                                     c.square_err[v] / (UNIT_LD * rs * rs)), flush=True)


if __name__ == "__main__":
    main()
