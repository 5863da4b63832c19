"""The numeric tape: sympy expression DAGs compiled to one flat list of numpy operations.

No ``eval``, ``exec``, ``sympify`` of strings nor ``lambdify``: expressions are walked as trees
(as DAGs: a node met again is not walked again) into a :class:`Tape`, a single-assignment list of
:class:`Op` over numbered *slots* — inputs first (one per symbol), then constants and results.
There is one operation vocabulary:

* folds of any number of arguments: ``add`` (its ``arg`` the signs ±1 of its terms when one is
  subtracted, else None), ``mul``, ``max``, ``min``;
* ``pow``: x**e for a number e (``arg``: a Fraction, or a float);
* ``fn``: a function head of :data:`HEADS_BY_NAME` by name (``"Pow"``: x**y);
* the Mehler series' operations (:data:`SERIES_FUNCTIONS`, :mod:`.mehler`): ``hermite`` packs one
  function's coefficients per variance (``arg``: a :class:`HermiteArg`), the others read them.

Building folds constants (an operation of constants only is a constant; the constants of a fold
become one, its last term), shares equal operations (the same kind and argument over the same
slots), turns a sum's −1·y term into a subtraction, and drops what no output needs.  Running a
tape (:meth:`Tape.__call__`) evaluates the operations in order on arrays (broadcasting), each
value released after its last use (:func:`last_uses`).  The grid tape (:mod:`.grid`) is a pass
over the same form: it sorts the slots into row, column and cell spaces and regroups the folds
by space.  :meth:`Tape.to_json` stores a tape as data (kinds, head names, numbers).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property, partial
from typing import Callable, Mapping, NamedTuple, Sequence

import numpy as np
import sympy as sp
from scipy import special as sps

from .bivariate import (Phi2, ScaledErfc, ScaledPhi2, ScaledPhi2Bound, phi2, scaled_erfc, scaled_phi2,
                        scaled_phi2_error)
from .heads import Delta, SYMPY_TO_NUMPY
from .hermite import PackCache
from .mehler import (HEAD_KINDS, SUMMED, HermiteRow, SumCache, T, diagonal_slope, mean_curve, mean_error,
                     mean_value, mehler_curve, mehler_error, mehler_slope, mehler_value)
from .mixed import MIXED_FUNCTIONS, MIXED_KINDS, MixedArg

# ---- function heads ------------------------------------------------------------------------------

#: Heads that closed forms of the expectation engine produce, beyond the builtins.
_EXTRA: dict[object, Callable] = {
    sp.asin: np.arcsin, sp.acos: np.arccos, sp.atan: np.arctan, sp.sinh: np.sinh,
    sp.cosh: np.cosh, sp.erfc: sps.erfc, sp.atan2: np.arctan2, sp.tan: np.tan,
    sp.Heaviside: np.heaviside,        # Heaviside(x, H0): d max(x, y)/dx = Heaviside(x − y, 1/2)
    Phi2: phi2,                        # the bivariate normal distribution function (ELU, SELU)
    ScaledPhi2: scaled_phi2, ScaledErfc: scaled_erfc,     # e^m·Φ₂, e^m·erfc (tilted quadrants of ELU, SELU)
    ScaledPhi2Bound: scaled_phi2_error,                   # ... and the bound stated for e^m·Φ₂
}


def _reduce(fn: Callable) -> Callable:
    """A binary numpy function folded over any number of arguments (for Min/Max)."""
    def call(*xs):
        out = xs[0]
        for x in xs[1:]:
            out = fn(out, x)
        return out
    return call


def head_function(func: object, nargs: int) -> Callable | None:
    """The numpy function for the sympy head ``func`` applied to ``nargs`` arguments (None if none)."""
    fn = SYMPY_TO_NUMPY.get(func) or _EXTRA.get(func)
    if fn is not None and func in (sp.Min, sp.Max) and nargs > 2:
        return _reduce(fn)
    return fn


def numpy_head(expr: sp.Basic) -> Callable:
    """The numpy function for a sympy function head, or a ValueError."""
    if expr.func is Delta:
        raise ValueError(f"the Dirac mass in {expr} cannot be evaluated pointwise "
                         "(it is only meaningful inside an expectation)")
    fn = head_function(expr.func, len(expr.args))
    if fn is None:
        raise ValueError(f"no numeric rule for the function {expr.func} in {expr}")
    return fn


#: the sympy heads with a numpy rule, by class name (what a stored tape names them by)
HEADS_BY_NAME: dict[str, object] = {f.__name__: f for f in (*SYMPY_TO_NUMPY, *_EXTRA)}


def as_expr(x: object) -> sp.Basic:
    """A sympy expression from a sympy object or a Python number (never a string)."""
    if isinstance(x, sp.Basic):
        return x
    if isinstance(x, (bool, str)) or not isinstance(x, (int, float)):
        raise TypeError(f"expected a sympy expression or a number, got {type(x).__name__}")
    return sp.Integer(x) if isinstance(x, int) else sp.Float(x)


def constant_value(expr: sp.Basic) -> float:
    """A symbol-free sympy number as a float (±inf for infinities)."""
    if expr in (sp.oo, sp.zoo):
        return float("inf")
    if expr == -sp.oo:
        return float("-inf")
    value = complex(expr.evalf(20))
    if value.imag != 0.0:
        raise ValueError(f"{expr} is not real")
    return value.real


# ---- the operation vocabulary --------------------------------------------------------------------

CONST, ROW, COL, CELL = 0, 1, 2, 3          # spaces, bit flags: ROW | COL = CELL (see .grid)
#: the folds (associative and commutative), and the neutral elements of add and mul
ASSOCIATIVE: dict[str, np.ufunc] = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}
NEUTRAL = {"add": 0.0, "mul": 1.0}


#: the Mehler series' operations (:mod:`.mehler`): a "hermite" row op packs one function's
#: coefficients per variance (never folded into a constant: its value is an array); the others
#: read packed rows and columns
SERIES_FUNCTIONS: dict[str, Callable] = {"mehler": mehler_value, "mehler_err": mehler_error,
                                         "mean": mean_value, "mean_err": mean_error,
                                         "mehler_slope": mehler_slope, "mehler_curve": mehler_curve,
                                         "mean_curve": mean_curve, "diagonal_slope": diagonal_slope}
SERIES_ARITY = {"hermite": 1, "mehler": 4, "mehler_err": 4, "mean": 1, "mean_err": 1,
                "mehler_slope": 3, "mehler_curve": 3, "mean_curve": 1, "diagonal_slope": 1,
                "mixed": 6, "mixed_err": 6}                   # the mixed rule's (:mod:`.mixed`)


class Op(NamedTuple):
    """One operation: ``out = kind(args)``; ``arg`` is the exponent of "pow" (a Fraction or
    float), the head name of "fn", the signs of an "add" (or None), a :class:`HermiteArg`."""
    kind: str                   # "add", "mul", "max", "min", "pow", "fn", or a series kind
    arg: object
    args: tuple[int, ...]
    out: int


@dataclass(frozen=True, eq=False)
class HermiteArg:
    """The argument of a "hermite" operation: φ as a one-input :class:`Tape` (of :data:`.mehler.T`),
    the order K and the trapezoidal step h (:func:`.hermite.pack`), and the tape's
    :class:`.hermite.PackCache` (its operations meet the same inputs' variances as rows and as
    columns)."""
    tape: "Tape"
    K: int
    h: float
    cache: PackCache = field(default_factory=PackCache, compare=False, repr=False)

    @cached_property
    def key(self) -> str:
        """φ's key in the cache: its tape as data."""
        return repr(self.tape.to_json())

    @cached_property
    def extended(self) -> bool:
        """Whether φ is evaluated in long double on long double points: where the tape computes it
        so from numbers it holds exactly (:func:`long_double`: the coefficients' extended precision,
        :func:`.hermite.evaluate`); else in float64 on every input."""
        return long_double(self.tape)

    def function(self, t: np.ndarray, memo: dict | None = None) -> np.ndarray:
        """φ at the points t, in their precision where :attr:`extended`, else in float64; ``memo``: the
        values of function heads at these long double points (:meth:`.hermite.PackCache.memo`: tanh,
        tanh², 1 − tanh² and (1 − tanh²)² at one layer's variances share one long double tanh; the plain rule's float64
        points likewise)."""
        if t.dtype == np.longdouble and self.extended:
            return self.tape(t, dtype=np.longdouble, memo=memo)[0]
        # float64 points: their heads' float64 values shared through the memo (the plain rule's
        # points, :func:`.hermite.plain_values`); never a long double point's memo (other values)
        return self.tape(t, memo=memo if t.dtype == np.float64 else None)[0]

    def __call__(self, a: np.ndarray, out=None) -> np.ndarray:
        return self.cache.packed(self.key, self.function, self.K, self.h, a)

    def to_json(self) -> list:
        return [self.tape.to_json(), self.K, self.h]


