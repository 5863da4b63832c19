"""Recognising Theorem 4.3.1's class (Golikov's thesis, eq. 4.39) in a program, and its constants.

The output must be c^L = mean(chi(g^L) ** 2) (times a positive constant, absorbed into chi),
reached by g^{l+1} = W_l @ phi_l(g^l) from one initial vector g^1 ~ N(0, s^2), each W_l a fresh
n x n ``normal(var=sigma_l^2)`` matrix used once, never transposed; phi_l and chi pass the
rules of :mod:`.rules`.  Anything else raises :class:`TailBoundUnsupported` at the
offending equation.

Normalisation (the theorem has sigma_l = s = 1): A^l phi_l = (W_l / sigma_l)(sigma_l phi_l), so
lambda = max(max_l sigma_l Lip(phi_l), sqrt(c) Lip(chi)) and v̊^0 = s^2.  The limits are
computed by 1-D quadrature, independently of the compiler:

    v̊^l = sigma_l^2 E phi_l(sqrt(v̊^{l−1}) z)^2,   c̊^L = c E chi(sqrt(v̊^{L−1}) z)^2,   z ~ N(0, 1).
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ... import ir
from ...distributions import FAMILIES
from ...errors import TPUsageError
from .chain import Chain
from .rules import FnInfo, fn_info, numpy_fn


class TailBoundUnsupported(TPUsageError):
    """The program (or the output asked for) is outside the class of Theorem 4.3.1."""


def _refuse(program: ir.Program, e, why: str) -> TailBoundUnsupported:
    pos = getattr(e, "pos", None)
    return TailBoundUnsupported(f"outside Theorem 4.3.1's class (thesis eq. 4.39): {why}",
                                pos.line if pos else 0, pos.col if pos else 0,
                                program.file, program.source)


def _expand(program: ir.Program, fn: ir.Fn) -> ir.Fn:
    """Inline Nonlin definitions, down to MatMuls, initial vectors and scalars: each
    ``Ref`` to a Nonlin becomes its (expanded) function, once per variable."""
    expanded: dict[int, ir.Fn] = {}

    def inline(ref: ir.Ref) -> ir.Fn:
        e = program.eqns[ref.var]
        if not isinstance(e, ir.Nonlin):
            return ref
        if ref.var not in expanded:
            expanded[ref.var] = ir.map_refs(e.fn, inline)
        return expanded[ref.var]
    return ir.map_refs(fn, inline)


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


def _checked_info(program, e, fn, var, what) -> FnInfo:
    info = fn_info(fn, var)
    if info.why:
        raise _refuse(program, e, f"{what}: {info.why}")
    if info.const is not None or info.direction == 0:
        raise _refuse(program, e, f"{what} is constant")
    f0 = float(numpy_fn(fn)(np.zeros(1))[0])
    if abs(f0) > 1e-12:
        raise _refuse(program, e, f"{what} must vanish at 0 (it is {f0:g})")
    return info


NOT_THE_OUTPUT = "the output must be mean(chi(g) ** 2), possibly times a positive constant"


def _scaled_ref(program: ir.Program, e: ir.Scalar) -> tuple[float, int]:
    """(c, v) of a Scalar output c · %v, %v · c, %v / c or %v."""
    fn = e.fn
    if isinstance(fn, ir.Ref):
        return 1.0, fn.var
    if not isinstance(fn, ir.Bin):
        raise _refuse(program, e, NOT_THE_OUTPUT)
    lhs, rhs = fn.lhs, fn.rhs
    if fn.op == "*" and isinstance(lhs, ir.Const) and isinstance(rhs, ir.Ref):
        return lhs.value, rhs.var
    if fn.op == "*" and isinstance(rhs, ir.Const) and isinstance(lhs, ir.Ref):
        return rhs.value, lhs.var
    if fn.op == "/" and isinstance(rhs, ir.Const) and isinstance(lhs, ir.Ref):
        if rhs.value == 0:
            raise _refuse(program, e, "the output divides by zero")
        return 1.0 / rhs.value, lhs.var
    raise _refuse(program, e, NOT_THE_OUTPUT)


def _chi(fn: ir.Fn) -> ir.Fn | None:
    """chi of psi = chi ** 2 or chi * chi (None if psi is neither)."""
    if isinstance(fn, ir.Bin) and fn.op == "**" and isinstance(fn.rhs, ir.Const) and fn.rhs.value == 2.0:
        return fn.lhs
    if isinstance(fn, ir.Bin) and fn.op == "*" and fn.lhs == fn.rhs:
        return fn.lhs
    return None


def _output_moment(program: ir.Program, output: str):
    """The Moment mean(chi(g) ** 2) of ``output``, chi, and the output's constant factor."""
    outs = {o.name: o for o in program.outputs}
    if output not in outs:
        raise TPUsageError(f"no output named {output!r} (outputs: {', '.join(outs)})", file=program.file)
    e = program.eqns[outs[output].var]
    scale = 1.0
    if isinstance(e, ir.Scalar):
        scale, ref = _scaled_ref(program, e)
        if not scale > 0:
            raise _refuse(program, e, f"the constant factor of the output must be > 0 (it is {scale:g})")
        e = program.eqns[ref]
    if not isinstance(e, ir.Moment):
        raise _refuse(program, e, NOT_THE_OUTPUT)
    chi = _chi(_expand(program, e.fn))
    if chi is None:
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
    if matrix_dist is not None and not (matrix_dist in FAMILIES and FAMILIES[matrix_dist].gaussian):
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
        if not W.dist.law.gaussian:
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
    if not dist.law.gaussian:
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
    phi_np = [numpy_fn(p[0]) for p in phis]
    chi_np = numpy_fn(chi_fn)
    q = s2
    vhat = [s2]
    for l in range(depth - 1):
        q = sigma2[l] * _gauss_second_moment(phi_np[l], q)
        vhat.append(q)
    vhat = vhat[:depth]                                 # v̊^0..v̊^{L−1}
    limit = scale * _gauss_second_moment(chi_np, q)
    return Chain(prog.file, output, depth, s2, sigma2, phi_lips, chi_lip, lam_used, lam_rules,
                 vhat, limit, notes, phi_np, chi_np)

