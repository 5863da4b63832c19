"""The limit kernels of a band of rows of the upper triangle, block by block.

Pair (i, j), i ≤ j, starts the template from the covariance s·[[q_ii, q_ij], [q_ij, q_jj]] + b
(q = X Xᵀ / d).  Its pairs fall into singularity classes — x ≡ y (correlation 1 and equal norms,
i = j among them), x ≡ −y (correlation −1, equal norms), parallel (correlation ±1, unequal norms:
y = λx) and the rest — each compiled as its own batch, so that the exact singular structure
reaches the closed forms (:func:`classes`); parallel pairs are compiled one at a time (a batch
would see their correlation of 1 only to rounding, where the closed forms lose half their digits).

Where every expectation of the template has a closed form, the batch compile of a class is
recorded once (on a few of its pairs) and replayed (:mod:`..limit.replay`): a grid tape whose
per-input work runs once per input.  A band of rows [r0, r1) is then cut into blocks of
:data:`ROW_BLOCK` × :data:`COL_BLOCK` entries (i in the block's rows, j ≥ r0 in its columns;
as many entries in wider blocks when the band has fewer rows, and in taller ones where the
triangle's rows have fewer columns: :func:`band_blocks`);
each block computes its Gram entries, classifies them, and replays the rest-class record on the
whole block at once (rows' variances as an (R, 1) column, columns' as a (1, C) row); a series
record's diagonal part gives the cells (i, i) from the band's rows (no x ≡ y compile).  Entries of
the other classes — and those where the record does not hold, entry by entry — are gathered and
done after, by their class's replay on the list of pairs, or by the batch compile itself.  Blocks run one
after the other: a block's tape is a few hundred numpy calls of ~10 µs, and two threads contend for
the GIL between them (measured on 2 cores: 0.073 s for one thread, 0.104 s for two, ReLU depth 10,
N = 1000); clusters spread tiles over Dask workers instead.  Templates that cannot be replayed (quadrature, QMC) compile
one batch per class over the band's pairs.

Every entry is computed by the same operations whichever band, block or process it falls in:
the Gram entries are summed in one fixed order, in extended precision (:func:`accurate_dot`), and the tapes are the same
(recorded once per template and class, kept in memory and on disk: :mod:`..limit.replay_store`);
so a kernel computed tile by tile, out of core or on a cluster, has the bits of the in-memory one.
Below the diagonal, the band's leading square holds unused values (the caller mirrors the
upper triangle).
"""
from __future__ import annotations

import dataclasses
import hashlib
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from .. import ir
from ..errors import TPUsageError
from ..expect.budget import Budget
from ..limit.accuracy import METHOD_RANK
from ..limit.compiler import compile_program
from ..limit.replay import Replay, record
from ..limit.replay_store import Recorded, ReplayStore, warn
from ..symbolic.grid import Workspace
from .caches import MISSING, Memo, ReplayCache

#: rows and columns of a block (≤ 32 K entries: a tape's working arrays stay in cache)
ROW_BLOCK = 32
COL_BLOCK = 1024
#: columns of a block of a series replay where every block spans its rows' columns (N ≤ COL_BLOCK):
#: its Mehler sums loop over their orders in Python (thousands of numpy calls a block, not hundreds),
#: so fewer, larger blocks (≤ 48 K entries) — SiLU and tanh depth 10 replay 5–9 % faster; an exact
#: tape's cheap cell operations (ReLU, GELU) were 5 % slower so, and keep COL_BLOCK
SERIES_COL_BLOCK = 1536
#: pairs of a class on which a replay is recorded
RECORD_PAIRS = 48
#: a class of fewer distinct pairs than this (and no replay of it kept) is compiled pair by pair, not
#: recorded: a record on one pair folds its covariance to constants and holds nowhere else, and two
#: compiles cost less than a record's compile, its recording and its replay (SiLU depth 10, N = 2:
#: 1.05 → 0.74 s CPU; ELU: 11.7 → 7.9 s)
MIN_RECORD_PAIRS = 3
#: pairs of a class on which a record loaded from disk is checked against a fresh compile (one:
#: a changed record is off at every pair, and each pair costs — GELU depth 10: ~12 s for one, ~28 for two)
VERIFY_PAIRS = 1
#: singularity classes: codes in a block's class array
REST, SAME, OPPOSITE, PARALLEL, BELOW = 0, 1, 2, 3, 4
KINDS = {SAME: "same", OPPOSITE: "opposite", PARALLEL: "parallel", REST: "rest"}
#: pairs a band compiles one at a time (parallel rows of unequal norms, pairs where a replay does
#: not hold): beyond this many, one batch
ONE_BY_ONE = 256