#: the heads whose numpy functions compute in long double on long double input, with constants that
#: are the numbers they stand for (not erf and gelu: scipy has no long double loop for them; not selu:
#: its λ and α are float64 roundings of their decimals; not Heaviside: it evaluates in float64)
LONG_DOUBLE_HEADS = frozenset({"Relu", "Step", "AbsF", "Sign", "tanh", "Sigmoid", "exp", "log", "sqrt", "sin",
                               "cos", "Softplus", "LeakyRelu", "Silu", "Elu", "Mish", "Softsign", "Min", "Max",
                               "Abs", "sign", "asin", "acos", "atan", "sinh", "cosh", "atan2", "tan", "Pow"})


def long_double(tape: "Tape") -> bool:
    """Whether ``tape`` evaluated on long double input computes its function in long double: every
    head in :data:`LONG_DOUBLE_HEADS`, every exponent an integer or ±1/2, and every constant a
    number of at most 40 significant bits (1, −1, 2, 0.5, …: the number written, where a rounding
    such as that of 1/3 or √2 fills all 53)."""
    for op in tape.ops:
        if op.kind == "fn" and op.arg not in LONG_DOUBLE_HEADS:
            return False
        if op.kind == "pow" and not (isinstance(op.arg, Fraction) and op.arg.denominator in (1, 2)):
            return False
        if op.kind in SERIES_ARITY:
            return False
    return all(np.isfinite(v) and float(np.ldexp(np.frexp(v)[0], 40)).is_integer() for v in tape.consts.values())


