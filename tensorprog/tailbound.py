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
* phi_l and chi are built from the identity, relu, tanh, erf, sigmoid, softplus, leaky_relu(., a)
  with a >= 0, constants, +, −, * and / by constants and composition, vanish at 0 and are monotone
  (non-decreasing or non-increasing) — decided by syntactic rules on the expression, which also
  give the Lipschitz constant (an upper bound: exact for a single builtin times a constant).

Normalisation (the theorem has sigma_l = s = 1): A^l phi_l = (W_l / sigma_l)(sigma_l phi_l), so the
chain has lambda = max(max_l sigma_l Lip(phi_l), sqrt(c) Lip(chi)); a non-unit s enters as
v̊^0 = s^2 — the base case (4.46)-(4.51) is then exactly the conditional step (4.53)-(4.58) with the
deterministic variance s^2 for v^l.  Monotone non-increasing phi or chi are allowed because
A phi(g) = (−A)(−phi(g)) and −A has the law of A, so the chain's law is that of the
non-decreasing −phi.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from . import ir
from .errors import TPUsageError

#: the constants of Theorem 4.3.1
K_43 = math.sqrt(2.0 * (3.0 + 64.0 * math.exp(0.5)))
C0_43 = 8.0 * math.exp(-0.5)


class TailBoundUnsupported(TPUsageError):
    """The program (or the output asked for) is outside the class of Theorem 4.3.1."""


# ----------------------------------------------------------------------------- the function rules
#: builtin -> (Lipschitz constant, direction: +1 non-decreasing, value at 0)
_MONOTONE_BUILTINS = {
    "relu": (1.0, +1, 0.0),
    "tanh": (1.0, +1, 0.0),
    "erf": (2.0 / math.sqrt(math.pi), +1, 0.0),
    "sigmoid": (0.25, +1, 0.5),
    "softplus": (1.0, +1, math.log(2.0)),
}


@dataclass(frozen=True)
class _FnInfo:
    """What the rules know of a one-variable expression f(x)."""
    const: float | None      # f is this constant (None: f depends on x)
    lip: float               # a Lipschitz constant
    direction: int           # +1 non-decreasing, −1 non-increasing, 0 constant
    why: str | None = None   # set when f is outside the rules (not Lipschitz / not monotone)


def _bad(why: str) -> _FnInfo:
    return _FnInfo(None, math.inf, 0, why)


def _fn_info(fn: ir.Fn, var: int) -> _FnInfo:
    if isinstance(fn, ir.Const):
        return _FnInfo(float(fn.value), 0.0, 0)
    if isinstance(fn, ir.Ref):
        if fn.var != var:
            return _bad("depends on a second variable")
        return _FnInfo(None, 1.0, +1)
    if isinstance(fn, ir.Neg):
        a = _fn_info(fn.operand, var)
        if a.why:
            return a
        return _FnInfo(None if a.const is None else -a.const, a.lip, -a.direction)
    if isinstance(fn, ir.Call):
        args = [_fn_info(a, var) for a in fn.args]
        for a in args:
            if a.why:
                return a
        if all(a.const is not None for a in args):
            from .nonlin import BUILTINS
            value = float(BUILTINS[fn.name].numpy(*(np.float64(a.const) for a in args)))
            return _FnInfo(value, 0.0, 0)
        if fn.name in _MONOTONE_BUILTINS and len(args) == 1:
            lip, d, _ = _MONOTONE_BUILTINS[fn.name]
            return _FnInfo(None, lip * args[0].lip, d * args[0].direction)
        if fn.name == "leaky_relu" and args[1].const is not None and args[0].const is None:
            a = args[1].const
            if a < 0:
                return _bad(f"leaky_relu with a negative slope ({a:g}) is not monotone")
            return _FnInfo(None, max(1.0, a) * args[0].lip, args[0].direction)
        return _bad(f"{fn.name} is outside the rules (not Lipschitz, not monotone, or unknown)")
    # Bin
    a, b = _fn_info(fn.lhs, var), _fn_info(fn.rhs, var)
    for x in (a, b):
        if x.why:
            return x
    if a.const is not None and b.const is not None:
        ops = {"+": float.__add__, "-": float.__sub__, "*": float.__mul__,
               "/": float.__truediv__, "**": float.__pow__}
        try:
            return _FnInfo(ops[fn.op](a.const, b.const), 0.0, 0)
        except (ZeroDivisionError, OverflowError, ValueError):
            return _bad(f"a constant {fn.op} is undefined")
    if fn.op in "+-":
        s = 1 if fn.op == "+" else -1
        db = s * b.direction
        if a.direction and db and a.direction != db:
            return _bad("a sum of a non-decreasing and a non-increasing function need not be monotone")
        return _FnInfo(None, a.lip + b.lip, a.direction or db)
    if fn.op == "*":
        c, f = (a.const, b) if a.const is not None else (b.const, a)
        if c is None:
            return _bad("a product of two functions of the vector need not be Lipschitz")
        return _FnInfo(None, abs(c) * f.lip, 0 if c == 0 else (1 if c > 0 else -1) * f.direction)
    if fn.op == "/":
        if b.const is None:
            return _bad("division by a function of the vector")
        if b.const == 0:
            return _bad("division by zero")
        return _FnInfo(None, a.lip / abs(b.const), (1 if b.const > 0 else -1) * a.direction)
    if fn.op == "**" and b.const == 1.0:
        return a
    return _bad("a power of the vector is not Lipschitz")