@dataclass(frozen=True)
class LimitSpec:
    """What every band of a limit kernel shares: the template (IR, input group g, scale s, shift b:
    the pair's covariance is s·q + b), the data, tol and the QMC points per expectation (None: the
    default of :class:`~tensorprog.expect.budget.Budget`)."""
    program: ir.Program
    group: int
    scale: float
    shift: float
    X: np.ndarray
    tol: float
    max_qmc_points: int | None = None

    @property
    def budget(self) -> Budget:
        """The Budget of every compile of this kernel."""
        if self.max_qmc_points is None:
            return Budget(tol=self.tol)
        return Budget(tol=self.tol, max_qmc_points=self.max_qmc_points)

    @property
    def names(self) -> list[str]:
        return [o.name for o in self.program.outputs]


@dataclass(frozen=True)
class BandResult:
    """Methods and warnings of a band, or of some of its pairs (their values are written into
    the caller's arrays): each output's least exact method (:data:`~tensorprog.limit.accuracy.METHOD_RANK`)."""
    methods: dict[str, str]
    warnings: list[str] = field(default_factory=list)


class Pairs(NamedTuple):
    """Pairs (i[k], j[k]) of rows of the data."""
    i: np.ndarray
    j: np.ndarray


class Block(NamedTuple):
    """A block of a band: rows [row_start, row_stop) by columns [col_start, col_stop)."""
    row_start: int
    row_stop: int
    col_start: int
    col_stop: int


class Leftover(NamedTuple):
    """Pairs of a block left for after the blocks: their class code and the pairs."""
    code: int
    pairs: Pairs


def least_exact(methods: dict[str, set[str]], warnings: list[str]) -> BandResult:
    """The :class:`BandResult` of each output's methods ("exact" for an output with none)."""
    return BandResult({n: max(m or {"exact"}, key=METHOD_RANK.__getitem__) for n, m in methods.items()},
                      warnings)


def gram(X: np.ndarray) -> np.ndarray:
    """q = X Xᵀ / d, every entry as :func:`gram_block` sums it (bit-equal to :func:`gram_pairs`)."""
    return gram_block(X, np.arange(X.shape[0]), np.arange(X.shape[0]))


def gram_block(X: np.ndarray, rows: np.ndarray | slice, cols: np.ndarray | slice) -> np.ndarray:
    """q_ij = Σ_k X_ik X_jk / d for i in ``rows``, j in ``cols``, to within about one unit roundoff
    of its scale √(q_ii q_jj) whatever d (:func:`accurate_dot`): the same bits in any block."""
    A, B = X[rows], X[cols]
    return accurate_dot(A[:, None, :], B[None, :, :])