def operands(e: sp.Basic) -> tuple:
    """The arguments of ``e`` that are values (a HermiteRow's function, K and h are its operation's data)."""
    return e.args[:1] if isinstance(e, HermiteRow) else e.args


def function(op: Op) -> Callable:
    """The numpy computation of an operation, taking ``out=`` (an array of the result's shape to
    write it into, not among a fold's third and later arguments; or None)."""
    if op.kind == "hermite":
        return op.arg
    if op.kind in MIXED_FUNCTIONS:
        return partial(MIXED_FUNCTIONS[op.kind], arg=op.arg)
    if op.kind in SERIES_FUNCTIONS:
        fn = SERIES_FUNCTIONS[op.kind]
        return partial(fn, sums=op.arg) if op.kind in SUMMED and isinstance(op.arg, SumCache) else fn
    if op.kind == "add" and op.arg is not None:
        return np.subtract if len(op.arg) == 2 else fold_signed(op.arg)
    if op.kind in ASSOCIATIVE:
        return ASSOCIATIVE[op.kind] if len(op.args) == 2 else fold(ASSOCIATIVE[op.kind])
    if op.kind == "pow":
        return exponent_function(op.arg)
    if op.arg == "Pow":
        return np.power
    fn = head_function(HEADS_BY_NAME[op.arg], len(op.args))
    if isinstance(fn, np.ufunc) and fn.nin == len(op.args) and fn.nout == 1:
        return fn

    def into(*xs, out=None):
        got = fn(*xs)
        if out is None:
            return got
        np.copyto(out, got)
        return out
    return into


def in_place(acc: object, x: object) -> object:
    """``acc`` if a fold may write its next step into it (an array that x does not widen), else None."""
    if not isinstance(acc, np.ndarray):
        return None
    shape = np.shape(x)
    if shape == acc.shape or shape == () or np.broadcast_shapes(acc.shape, shape) == acc.shape:
        return acc
    return None


def fold(ufunc: np.ufunc) -> Callable:
    """x₁ ∘ x₂ ∘ … left to right, into ``out`` when given (an array of the result's shape that is
    not among x₃, x₄, …: it is written before they are read)."""
    def call(*xs, out=None):
        acc = ufunc(xs[0], xs[1], out=out)
        for x in xs[2:]:
            acc = ufunc(acc, x, out=in_place(acc, x))
        return acc
    return call


def fold_signed(signs: tuple[int, ...]) -> Callable:
    """x₁ ± x₂ ± … (``signs``, the first +1) left to right, into ``out`` as :func:`fold`."""
    steps = [np.add if sign > 0 else np.subtract for sign in signs[1:]]

    def call(*xs, out=None):
        acc = steps[0](xs[0], xs[1], out=out)
        for step, x in zip(steps[1:], xs[2:]):
            acc = step(acc, x, out=in_place(acc, x))
        return acc
    return call