def _numpy_fn(fn: ir.Fn) -> Callable[[np.ndarray], np.ndarray]:
    from .execute import eval_fn

    def f(x):
        x = np.asarray(x, dtype=float)
        return np.broadcast_to(np.asarray(eval_fn(fn, lambda _v: x), dtype=float), x.shape)
    return f


# ----------------------------------------------------------------------------- the chain
@dataclass
class Chain:
    """An output of Theorem 4.3.1's class, reduced to the theorem's normalisation.

    Levels are numbered as in the thesis: g^1 is the initial vector, the output is c^L.
    ``vhat[l]`` is v̊^l for l = 0..L−1 (v̊^0 = s^2, v̊^l = sigma_l^2 E phi_l(g^l)^2 = Var g^{l+1})."""
    file: str
    output: str
    depth: int
    s2: float
    sigma2: list[float]                  # sigma_l^2 for l = 1..L−1
    phi_lips: list[float]                # Lip(phi_l)
    chi_lip: float                       # Lip(sqrt(c)·chi)
    lam: float                           # lambda used in the bound
    lam_rules: float                     # lambda given by the rules
    vhat: list[float]
    limit: float                         # c̊^L by 1-D quadrature (independent of the compiler)
    notes: list[str] = field(default_factory=list)
    _phis: list[Callable] = field(default_factory=list, repr=False)
    _chi: Callable | None = field(default=None, repr=False)

    def C2(self, tau: float, level: int | None = None) -> float:
        """C_2^l(tau) by the recursion (4.41)-(4.42), at l = ``level`` (default L)."""
        level = self.depth if level is None else level
        lam2 = self.lam ** 2
        if level == 1:
            return lam2 * self.vhat[0] * K_43
        prev = level - 1
        return lam2 * self.C2(tau / lam2, prev) + lam2 * (self.vhat[prev] + tau / lam2) * K_43

    def C2_closed(self, tau: float, level: int | None = None) -> float:
        """The unrolled C_2^l(tau) (same value as :meth:`C2`)."""
        L = self.depth if level is None else level
        lam2 = self.lam ** 2
        s = sum(lam2 ** (L - j) * self.vhat[j] for j in range(L))
        return K_43 * (s + (L - 1) * tau)

    def bound(self, n: float, tau: float, two_sided: bool = True, level: int | None = None) -> float:
        """The right side of (4.40) for P(c − c̊ > tau) (doubled for P(|c − c̊| > tau)); unclipped."""
        if not (tau > 0):
            raise TPUsageError(f"the deviation t must be > 0, not {tau!r}")
        if not (n >= 1):
            raise TPUsageError(f"the width n must be >= 1, not {n!r}")
        L = self.depth if level is None else level
        one = L * (math.exp(-n * (tau / self.C2(tau, L)) ** 2) + n * math.exp(-C0_43 * n))
        return 2.0 * one if two_sided else one

    def required_width(self, tau: float, delta: float, two_sided: bool = True) -> int:
        """The least width n at which the bound is <= delta."""
        if not (0 < delta):
            raise TPUsageError(f"delta must be > 0, not {delta!r}")
        lo, hi = 1, 2
        while self.bound(hi, tau, two_sided) > delta:
            lo, hi = hi, hi * 2
            if hi > 1e18:
                return -1
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.bound(mid, tau, two_sided) > delta:
                lo = mid
            else:
                hi = mid
        return hi

    def describe(self) -> str:
        lines = [f"{self.file}: output {self.output!r} is c^{self.depth} of Theorem 4.3.1's class",
                 f"  g^1 ~ N(0, {self.s2:g}); sigma_l^2 = {[round(x, 6) for x in self.sigma2]}; "
                 f"Lip(phi_l) = {[round(x, 6) for x in self.phi_lips]}; Lip(chi) = {self.chi_lip:.6g}",
                 f"  lambda = {self.lam:.6g} (rules: {self.lam_rules:.6g}); "
                 f"v̊^0..v̊^{self.depth - 1} = {[round(x, 6) for x in self.vhat]}; c̊ = {self.limit:.6g}",
                 f"  K = {K_43:.6g}, C_0 = {C0_43:.6g}, B^L = {self.depth}"]
        return "\n".join(lines + [f"  note: {x}" for x in self.notes])