def gram_pairs(X: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """q_ab = Σ_k X_ak X_bk / d for the pairs (a, b), with the bits of :func:`gram_block`."""
    return accurate_dot(X[a], X[b])


#: terms summed in one chunk of :func:`accurate_dot` (then the chunks' sums are summed)
DOT_CHUNK = 1024
#: whether numpy's long double is the x87 80-bit format (64-bit significand) or wider
EXTENDED = np.finfo(np.longdouble).nmant >= 63


def accurate_dot(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Σ_k A[..., k] B[..., k] / d (A and B broadcast on the leading axes; d = the last axis),
    rounded to float64 from a sum with error far below one float64 unit roundoff u = 2⁻⁵³ of
    Σ_k |A_k B_k| / d ≤ √(q_AA q_BB) (Cauchy–Schwarz).

    In 80-bit long double (unit roundoff u_L = 2⁻⁶⁴): products exact-ish (u_L each), chunks of
    :data:`DOT_CHUNK` terms summed in order, then the chunks' sums, so the sum errs by at most
    γ_m^L Σ|A_k B_k| with m = DOT_CHUNK + d/DOT_CHUNK ≤ 2048 for d ≤ 2²⁰: (2048 + 1)·2⁻⁶⁴ ≈ u.
    The division by d and the final rounding to float64 add u_L and u of |q|.  So
    |fl(q) − q| ≤ 2.01·u·√(q_AA q_BB) whatever the input dimension — where a float64 sum in order
    errs by up to γ_d (d·u; measured 11ε at d = 784).  Where long double is only float64 (some
    platforms), the same bound comes from compensated dot products in float64 (:func:`dot2`)."""
    if not EXTENDED:
        return dot2(A, B)
    d = A.shape[-1]
    A, B = A.astype(np.longdouble), B.astype(np.longdouble)
    total = None
    for k0 in range(0, d, DOT_CHUNK):
        chunk = A[..., k0] * B[..., k0]
        for k in range(k0 + 1, min(d, k0 + DOT_CHUNK)):
            chunk += A[..., k] * B[..., k]
        total = chunk if total is None else total + chunk
    return (total / d).astype(float)


#: Dekker's splitting constant 2²⁷ + 1 (a float64 as the sum of two 26-bit halves)
SPLIT = 134217729.0


def dot2(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Σ_k A_k B_k / d by Ogita, Rump and Oishi's Dot2 (SIAM J. Sci. Comput. 26, 2005): each
    product and each partial sum carried with its exact rounding error (Dekker's TwoProduct,
    Knuth's TwoSum), so the result errs by at most u·|Σ| + γ_d²·Σ|A_k B_k| before the division
    by d (one more u) — the bound :func:`accurate_dot` states, computed in float64 alone."""
    d = A.shape[-1]
    s = np.zeros(np.broadcast_shapes(A.shape[:-1], B.shape[:-1]))
    c = np.zeros_like(s)
    for k in range(d):
        a, b = A[..., k], B[..., k]
        p = a * b
        ah, al = halves(a)
        bh, bl = halves(b)
        c += ((ah * bh - p) + ah * bl + al * bh) + al * bl          # TwoProduct: p + that = a·b
        t = s + p
        z = t - s
        c += (s - (t - z)) + (p - z)                                # TwoSum: t + that = s + p
        s = t
    return (s + c) / d


def halves(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(h, l) with h + l = a exactly, each with at most 26 significant bits (Dekker's split)."""
    t = SPLIT * a
    h = t - (t - a)
    return h, a - h


def classes(qii: np.ndarray, qjj: np.ndarray, qij: np.ndarray, i: np.ndarray, j: np.ndarray) -> np.ndarray:
    """The class code of each pair (broadcasting): x ≡ y (i = j, or correlation ≥ 1 − 1e-12 and
    equal norms to 1e-12), x ≡ −y (correlation ≤ −1 + 1e-12, equal norms), parallel (correlation
    ±1 to 1e-12, unequal norms: y = λx with λ² ≠ 1), the rest; pairs below the diagonal (j < i)
    are BELOW."""
    norm = np.sqrt(qii * qjj)
    r = np.divide(qij, norm, out=np.zeros(np.broadcast_shapes(np.shape(norm), np.shape(qij))), where=norm > 0)
    equal = np.abs(qii - qjj) <= 1e-12 * np.maximum(qii, qjj)
    code = np.where(np.abs(r) >= 1 - 1e-12, np.where(equal, np.where(r > 0, SAME, OPPOSITE), PARALLEL), REST)
    code[np.broadcast_to(i == j, code.shape)] = SAME
    code[np.broadcast_to(j < i, code.shape)] = BELOW
    return code


# ---- replays, by template and class ------------------------------------------------------------

#: the process's replays in memory by key (see :func:`replay_key`): a Recorded, or None (not
#: replayable); with :data:`STORE`, the default :class:`~.caches.ReplayCache` (:func:`default_cache`)
REPLAYS: OrderedDict = OrderedDict()
MAX_REPLAYS = 32
STORE = ReplayStore.from_environment()


def default_cache() -> ReplayCache:
    """The process's replay cache: :data:`REPLAYS` (at most :data:`MAX_REPLAYS`) and :data:`STORE`,
    as they are now (a caller may replace either)."""
    return ReplayCache(Memo(REPLAYS, MAX_REPLAYS), STORE)


def replay_key(spec: LimitSpec, kind: str) -> str:
    """A digest of what a record depends on: the template's IR, the input group, tol, the class.
    The input group's covariance is left out — a record takes it as its input — so templates
    that differ only in s and b (a first layer's variances) share their record."""
    groups = tuple(dataclasses.replace(group, dist=dataclasses.replace(group.dist, cov=None))
                   if k == spec.group else group for k, group in enumerate(spec.program.groups))
    text = repr((spec.program.eqns, groups, spec.program.outputs, spec.group, spec.tol, kind))
    return hashlib.sha256(text.encode()).hexdigest()


def replay_for(spec: LimitSpec, kind: str, pairs: Pairs | None = None,
               cache: ReplayCache | None = None) -> Recorded | None:
    """The :class:`Recorded` replay of the class ``kind`` — from ``cache`` (default:
    :func:`default_cache`) in memory, then on disk, or recorded now
    on ``pairs`` (pairs (i, j) of the class) — or None where the template cannot be replayed, or
    nothing is known and there are no pairs to record on.  A record that does not hold on
    ``pairs`` (it took a number of other data for a constant) is recorded again on them.  A record
    loaded from the store is used only if it agrees with a fresh compile of a few of ``pairs``
    (:func:`agrees_with_compile`); else it is recorded again, with a StoreWarning."""
    cache = default_cache() if cache is None else cache
    pairs = None if pairs is None else Pairs(*pairs)
    key = replay_key(spec, kind)
    have_pairs = pairs is not None and len(pairs.i) > 0
    found = cache.in_memory(key)
    stored = found is MISSING
    if stored:
        found = cache.on_disk(key)
        if found and not have_pairs:              # nothing to check it on: not used
            found = MISSING
    if found and have_pairs and not holds_on(spec, found.replay, *pairs):
        found = MISSING
    elif found and stored and not agrees_with_compile(spec, found.replay, *pairs):
        warn(f"the stored record of the class '{kind}' ({key[:12]}…) disagrees with a fresh compile of "
             "its pairs: ignored, recorded again")
        found = MISSING
    recorded = found is MISSING
    if recorded:
        if not have_pairs or len(pairs.i) < MIN_RECORD_PAIRS:
            return None
        found = record_class(spec, pairs)
    cache.keep(key, found, save=recorded)
    return found


def holds_on(spec: LimitSpec, replay: Replay, i: np.ndarray, j: np.ndarray) -> bool:
    """The record holds on the pairs (i, j)."""
    covs = pair_covs(spec, i, j)
    return bool(replay(covs[:, 0, 0], covs[:, 1, 1], covs[:, 0, 1])[2].all())


def agrees_with_compile(spec: LimitSpec, replay: Replay, i: np.ndarray, j: np.ndarray) -> bool:
    """The record's values at :data:`VERIFY_PAIRS` of the pairs (i, j) (spread from the first to the
    last; one pair: the first) are those of a batch compile of them, to within the two
    error bounds, |replay − compile| ≤ e_replay + e_compile; its checks hold there, and every
    output is exact in both.  A record with a diagonal part (:class:`..limit.replay.Diagonal`)
    is checked so at (i, i) of the first pair too.  A record changed on disk (a constant of its
    tape, say) fails this."""
    pick = np.unique(np.linspace(0, len(i) - 1, min(len(i), VERIFY_PAIRS)).round().astype(int))
    covs = pair_covs(spec, i[pick], j[pick])
    got_values, got_errors, valid = replay(covs[:, 0, 0], covs[:, 1, 1], covs[:, 0, 1])
    if not np.all(valid) or tuple(replay.names) != tuple(spec.names):
        return False
    methods = ("exact", "series", "quadrature") if replay.mixed else ("exact", "series")
    if not agree(spec, covs, replay.names, got_values, got_errors, valid.shape, methods):
        return False
    if replay.diagonal is None:
        return True
    covs = pair_covs(spec, i[pick[:1]], i[pick[:1]])       # its diagonal part: at (i, i) of the first pair
    sides = replay.tape.sides([covs[:, 0, 0]], [covs[:, 1, 1]])
    got_values, got_errors, valid = replay.diagonal_values(sides)
    return bool(np.all(valid)) and agree(spec, covs, replay.names, got_values, got_errors, valid.shape, methods)


def agree(spec: LimitSpec, covs: np.ndarray, names, got_values: list, got_errors: list, shape: tuple,
          methods: tuple[str, ...] = ("exact", "series")) -> bool:
    """A batch compile of the pairs of covariances ``covs`` gives every output by one of ``methods``
    (exactly or by the series; the split quadrature too for a mixed record, :mod:`..symbolic.mixed`),
    within ``got_errors`` plus its own error of ``got_values``."""
    lim = compile_program(spec.program, budget=Budget(tol=spec.tol), batch_covs={spec.group: covs}).limit()
    for name, v, e in zip(names, got_values, got_errors):
        out = lim.outputs[name]
        if out.method not in methods:
            return False
        v, e = np.broadcast_to(v, shape), np.broadcast_to(e, shape)
        if not np.all(np.abs(v - out.value) <= e + np.abs(out.error)):
            return False
    return True


def record_class(spec: LimitSpec, pairs: Pairs) -> Recorded | None:
    """The replay recorded by a batch compile on up to RECORD_PAIRS of ``pairs``, or None."""
    i, j = pairs
    pick = np.unique(np.linspace(0, len(i) - 1, min(len(i), RECORD_PAIRS)).round().astype(int))
    compiled = compile_program(spec.program, budget=spec.budget,
                               batch_covs={spec.group: pair_covs(spec, i[pick], j[pick])})
    replay = record(compiled, spec.names)
    return None if replay is None else Recorded(replay, list(compiled.limit().warnings))


def pair_covs(spec: LimitSpec, i: np.ndarray, j: np.ndarray) -> np.ndarray:
    """(P, 2, 2) covariances s·[[q_ii, q_ij], [q_ij, q_jj]] + b of the pairs (i, j)."""
    return first_layer_cov(spec.scale, spec.shift, gram_pairs(spec.X, i, i), gram_pairs(spec.X, i, j),
                           gram_pairs(spec.X, j, j))


def first_layer_cov(s: float, b: float, q11, q12, q22) -> np.ndarray:
    """s·[[q11, q12], [q12, q22]] + b, stacked on the last two axes (q's may be arrays (P,))."""
    return np.stack([np.stack([s * q11 + b, s * q12 + b], -1), np.stack([s * q12 + b, s * q22 + b], -1)], -2)


def rest_candidates(spec: LimitSpec) -> Pairs:
    """Distinct pairs i < j of the rest class to record its replay on: drawn with a fixed seed over
    the whole data (the same whichever band asks); few data hold fewer than :data:`RECORD_PAIRS`
    (N = 2: the one pair, not 48 copies of it)."""
    N = spec.X.shape[0]
    if N < 2:
        return Pairs(np.zeros(0, int), np.zeros(0, int))
    draw = np.random.default_rng(0).integers(0, N, (2, 8 * RECORD_PAIRS))
    i, j = np.minimum(*draw), np.maximum(*draw)
    keep = i < j
    i, j = i[keep], j[keep]
    first = np.sort(np.unique(i * N + j, return_index=True)[1])      # each pair once, in the order drawn
    i, j = i[first], j[first]
    q = (gram_pairs(spec.X, i, i), gram_pairs(spec.X, j, j), gram_pairs(spec.X, i, j))
    rest = classes(*q, i, j) == REST
    return Pairs(i[rest][:RECORD_PAIRS], j[rest][:RECORD_PAIRS])


# ---- a band ------------------------------------------------------------------------------------

def limit_band(spec: LimitSpec, rows: tuple[int, int], values: dict[str, np.ndarray],
               errors: dict[str, np.ndarray], cache: ReplayCache | None = None) -> BandResult:
    """The limit kernels of the pairs (i, j), r0 ≤ i < r1, j ≥ i, written into ``values[name]``
    and ``errors[name]`` (arrays (r1 − r0, N − r0): entry (i − r0, j − r0)); see the module doc.
    ``cache``: the replays (default: :func:`default_cache`)."""
    cache = default_cache() if cache is None else cache
    r0, r1 = rows
    N = spec.X.shape[0]
    diag = gram_pairs(spec.X, np.arange(N), np.arange(N))
    rest = replay_for(spec, "rest", rest_candidates(spec), cache)
    wide = rest is not None and rest.replay.method == "series" and N <= COL_BLOCK
    blocks = band_blocks(r0, r1, N, SERIES_COL_BLOCK if wide else COL_BLOCK)

    s, b = spec.scale, spec.shift
    sides = rest.replay.tape.sides([s * diag[r0:r1, None] + b], [s * diag[None, r0:] + b]) if rest else None
    same = diagonal_part(rest, sides)
    work = Workspace()
    leftovers = [block_values(spec, block, rows, diag, rest, sides, values, errors, work, same) for block in blocks]
    methods = ({name: {rest.replay.method} for name in spec.names} if rest is not None
               else {name: set() for name in spec.names})
    warnings = list(rest.warnings) if rest is not None else []
    for code in (SAME, OPPOSITE, PARALLEL, REST):
        parts = [left.pairs for got in leftovers for left in got if left.code == code]
        if not parts:
            continue
        i = np.concatenate([p.i for p in parts])
        j = np.concatenate([p.j for p in parts])
        got = pair_values(spec, KINDS[code], Pairs(i, j), rows, values, errors, cache)
        for name in spec.names:
            methods[name].add(got.methods[name])
        warnings += [w for w in got.warnings if w not in warnings]
    return least_exact(methods, warnings)


class DiagonalPart(NamedTuple):
    """The x ≡ y cells (i, i) of a band's rows by the rest record's diagonal part
    (:meth:`..limit.replay.Replay.diagonal_values`): per row, each output's value and error, and
    where they hold."""
    values: list[np.ndarray]
    errors: list[np.ndarray]
    valid: np.ndarray


def diagonal_part(rest: Recorded | None, sides: dict | None) -> DiagonalPart | None:
    """The band's diagonal by the rest record (None where it has no diagonal part): its rows'
    side of the tape (``sides``) holds it, so the diagonal costs no compile of its own."""
    if rest is None or sides is None or rest.replay.diagonal is None:
        return None
    got_values, got_errors, valid = rest.replay.diagonal_values(sides)
    return DiagonalPart([np.ravel(v) for v in got_values], [np.ravel(e) for e in got_errors], np.ravel(valid))


def band_blocks(r0: int, r1: int, N: int, cols: int = COL_BLOCK) -> list[Block]:
    """The blocks of the band's rows [r0, r1) (columns j ≥ i0 of each block's first row i0): about
    :data:`ROW_BLOCK` × ``cols`` entries each — a band of few rows in wider blocks, and
    the triangle's later rows, whose columns are fewer, in more rows per block (N = 1000: 17 blocks,
    not 32), since a block's tape pays a fixed cost per call (hundreds of numpy calls).  Each cell's
    bits are the same in any block; where every block spans its rows' columns (N ≤ ``cols``), so is
    the order of the pairs left over (row by row), whatever ``cols``."""
    blocks, i0 = [], r0
    while i0 < r1:
        i1 = min(r1, i0 + max(ROW_BLOCK, ROW_BLOCK * cols // max(1, N - i0)))
        width = max(cols, ROW_BLOCK * cols // (i1 - i0))
        blocks += [Block(i0, i1, j0, min(N, j0 + width)) for j0 in range(i0, N, width)]
        i0 = i1
    return blocks


def block_values(spec: LimitSpec, block: Block, rows: tuple[int, int], diag: np.ndarray,
                 rest: Recorded | None, sides: dict | None, values: dict[str, np.ndarray],
                 errors: dict[str, np.ndarray], work: Workspace, same: DiagonalPart | None = None) -> list[Leftover]:
    """One block: the rest class by its replay (its per-input part ``sides`` computed once for
    the band), and its diagonal cells (i, i) by the record's diagonal part ``same`` where it
    holds, written in place; returns the pairs left over — the other classes, and the rest
    where there is no replay or it does not hold."""
    i0, i1, j0, j1 = block
    i, j = np.arange(i0, i1)[:, None], np.arange(j0, j1)[None, :]
    q = gram_block(spec.X, slice(i0, i1), slice(j0, j1))
    code = classes(diag[i0:i1, None], diag[None, j0:j1], q, i, j)
    if spec.shift < 0 or spec.scale < 0:                      # s·q + b need not be a covariance
        check_covariances(spec, diag[i0:i1, None], diag[None, j0:j1], q, code != BELOW)
    left = []
    if rest is not None and (code == REST).any():
        s, b = spec.scale, spec.shift
        target = (slice(i0 - rows[0], i1 - rows[0]), slice(j0 - rows[0], j1 - rows[0]))
        got_values, got_errors, valid = rest.replay(None, None, s * q + b, work, rest.replay.tape.cut(sides, *target))
        for name, v, e in zip(rest.replay.names, got_values, got_errors):
            values[name][target] = v
            errors[name][target] = e
        code = np.where((code == REST) & ~valid, -1, code)       # the rest where the record fails
        # x ≡ y stays its own class even where a smooth replay holds there (Replay.smooth): the pair
        # replay's first-order error sums Price's three slopes in absolute value, and along the
        # diagonal (a ≡ b ≡ c) that compounds through the layers (160× the x ≡ y record's signed
        # slope, DiagonalSlope, at depth 10: limit/replay.py); the cells (i, i) come from the
        # record's diagonal part instead (below), the other x ≡ y pairs (repeated inputs) from
        # their class's record
    if same is not None:
        lo, hi = max(i0, j0), min(i1, j1)
        k = np.arange(lo, hi)
        k = k[same.valid[k - rows[0]]]
        if len(k):
            for n, name in enumerate(rest.replay.names):
                values[name][k - rows[0], k - rows[0]] = same.values[n][k - rows[0]]
                errors[name][k - rows[0], k - rows[0]] = same.errors[n][k - rows[0]]
            code[k - i0, k - j0] = BELOW                          # done
    for c in (SAME, OPPOSITE, PARALLEL, REST if rest is None else -1):
        where = np.nonzero(code == c)
        if len(where[0]):
            left.append(Leftover(REST if c == -1 else c, Pairs(where[0] + i0, where[1] + j0)))
    return left


def check_covariances(spec: LimitSpec, qii: np.ndarray, qjj: np.ndarray, qij: np.ndarray, upper: np.ndarray) -> None:
    """A TPUsageError unless every pair's s·[[q_ii, q_ij], [q_ij, q_jj]] + b is positive
    semidefinite (to rounding): a negative shift or scale can make it not a covariance."""
    s, b = spec.scale, spec.shift
    a, d, c = s * qii + b, s * qjj + b, s * qij + b
    scale = np.maximum(np.abs(a) * np.abs(d), 1e-300)
    bad = upper & ((a < 0) | (d < 0) | (a * d - c * c < -1e-12 * scale))
    if bad.any():
        raise TPUsageError(f"the first-layer covariance s·q + b (s = {s:g}, b = {b:g}) is not positive "
                           f"semidefinite for {int(bad.sum())} pairs of this block of the data: with "
                           "b < 0 a pair's covariance can fail to be one (b ≥ 0 always works)",
                           file=spec.program.file)


def pair_values(spec: LimitSpec, kind: str, pairs: Pairs, rows: tuple[int, int],
                values: dict[str, np.ndarray], errors: dict[str, np.ndarray],
                cache: ReplayCache | None = None) -> BandResult:
    """Pairs of one class, written in place: x ≡ ±y by the class's replay where it holds;
    the rest of them, parallel pairs and the rest class's leftovers (where its replay does not
    hold) by :func:`compile_pairs`."""
    i, j = pairs
    methods = {name: {"exact"} for name in spec.names}
    warnings: list[str] = []
    if kind in ("same", "opposite"):
        found = replay_for(spec, kind, Pairs(i, j), cache)
        if found is not None:
            covs = pair_covs(spec, i, j)
            got_values, got_errors, valid = found.replay(covs[:, 0, 0], covs[:, 1, 1], covs[:, 0, 1])
            target = (i[valid] - rows[0], j[valid] - rows[0])
            for name, v, e in zip(found.replay.names, got_values, got_errors):
                values[name][target] = np.broadcast_to(v, valid.shape)[valid]
                errors[name][target] = np.broadcast_to(e, valid.shape)[valid]
            warnings += [w for w in found.warnings if w not in warnings]
            for name in spec.names:
                methods[name].add(found.replay.method)
            i, j = i[~valid], j[~valid]
    if len(i):
        got = compile_pairs(spec, kind, Pairs(i, j), rows, values, errors)
        for name in spec.names:
            methods[name].add(got.methods[name])
        warnings += [w for w in got.warnings if w not in warnings]
    return least_exact(methods, warnings)


def compile_pairs(spec: LimitSpec, kind: str, pairs: Pairs, rows: tuple[int, int],
                  values: dict[str, np.ndarray], errors: dict[str, np.ndarray]) -> BandResult:
    """Pairs by the batch compile, written in place: one at a time up to :data:`ONE_BY_ONE` of
    them (so their bits do not depend on which pairs share a band; and a parallel pair, y = λx,
    is exact only alone: a batch sees correlation 1 only to rounding, and its closed forms lose
    half their digits there), else as one batch."""
    i, j = pairs
    covs = pair_covs(spec, i, j)
    groups = [slice(k, k + 1) for k in range(len(i))] if len(i) <= ONE_BY_ONE else [slice(None)]
    methods: dict[str, set[str]] = {name: set() for name in spec.names}
    warnings: list[str] = []
    if kind == "parallel" and len(groups) == 1 and len(i) > 1:
        warnings.append(f"{len(i)} pairs of parallel inputs with unequal norms (y = λx, λ² ≠ 1) were "
                        f"computed as one batch (more than {ONE_BY_ONE}): at correlation ±1 their closed "
                        "forms lose about half their digits, which their error bounds do not show")
    for part in groups:
        lim = compile_program(spec.program, budget=spec.budget, batch_covs={spec.group: covs[part]}).limit()
        target = (i[part] - rows[0], j[part] - rows[0])
        for name, v in lim.outputs.items():
            values[name][target] = v.value
            errors[name][target] = v.error
            methods[name].add(v.method)
        warnings += [w for w in lim.warnings if w not in warnings]
    return least_exact(methods, warnings)