def exponent_function(e: object) -> Callable:
    """x**e with the common exponents done exactly (x², 1/x, √x, 1/√x), into ``out`` when given."""
    if e == 2:
        return lambda x, out=None: np.multiply(x, x, out=out)
    if e == -1:
        return lambda x, out=None: np.divide(1.0, x, out=out)
    if e == Fraction(1, 2):
        return np.sqrt
    if e == Fraction(-1, 2):
        def inv_sqrt(x, out=None):
            root = np.sqrt(x, out=out)
            return np.divide(1.0, root, out=root if out is not None else None)
        return inv_sqrt
    if isinstance(e, Fraction) and e.denominator == 1:
        k = int(e)
        if k > 0:
            return lambda x, out=None: np.power(x, float(k), out=out)
        return lambda x, out=None: np.divide(1.0, np.power(x, float(-k), out=out), out=out)
    value = float(e)
    return lambda x, out=None: np.power(x, value, out=out)


# ---- the tape --------------------------------------------------------------------------------------

#: heads whose value is another head's times the argument, bit for bit as their own numpy function
#: computes it (silu's x·expit(x)): with a memo, the other head's value is shared (SiLU and SiLU′ at
#: one layer's variances evaluate one long double expit)
TIMES_HEAD = {"Silu": "Sigmoid"}


def memo_head(op: Op, fn: Callable, args: list, key: tuple, memo: dict) -> np.ndarray:
    """The value of the head ``op`` for :meth:`Tape.__call__`'s memo: through :data:`TIMES_HEAD` where it
    has an entry (the other head's value from the memo, or computed and kept there), else ``fn``."""
    other = TIMES_HEAD.get(op.arg)
    if other is None or len(args) != 1:
        return fn(*args)
    okey = (op.kind, repr(other), key[2])
    base = memo.get(okey)
    if base is None:
        base = memo[okey] = head_function(HEADS_BY_NAME[other], 1)(args[0])
    return args[0] * base


def last_uses(ops: Sequence[Op]) -> dict[int, int]:
    """Liveness: each slot's last reading operation, {slot: index in ``ops``}."""
    return {a: k for k, op in enumerate(ops) for a in op.args}


def live_ops(ops: Sequence[Op], outputs: Sequence[int]) -> list[Op]:
    """The operations some output needs, in order (the others are dropped)."""
    live = set(outputs)
    for op in reversed(ops):
        if op.out in live:
            live.update(op.args)
    return [op for op in ops if op.out in live]