def _refuse(program: ir.Program, e, why: str) -> TailBoundUnsupported:
    pos = getattr(e, "pos", None)
    return TailBoundUnsupported(f"outside Theorem 4.3.1's class (thesis eq. 4.39): {why}",
                                pos.line if pos else 0, pos.col if pos else 0,
                                program.file, program.source)


def _expand(program: ir.Program, fn: ir.Fn) -> ir.Fn:
    """Inline Nonlin definitions, down to MatMuls, initial vectors and scalars."""
    if isinstance(fn, ir.Ref):
        e = program.eqns[fn.var]
        return _expand(program, e.fn) if isinstance(e, ir.Nonlin) else fn
    if isinstance(fn, ir.Call):
        return ir.Call(fn.name, tuple(_expand(program, a) for a in fn.args))
    if isinstance(fn, ir.Bin):
        return ir.Bin(fn.op, _expand(program, fn.lhs), _expand(program, fn.rhs))
    if isinstance(fn, ir.Neg):
        return ir.Neg(_expand(program, fn.operand))
    return fn


def _single_base(program: ir.Program, fn: ir.Fn, e, what: str) -> int:
    bases = ir.refs(fn)
    scalars = [v for v in bases if isinstance(program.eqns[v], ir.SCALAR_OPS)]
    if scalars:
        raise _refuse(program, e, f"{what} depends on a scalar of the program (%{scalars[0]}); "
                      "the class has nonlinearities of the last vector only")
    if len(bases) != 1:
        raise _refuse(program, e, f"{what} must be a function of exactly one vector, "
                      f"not of {len(bases)}")
    return bases[0]


def _checked_info(program, e, fn, var, what) -> _FnInfo:
    info = _fn_info(fn, var)
    if info.why:
        raise _refuse(program, e, f"{what}: {info.why}")
    if info.const is not None or info.direction == 0:
        raise _refuse(program, e, f"{what} is constant")
    f0 = float(_numpy_fn(fn)(np.zeros(1))[0])
    if abs(f0) > 1e-12:
        raise _refuse(program, e, f"{what} must vanish at 0 (it is {f0:g})")
    return info