class Tape:
    """A flat program computing several expressions of the same inputs (module doc): slots
    0 … ninputs − 1 are the inputs, ``consts`` the constant slots, ``ops`` write one new slot each,
    ``outputs`` are the slots of the expressions."""

    def __init__(self, ninputs: int, nslots: int, consts: Mapping[int, float], ops: Sequence[Op],
                 outputs: Sequence[int]) -> None:
        self.ninputs, self.nslots, self.consts = ninputs, nslots, dict(consts)
        self.ops, self.outputs = tuple(ops), tuple(outputs)

    @cached_property
    def functions(self) -> list[Callable]:
        """Each operation's numpy computation (:func:`function`)."""
        return [function(op) for op in self.ops]

    @cached_property
    def frees(self) -> list[tuple[int, ...]]:
        """The slots each operation reads for the last time (inputs, constants and outputs kept)."""
        last, kept = last_uses(self.ops), set(self.outputs)
        return [tuple(a for a in dict.fromkeys(op.args)
                      if last[a] == k and a not in kept and a >= self.ninputs and a not in self.consts)
                for k, op in enumerate(self.ops)]

    @classmethod
    def compile(cls, exprs: Sequence[sp.Basic], symbols: Sequence[sp.Symbol]) -> "Tape":
        """The tape of ``exprs``, whose inputs are ``symbols`` in order."""
        builder = Builder(symbols)
        return builder.build([builder.visit(as_expr(e)) for e in exprs])

    def __call__(self, *arrays: np.ndarray, dtype: type = float, memo: dict | None = None) -> list[np.ndarray]:
        """The values of the outputs, given one array per input (broadcasting), in ``dtype`` (float64,
        or np.longdouble: the constants stay float64 numbers, promoted where they meet the inputs).
        ``memo``: the values of function heads by what they compute from the inputs (:attr:`memo_keys`),
        for these same input arrays (its owner keys it by them), read and filled: the same numbers."""
        if len(arrays) != self.ninputs:
            raise ValueError(f"expected {self.ninputs} arrays, got {len(arrays)}")
        xs = [np.asarray(a, dtype=dtype) for a in arrays]
        shape = np.broadcast_shapes(*(x.shape for x in xs)) if xs else ()
        slots: dict[int, object] = dict(enumerate(xs))
        slots.update({k: np.float64(v) for k, v in self.consts.items()})
        with np.errstate(all="ignore"):
            for op, fn, free in zip(self.ops, self.functions, self.frees):
                if memo is not None and op.kind == "fn":
                    key = self.memo_keys[op.out]
                    got = memo.get(key)
                    if got is None:
                        got = memo[key] = memo_head(op, fn, [slots[a] for a in op.args], key, memo)
                    slots[op.out] = got
                else:
                    slots[op.out] = fn(*[slots[a] for a in op.args])
                for a in free:
                    del slots[a]
        return [np.broadcast_to(slots[o], shape).astype(dtype, copy=False) for o in self.outputs]

    @cached_property
    def memo_keys(self) -> dict[int, tuple]:
        """Per slot, what it computes from the inputs and constants, as nested tuples (("in", i),
        ("const", value), (kind, arg, argument keys)): equal keys, equal values on the same inputs,
        whichever tape computes them (the :meth:`__call__` memo)."""
        keys: dict[int, tuple] = {i: ("in", i) for i in range(self.ninputs)}
        keys.update({k: ("const", float(v)) for k, v in self.consts.items()})
        for op in self.ops:
            keys[op.out] = (op.kind, repr(op.arg), tuple(keys[a] for a in op.args))
        return keys

    def to_json(self) -> dict:
        """The tape as JSON data (numbers, kinds and head names; exponents as [p, q] or a float)."""
        return {"ninputs": self.ninputs, **tape_json(self.nslots, self.consts, self.ops, self.outputs)}

    @classmethod
    def from_json(cls, data: dict) -> "Tape":
        """The tape :meth:`to_json` stored (a ValueError if it is not one)."""
        try:
            ninputs = int(data["ninputs"])
            nslots, consts, ops, outputs = parse_tape(data, ninputs)
            return cls(ninputs, nslots, consts, ops, outputs)
        except (KeyError, TypeError, IndexError, ZeroDivisionError) as err:
            raise ValueError(f"not a stored tape: {err}") from None


def tape_json(nslots: int, consts: Mapping[int, float], ops: Sequence[Op], outputs: Sequence[int]) -> dict:
    """A tape's slots, constants, operations and outputs as JSON data."""
    def arg(op: Op) -> object:
        if isinstance(op.arg, (HermiteArg, MixedArg)):
            return op.arg.to_json()
        if op.kind in SERIES_FUNCTIONS:
            return None
        if isinstance(op.arg, Fraction):
            return [op.arg.numerator, op.arg.denominator]
        return list(op.arg) if isinstance(op.arg, tuple) else op.arg
    return {"nslots": nslots, "consts": [[k, v] for k, v in consts.items()],
            "ops": [[op.kind, arg(op), list(op.args), op.out] for op in ops], "outputs": list(outputs)}


def parse_tape(data: dict, ninputs: int) -> tuple[int, dict[int, float], list[Op], list[int]]:
    """(nslots, consts, ops, outputs) of :func:`tape_json`'s data, checked (:func:`check_slots`,
    :func:`check_arity`); a ValueError (or KeyError, TypeError, IndexError) if it is not one."""
    ops = []
    packs, sums = PackCache(), SumCache()          # the tape's own (series operations)
    mixed: dict[tuple, MixedArg] = {}
    for kind, arg, args, out in data["ops"]:
        if kind == "pow":
            arg = Fraction(int(arg[0]), int(arg[1])) if isinstance(arg, list) else float(arg)
        elif kind == "add":
            arg = None if arg is None else tuple(1 if int(a) > 0 else -1 for a in arg)
        elif kind == "hermite":
            arg = HermiteArg(Tape.from_json(arg[0]), int(arg[1]), float(arg[2]), packs)
        elif kind in SERIES_FUNCTIONS:
            arg = sums
        elif kind in MIXED_FUNCTIONS:
            key = (repr(arg[0]), repr(arg[1]))
            if key not in mixed:                   # the value and error operations share one
                mixed[key] = MixedArg(Tape.from_json(arg[0]), Tape.from_json(arg[1]), sums)
            arg = mixed[key]
        elif kind == "fn" and arg not in HEADS_BY_NAME and arg != "Pow":
            raise ValueError(f"unknown head {arg!r}")
        elif kind not in ASSOCIATIVE and kind != "fn" and kind not in SERIES_ARITY:
            raise ValueError(f"unknown operation {kind!r}")
        ops.append(Op(kind, arg, tuple(int(a) for a in args), int(out)))
    consts = {int(k): float(v) for k, v in data["consts"]}
    outputs = [int(o) for o in data["outputs"]]
    check_slots(ops, consts, ninputs, outputs)
    for op in ops:
        check_arity(op)
    return int(data["nslots"]), consts, ops, outputs


def check_slots(ops: Sequence[Op], consts: Mapping[int, float], ninputs: int, outputs: Sequence[int]) -> None:
    """A ValueError unless every operation reads slots written before it (inputs, constants,
    earlier operations) and writes a new one, and every output is written."""
    written = set(range(ninputs)) | set(consts)
    for op in ops:
        if not written.issuperset(op.args) or op.out in written:
            raise ValueError(f"operation {op} reads an unwritten slot or overwrites one")
        written.add(op.out)
    if not written.issuperset(outputs):
        raise ValueError("an output is never written")


def check_arity(op: Op) -> None:
    """A ValueError unless the operation has as many arguments as its kind takes."""
    n = len(op.args)
    if op.kind in SERIES_ARITY:
        ok = n == SERIES_ARITY[op.kind]
    elif op.kind == "pow":
        ok = n == 1
    elif op.kind in ASSOCIATIVE:
        ok = n >= 2 and (op.arg is None or len(op.arg) == n)
    elif op.arg == "Pow":
        ok = n == 2
    else:
        fn = head_function(HEADS_BY_NAME[op.arg], n)
        ok = fn is not None and (not isinstance(fn, np.ufunc) or fn.nin == n)
    if not ok:
        raise ValueError(f"operation {op} has the wrong number of arguments")


# ---- building -------------------------------------------------------------------------------------