def _output_moment(program: ir.Program, output: str):
    outs = {o.name: o for o in program.outputs}
    if output not in outs:
        raise TPUsageError(f"no output named {output!r} (outputs: {', '.join(outs)})", file=program.file)
    e = program.eqns[outs[output].var]
    scale = 1.0
    if isinstance(e, ir.Scalar):
        fn = e.fn
        if isinstance(fn, ir.Bin) and fn.op == "*" and isinstance(fn.lhs, ir.Const) and isinstance(fn.rhs, ir.Ref):
            scale, ref = fn.lhs.value, fn.rhs.var
        elif isinstance(fn, ir.Bin) and fn.op == "*" and isinstance(fn.rhs, ir.Const) and isinstance(fn.lhs, ir.Ref):
            scale, ref = fn.rhs.value, fn.lhs.var
        elif isinstance(fn, ir.Bin) and fn.op == "/" and isinstance(fn.rhs, ir.Const) and isinstance(fn.lhs, ir.Ref):
            if fn.rhs.value == 0:
                raise _refuse(program, e, "the output divides by zero")
            scale, ref = 1.0 / fn.rhs.value, fn.lhs.var
        elif isinstance(fn, ir.Ref):
            ref = fn.var
        else:
            raise _refuse(program, e, "the output must be mean(chi(g) ** 2), possibly times a positive constant")
        if not scale > 0:
            raise _refuse(program, e, f"the constant factor of the output must be > 0 (it is {scale:g})")
        e = program.eqns[ref]
    if not isinstance(e, ir.Moment):
        raise _refuse(program, e, "the output must be mean(chi(g) ** 2), possibly times a positive constant")
    fn = _expand(program, e.fn)
    if isinstance(fn, ir.Bin) and fn.op == "**" and isinstance(fn.rhs, ir.Const) and fn.rhs.value == 2.0:
        chi = fn.lhs
    elif isinstance(fn, ir.Bin) and fn.op == "*" and fn.lhs == fn.rhs:
        chi = fn.lhs
    else:
        raise _refuse(program, e, f"the Moment must be mean(chi(g) ** 2) (psi = chi^2 of eq. 4.39), "
                      f"not mean({ir.show_fn(e.fn)})")
    return e, chi, scale


def _gauss_second_moment(f: Callable, q: float) -> float:
    """E f(sqrt(q) z)^2, z ~ N(0, 1), by adaptive quadrature (kinks at 0 handled)."""
    from scipy import integrate
    sd = math.sqrt(q)

    def integrand(z):
        return float(f(np.array([sd * z]))[0] ** 2) * math.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
    total = 0.0
    for a, b in [(-40.0, -8.0), (-8.0, 0.0), (0.0, 8.0), (8.0, 40.0)]:
        val, _ = integrate.quad(integrand, a, b, limit=200, epsabs=1e-13, epsrel=1e-11)
        total += val
    return total