class Emitter:
    """Appends operations to a tape under construction: equal operations shared, constants folded,
    folds regrouped by the slots' spaces (:mod:`.grid`; with every input in one space a fold is one
    operation, its constant last), −1·y known as a negation so that a sum around it subtracts y."""

    def __init__(self, spaces: Sequence[int]) -> None:
        self.ninputs = len(spaces)
        self.spaces: dict[int, int] = dict(enumerate(spaces))
        self.consts: dict[int, float] = {}
        self.ops: list[Op] = []
        self.seen: dict[tuple, int] = {}               # (kind, arg, args) -> slot (shared operations)
        self.negations: dict[int, int] = {}            # slot of −1·y -> slot of y
        self.nslots = self.ninputs

    def tape(self, outputs: Sequence[int]) -> tuple[int, dict[int, float], list[Op], list[int]]:
        """(nslots, consts, ops, outputs) with the operations no output needs dropped."""
        return self.nslots, self.consts, live_ops(self.ops, outputs), list(outputs)

    def constant(self, value: float) -> int:
        key = ("const", value, ())
        if key not in self.seen:
            self.seen[key] = k = self.new(CONST)
            self.consts[k] = value
        return self.seen[key]

    def new(self, space: int) -> int:
        self.spaces[self.nslots] = space
        self.nslots += 1
        return self.nslots - 1

    def signed(self, slot: int) -> tuple[int, int]:
        """(slot, +1), or (y, −1) for a slot that is the product −1·y (a sum subtracts y)."""
        return (self.negations[slot], -1) if slot in self.negations else (slot, 1)

    def nary(self, kind: str, terms: list[tuple[int, int]]) -> int:
        """A sum (terms with signs), product, max or min: constants folded into one, the row terms
        combined in row space and the column terms in column space (the constant joining one of
        them), then one cell operation over what is left."""
        spaces = self.spaces
        space = spaces[terms[0][0]] if terms else CONST
        if space != CONST and all(spaces[a] == space for a, _ in terms):     # nothing to regroup
            slot, sign = self.combine(kind, terms)
            return slot if sign > 0 else self.negate(slot)
        consts: list[float] = []
        by_space: dict[int, list[tuple[int, int]]] = {CELL: [], ROW: [], COL: []}
        for a, sign in terms:
            space = self.spaces[a]
            if space == CONST:
                consts.append(self.consts[a] * sign)
            else:
                by_space[space].append((a, sign))
        terms = [t for t in terms if self.spaces[t[0]] != CONST] if consts else terms
        constant = None
        if consts:
            ufunc = ASSOCIATIVE[kind]
            with np.errstate(all="ignore"):
                value = np.float64(consts[0])
                for c in consts[1:]:
                    value = ufunc(value, np.float64(c))
            if value != NEUTRAL.get(kind) or not terms:
                constant = (self.constant(float(value)), 1)
        if kind == "mul" and constant is not None and self.consts[constant[0]] == -1.0 and terms:
            positive = self.nary("mul", terms)
            slot = self.emit("mul", None, (positive, constant[0]))
            self.negations[slot] = positive
            return slot
        parts = by_space[CELL]
        for space in (ROW, COL):
            group = by_space[space]
            if constant is not None and group:
                group, constant = group + [constant], None
            parts += [self.combine(kind, group)] if len(group) > 1 else group
        if constant is not None:
            parts.append(constant)
        slot, sign = parts[0] if len(parts) == 1 else self.combine(kind, parts)
        return slot if sign > 0 else self.negate(slot)

    def negate(self, slot: int) -> int:
        """The slot of −1·y (y = ``slot``), known as a negation (a sum around it subtracts y)."""
        negative = self.emit("mul", None, (slot, self.constant(-1.0)))
        self.negations[negative] = slot
        return negative

    def combine(self, kind: str, terms: list[tuple[int, int]]) -> tuple[int, int]:
        """One operation over ``terms`` (a positive term first), as a term: (slot, +1), or
        (slot, −1) for a sum of negated terms only (computed as the sum of their negations' ys)."""
        if len(terms) == 1:
            return terms[0]
        if kind != "add" or all(sign > 0 for _, sign in terms):
            return self.emit(kind, None, tuple(a for a, _ in terms)), 1
        if all(sign < 0 for _, sign in terms):
            return self.combine(kind, [(a, 1) for a, _ in terms])[0], -1
        terms = sorted(terms, key=lambda t: t[1] < 0)          # stable: a positive term first
        return self.emit(kind, tuple(sign for _, sign in terms), tuple(a for a, _ in terms)), 1

    def emit(self, kind: str, arg: object, args: tuple[int, ...]) -> int:
        """The slot of ``kind(args)`` (an existing one if the same operation was made before); an
        operation of constants only is folded into a constant, except a "hermite" (its value is an
        array per variance: a row operation)."""
        key = (kind, arg, args)
        if key in self.seen:
            return self.seen[key]
        space = CONST
        for a in args:
            space |= self.spaces[a]
        if kind == "hermite" and space == CELL:
            raise ValueError("a variance of the series depends on the pair: not a row or column operation")
        if kind == "hermite" and space == CONST:
            space = ROW
        if space == CONST:
            fn = function(Op(kind, arg, args, -1))
            with np.errstate(all="ignore"):
                value = float(fn(*[np.float64(self.consts[a]) for a in args]))
            slot = self.constant(value)
        else:
            slot = self.new(space)
            self.ops.append(Op(kind, arg, args, slot))
        self.seen[key] = slot
        return slot


class Builder(Emitter):
    """Walks sympy expression DAGs onto a :class:`Tape` of the inputs ``symbols`` (all in one space)."""

    def __init__(self, symbols: Sequence[sp.Symbol]) -> None:
        symbols = tuple(symbols)
        if len(set(symbols)) != len(symbols):
            raise ValueError("a symbol is given twice")
        super().__init__([ROW] * len(symbols))
        self.symbols = symbols
        self.inputs: dict[sp.Symbol, int] = {s: k for k, s in enumerate(symbols)}
        self.memo: dict[int, tuple[sp.Basic, int]] = {}
        self.numbers: dict[sp.Basic, int] = {}         # number -> its constant slot
        self.number_ids: dict[int, tuple[sp.Basic, int]] = {}   # id(number) -> (number, its slot)
        self.hermite: dict[tuple, HermiteArg] = {}     # HermiteRow's (φ, K, h) -> its operation's argument
        self.phis: dict[sp.Lambda, Tape] = {}           # HermiteRow's φ -> its one-input tape
        self.packs, self.sums = PackCache(), SumCache()  # the series operations' caches (the tape's own)
        self.mixed: dict[tuple, MixedArg] = {}         # (φ, ψ) -> the mixed operations' argument

    def build(self, outputs: Sequence[int]) -> Tape:
        """The tape of the slots ``outputs`` (made by :meth:`visit`)."""
        return Tape(self.ninputs, *self.tape(outputs))

    def visit(self, root: sp.Basic, env: Mapping[sp.Symbol, int] | None = None,
              memo: dict[int, tuple[sp.Basic, int]] | None = None) -> int:
        """The slot of ``root`` (children first, without recursion: DAGs can be deep).  A symbol is
        ``env``'s slot for it if it has one, else an input's.  Nodes are remembered by identity in
        ``memo`` (the builder's own by default; one per ``env``) — comparing deep expressions for
        equality costs as much as walking them as trees — and equal subexpressions meet again as
        the same operation of the same slots (:meth:`emit`)."""
        memo = self.memo if memo is None else memo
        stack: list[tuple[sp.Basic, bool]] = [(root, False)]
        while stack:
            e, done = stack.pop()
            if id(e) in memo:
                continue
            if e.is_Symbol:
                memo[id(e)] = (e, self.symbol(e, env))     # the node is kept: its id stays its own
                continue
            args = operands(e)
            if not args or e.is_Number or e.is_NumberSymbol:
                memo[id(e)] = (e, self.number(e))
                continue
            if not done:
                stack.append((e, True))
                stack.extend([(a, False) for a in args if id(a) not in memo])
                continue
            memo[id(e)] = (e, self.operation(e, [memo[id(a)][1] for a in args]))
        return memo[id(root)][1]

    def hermite_arg(self, e: HermiteRow) -> HermiteArg:
        """The argument of a HermiteRow's operation: φ's one-input tape, compiled once per φ (the
        layers of a template pack one function at orders and steps of their own), K and h."""
        lam = e.args[1]
        if lam not in self.phis:
            self.phis[lam] = Tape.compile([e.spec[0]], [T])
        return HermiteArg(self.phis[lam], int(e.args[2]), float(e.args[3]), self.packs)

    def number(self, e: sp.Basic) -> int:
        """The constant slot of a number (its value found once per distinct number; a number met
        again as the same object, by identity: no sympy hash or comparison)."""
        got = self.number_ids.get(id(e))
        if got is not None:
            return got[1]
        if e not in self.numbers:
            self.numbers[e] = self.constant(constant_value(e))
        self.number_ids[id(e)] = (e, self.numbers[e])       # the node is kept: its id stays its own
        return self.numbers[e]

    def symbol(self, e: sp.Symbol, env: Mapping[sp.Symbol, int] | None) -> int:
        slot = env.get(e) if env is not None else None
        if slot is None:
            slot = self.inputs.get(e)
        if slot is None:
            raise ValueError(f"unknown symbol {e} (expected one of {self.symbols})")
        return slot

    def operation(self, e: sp.Basic, args: list[int]) -> int:
        """The slot of the node ``e`` over its arguments' slots ``args``."""
        if e.is_Add:
            return self.nary("add", [self.signed(a) for a in args])
        if e.is_Mul:
            return self.nary("mul", [(a, 1) for a in args])
        if isinstance(e, (sp.Max, sp.Min)):
            return self.nary("max" if isinstance(e, sp.Max) else "min", [(a, 1) for a in args])
        if e.is_Pow and e.exp.is_Number:
            exp = e.exp
            arg = Fraction(int(exp.p), int(exp.q)) if exp.is_Rational else float(exp)
            return self.emit("pow", arg, (args[0],))
        if e.is_Pow:
            return self.emit("fn", "Pow", tuple(args))
        if isinstance(e, HermiteRow):
            key = e.args[1:]                            # (φ, K, h): its spec, read once per spec
            if key not in self.hermite:
                self.hermite[key] = self.hermite_arg(e)
            return self.emit("hermite", self.hermite[key], tuple(args))
        if e.func in MIXED_KINDS:
            key = (e.args[0].spec[0], e.args[1].spec[0])
            if key not in self.mixed:
                self.mixed[key] = MixedArg(Tape.compile([key[0]], [T]), Tape.compile([key[1]], [T]), self.sums)
            return self.emit(MIXED_KINDS[e.func], self.mixed[key], tuple(args))
        if e.func in HEAD_KINDS:
            return self.emit(HEAD_KINDS[e.func], self.sums, tuple(args))
        if isinstance(e, sp.Function):
            numpy_head(e)                              # a ValueError for Dirac masses, unknown heads
            name = e.func.__name__
            if HEADS_BY_NAME.get(name) is not e.func:
                raise ValueError(f"no numeric rule for the function {e.func} in {e}")
            return self.emit("fn", name, tuple(args))
        raise ValueError(f"cannot evaluate {e!r} numerically")