def analyze(program, output: str, lam: float | None = None, matrix_dist: str | None = None) -> Chain:
    """Check that ``output`` of ``program`` (a ``tensorprog.Program`` or its IR) is in Theorem
    4.3.1's class and compute the bound's constants; raise :class:`TailBoundUnsupported` if not."""
    prog: ir.Program = getattr(program, "ir", program)
    if matrix_dist not in (None, "normal"):
        raise TailBoundUnsupported(
            f"outside Theorem 4.3.1's class: the proof needs Gaussian matrices (A^l phi(g^l) is exactly "
            f"Gaussian given g^l), not matrix_dist={matrix_dist!r}", file=prog.file)
    moment, chi_fn, scale = _output_moment(prog, output)
    g = _single_base(prog, chi_fn, moment, "chi")
    chi_info = _checked_info(prog, moment, chi_fn, g, "chi")
    if getattr(prog.eqns[g], "width", "n") != "n":
        raise _refuse(prog, prog.eqns[g], "every vector must have the width n (no dim)")

    phis: list[tuple] = []       # (phi, g^l var, its equation, sigma_l^2, Lip phi), output back to g^1
    used: set[int] = set()
    while isinstance(prog.eqns[g], ir.MatMul):
        mm = prog.eqns[g]
        W = prog.eqns[mm.matrix]
        if mm.transposed:
            raise _refuse(prog, mm, "a transposed matrix (the class has forward passes only)")
        if mm.matrix in used:
            raise _refuse(prog, mm, f"matrix {W.name} is used twice in the chain (the class needs a fresh "
                          "matrix at every step)")
        used.add(mm.matrix)
        if W.rows != "n" or W.cols != "n":
            raise _refuse(prog, W, f"matrix {W.name} must be n x n")
        if W.dist.family != "normal":
            raise _refuse(prog, W, f"matrix {W.name} has law {W.dist.family}; the proof needs Gaussian "
                          "matrices (A^l phi(g^l) exactly Gaussian given g^l)")
        arg = prog.eqns[mm.arg]
        phi_fn = _expand(prog, ir.Ref(mm.arg))
        prev = _single_base(prog, phi_fn, arg, "phi")
        info = _checked_info(prog, arg, phi_fn, prev, "phi")
        phis.append((phi_fn, prev, arg, W.dist.var, info.lip))
        g = prev
    init = prog.eqns[g]
    if not isinstance(init, ir.InitVector):
        raise _refuse(prog, init, "the chain must start at an initial vector")
    group = prog.groups[init.group]
    dist = group.dist
    if dist.family != "normal":
        raise _refuse(prog, init, f"g^1 has law {dist.family}; the class has g^1 ~ N(0, 1)")
    if dist.mean is not None and abs(dist.mean[init.member]) > 0:
        raise _refuse(prog, init, "g^1 must have mean 0")
    s2 = float(dist.cov[init.member][init.member]) if dist.cov is not None else float(dist.var)

    phis.reverse()                                     # l = 1..L−1
    depth = len(phis) + 1
    sigma2 = [p[3] for p in phis]
    phi_lips = [p[4] for p in phis]
    chi_lip = math.sqrt(scale) * chi_info.lip
    lam_rules = max([math.sqrt(s) * lp for s, lp in zip(sigma2, phi_lips)] + [chi_lip])
    notes = []
    if lam is None:
        lam_used = lam_rules
    else:
        if not (lam > 0 and math.isfinite(lam)):
            raise TPUsageError(f"lambda must be a finite number > 0, not {lam!r}", file=prog.file)
        lam_used = float(lam)
        if lam_used < lam_rules:
            notes.append(f"lambda = {lam_used:g} was given by the caller, below the rules' {lam_rules:g}: "
                         "the bound holds only if it is a Lipschitz constant of every sigma_l phi_l and chi")
    if abs(s2 - 1.0) > 1e-12:
        notes.append(f"g^1 has variance {s2:g}: v̊^0 = {s2:g} in C_2^1 (the thesis has 1)")
    phi_np = [_numpy_fn(p[0]) for p in phis]
    chi_np = _numpy_fn(chi_fn)
    q = s2
    vhat = [s2]
    for l in range(depth - 1):
        q = sigma2[l] * _gauss_second_moment(phi_np[l], q)
        vhat.append(q)
    vhat = vhat[:depth]                                 # v̊^0..v̊^{L−1}
    limit = scale * _gauss_second_moment(chi_np, q)
    return Chain(prog.file, output, depth, s2, sigma2, phi_lips, chi_lip, lam_used, lam_rules,
                 vhat, limit, notes, phi_np, chi_np)


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
        limit = program.compile().limit().outputs[output].value
    r = program.execute(n=n, trials=trials, seed=seed, matrix_dist=matrix_dist)
    values = np.asarray(r.outputs[output].values, dtype=float)
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
    limit = program.compile().limit().outputs[output].value
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


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tensorprog.tailbound FILE --output c --widths 64,256 --t 0.05,0.1 --trials 400``"""
    import argparse
    import sys
    from .program import load
    from .errors import TPError
    ap = argparse.ArgumentParser(prog="python -m tensorprog.tailbound",
                                 description="Theorem 4.3.1's tail bound (Golikov's thesis, ch. 4) "
                                             "against the empirical tail at finite width.")
    ap.add_argument("file")
    ap.add_argument("--output", required=True)
    ap.add_argument("--widths", default="64,256,1024")
    ap.add_argument("--t", default="0.05,0.1,0.2")
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lam", type=float, default=None)
    ap.add_argument("-D", action="append", default=[], metavar="NAME=VALUE")
    a = ap.parse_args(argv)
    try:
        params = {}
        for d in a.D:
            k, _, v = d.partition("=")
            params[k] = float(v)
        p = load(a.file, **params)
        widths = [int(x) for x in a.widths.split(",")]
        ts = [float(x) for x in a.t.split(",")]
        chain = analyze(p, a.output, a.lam)
        rows = compare(p, a.output, widths, ts, a.trials, a.seed, a.lam)
    except TPError as err:
        print(err, file=sys.stderr)
        return 2
    print(render_rows(chain, rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
