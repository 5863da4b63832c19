"""The ``tpc`` command: argument parsing and printing only; the work is in the library."""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Sequence

from .errors import TPError, TPUsageError
from .expect.budget import Budget
from .finite.backend import BACKENDS, DEVICES
from .finite.exec_options import ExecOptions
from .limit.particles import ParticleOptions


def _define(text: str) -> tuple[str, float]:
    name, eq, value = text.partition("=")
    if not eq or not name.strip():
        raise argparse.ArgumentTypeError(f"-D expects NAME=VALUE, got {text!r}")
    try:
        return name.strip(), float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"-D {name}: {value!r} is not a number") from None


def _parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="tpc", description="Tensor Programs: finite width and the "
                                  "infinite-width limit of one program text.")
    sub = top.add_subparsers(dest="command", required=True)

    def command(name: str, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help)
        p.add_argument("file", help="a .tp program")
        p.add_argument("-D", dest="defines", action="append", type=_define, default=[],
                       metavar="NAME=VALUE", help="override a param")
        return p

    command("check", "parse and check; print a summary of the unrolled program")
    ex = command("execute", "run at finite width")
    ex.add_argument("-n", "--width", type=int, required=True, help="the width n")
    ex.add_argument("--trials", type=int, default=1)
    ex.add_argument("--seed", type=int, default=0)
    ex.add_argument("--matrix-dist", default=None, help="swap the family of every matrix")
    ex.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    _scale_flags(ex)
    ex.add_argument("--json", action="store_true")
    ex.add_argument("--out", metavar="F.npz", default=None,
                    help="save every output's mean (arrays of outputs as arrays) and NAME_std to an .npz")
    co = command("compile", "the Master Theorem recurrence and the limit of every out")
    co.add_argument("--symbolic", action="store_true", help="exact closed forms where they exist")
    co.add_argument("--emit", choices=["text", "json", "latex"], default="text")
    co.add_argument("--matrix-dist", default=None, help="swap the family of every matrix")
    co.add_argument("--out", metavar="F.npz", default=None,
                    help="save every output's limit (arrays of outputs as arrays) and NAME_error to an .npz")
    budget = Budget()                      # the defaults live in tensorprog/expect/budget.py only
    co.add_argument("--tol", type=_number, default=budget.tol,
                    help="target error of numerical expectations (default %(default)g)")
    co.add_argument("--max-qmc-points", type=_integer, default=budget.max_qmc_points,
                    help="quasi-Monte Carlo points per expectation at most (default %(default)d)")
    co.add_argument("--max-quad-points", type=_integer, default=budget.max_quad_points,
                    help="largest tensor quadrature grid; beyond it, QMC (default %(default)d)")
    co.add_argument("--max-expand-size", type=_integer, default=budget.max_expand_size,
                    help="largest symbolic expansion tried for a closed form (default %(default)d terms)")
    particles = ParticleOptions()
    co.add_argument("--method", choices=["recurrence", "particles"], default="recurrence",
                    help="recurrence: the Master Theorem (default); particles: finite widths N and N/4 with "
                         "replicas, extrapolated to 1/n -> 0 (long programs; cost linear in their length)")
    co.add_argument("--particles", type=_positive, default=None, metavar="N",
                    help=f"--method particles: the large width N (default {particles.particles})")
    co.add_argument("--replicas", type=_positive, default=None, metavar="R",
                    help=f"--method particles: independent runs at each width (default {particles.replicas})")
    co.add_argument("--seed", type=int, default=None,
                    help="seed of the randomized QMC rules, or of --method particles (default 0)")
    co.add_argument("--jobs", "-j", type=int, default=None, metavar="J",
                    help="--method particles: run replicas in J worker processes (0: one per core)")
    co.add_argument("--control-variates", type=_names, default=None, metavar="S1,S2,...",
                    help="--method particles: scalars (outputs or named, e.g. 'f[0]') whose limits the "
                         "recurrence gives on the program's prefix, used as control variates")
    cv = command("converge", "finite width against the limit at several widths, with the fitted rate")
    cv.add_argument("--widths", type=_widths, required=True, metavar="N1,N2,...",
                    help="comma-separated widths, e.g. 256,512,1024")
    cv.add_argument("--trials", type=int, default=8, help="trials per width (default 8)")
    cv.add_argument("--seed", type=int, default=0)
    cv.add_argument("--matrix-dist", default=None, help="swap the family of every matrix")
    cv.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    _scale_flags(cv)
    _budget_flags(cv)
    cv.add_argument("--plot", metavar="OUT.png", default=None,
                    help="write a log-log plot of the deviation against the width (needs matplotlib)")
    cv.add_argument("--json", action="store_true")
    tb = command("tailbound", "Theorem 4.3.1's tail bound (Golikov's thesis, ch. 4) against the empirical tail")
    tb.add_argument("--output", required=True, help="an output c = mean(chi(g)**2) of the class")
    tb.add_argument("--widths", type=_widths, default=[64, 256, 1024], metavar="N1,N2,...")
    tb.add_argument("--t", dest="ts", type=_floats, default=[0.05, 0.1], metavar="T1,T2,...",
                    help="deviations t of P(|c - limit| > t)")
    tb.add_argument("--trials", type=int, default=200)
    tb.add_argument("--seed", type=int, default=0)
    tb.add_argument("--lam", type=float, default=None, help="a Lipschitz constant (default: from the rules)")
    ke = command("kernel", "N×N kernels of a template over a dataset (limit, or finite width with -n)")
    ke.add_argument("--inputs", required=True, metavar="X.npy",
                    help="an (N, d) array of inputs (or (N, T, d): sequences, for a data template)")
    ke.add_argument("--out", metavar="K.npz|K.npy|DIR/", default=None,
                    help="save the kernels (.npz: every output; .npy: the one named by --output; DIR/: "
                         "DIR/NAME.npy per output, filled tile by tile out of core, resumable)")
    ke.add_argument("--tile-pairs", type=_positive, default=None, metavar="P",
                    help="pairs per tile of an out-of-core or cluster kernel (default 524288)")
    ke.add_argument("--output", default=None, help="the output saved to a .npy (default: the first)")
    ke.add_argument("-n", "--width", type=int, default=None, help="finite width (default: the limit)")
    ke.add_argument("--trials", type=int, default=1)
    ke.add_argument("--seed", type=int, default=0)
    ke.add_argument("--matrix-dist", default=None)
    ke.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    _budget_flags(ke)
    _scale_flags(ke)
    ke.add_argument("--json", action="store_true")
    sw = sub.add_parser("sweep", help="every output over a grid of params (limit, or finite width with -n)")
    sw.add_argument("file", help="a .tp program")
    sw.add_argument("-D", dest="defines", action="append", default=[], metavar="NAME=START:STOP:COUNT",
                    help="sweep a param over an inclusive linspace, or NAME=V1,V2,...; NAME=VALUE fixes it")
    sw.add_argument("--out", metavar="F.npz", default=None, help="save NAME, NAME_error and the param grids")
    sw.add_argument("--plot", metavar="OUT.png", default=None,
                    help="a heatmap with contours (2 params) or lines with error bands (1 param)")
    sw.add_argument("--contour", action="append", default=[], metavar="NAME=LEVEL",
                    help="draw the level set NAME = LEVEL on the plot (repeatable)")
    sw.add_argument("--json", action="store_true")
    sw.add_argument("-n", "--width", type=int, default=None, help="finite width (default: the limit)")
    sw.add_argument("--trials", type=int, default=1)
    sw.add_argument("--seed", type=int, default=0)
    sw.add_argument("--matrix-dist", default=None, help="swap the family of every matrix (with -n)")
    sw.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    sw.add_argument("--jobs", "-j", type=int, default=1, metavar="J",
                    help="with -n: blocks of points in J worker processes (0: one per core)")
    sw.add_argument("--scheduler", default=None, metavar="ADDRESS",
                    help="with -n: blocks of points on this Dask scheduler ('local': a LocalCluster)")
    _budget_flags(sw)
    return top


def _budget_flags(p: argparse.ArgumentParser) -> None:
    """--tol and --max-qmc-points of the limit (kernel, converge), as compile has them."""
    budget = Budget()
    p.add_argument("--tol", type=float, default=budget.tol,
                   help="target error of the limit's numerical expectations (default %(default)g)")
    p.add_argument("--max-qmc-points", type=_positive, default=budget.max_qmc_points,
                   help="quasi-Monte Carlo points per expectation of the limit at most (default %(default)d)")


def _scale_flags(p: argparse.ArgumentParser, jobs: bool = True) -> None:
    if jobs:
        p.add_argument("--jobs", "-j", type=int, default=ExecOptions().jobs, metavar="J",
                       help="run trials in J worker processes (0: one per core); same values as -j 1")
    p.add_argument("--blocked", action=argparse.BooleanOptionalAction, default=None,
                   help="regenerate matrices block by block instead of storing them (other random "
                        "numbers, same laws); default: only when the dense matrices do not fit")
    p.add_argument("--conditional", action="store_true", default=False,
                   help="never store a matrix: draw each product from its law given the earlier ones "
                        "(exact in law for normal, mvt and orthogonal matrices; memory O(n·k) for k products)")
    p.add_argument("--progress", action="store_true", default=None,
                   help="a progress bar on stderr (default: only when stderr is a terminal)")
    p.add_argument("--backend", choices=BACKENDS, default=ExecOptions().backend,
                   help="the array library (default %(default)s; others draw other random numbers, same laws)")
    p.add_argument("--device", choices=DEVICES, default=ExecOptions().device,
                   help="where the array library runs (default %(default)s)")
    p.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="run trials (kernel: tiles) on this Dask scheduler, e.g. tcp://host:8786; "
                        "'local' starts a LocalCluster (needs tensorprog[dask]); same values as locally")


def _options(args, **extra):
    """The execution options of the command line (``extra``: more of them) for a ``with`` block."""
    from .finite import options
    opts = {"blocked": args.blocked, "backend": args.backend, "device": args.device,
            "scheduler": args.scheduler, "conditional": args.conditional, **extra}
    if getattr(args, "jobs", None) is not None:
        opts["jobs"] = args.jobs
    return options(**opts)


def _floats(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers separated by commas, got {text!r}") from None


def _positive(text: str) -> int:
    """A positive integer; 1e6-style spellings of whole numbers are accepted."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if not (value.is_integer() and value >= 1):
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return int(value)


def _number(text: str) -> float:
    """A number as text (its range is checked by the library: :class:`~tensorprog.expect.budget.Budget`)."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def _integer(text: str) -> int | float:
    """An integer as text, 1e6-style spellings accepted; anything else is handed on as a float for
    the library to refuse (its range is checked there, once: :class:`~tensorprog.expect.budget.Budget`)."""
    value = _number(text)
    return int(value) if value.is_integer() else value


def _names(text: str) -> tuple[str, ...]:
    from .limit.controls import parse_names
    try:
        return parse_names(text)
    except TPUsageError as err:
        raise argparse.ArgumentTypeError(err.message) from None


def _widths(text: str) -> list[int]:
    from .tools.converge import parse_widths
    try:
        return parse_widths(text)
    except TPUsageError as err:
        raise argparse.ArgumentTypeError(err.message.removeprefix("--widths: ")) from None


def _load(args):
    from .program import load
    return load(args.file, **dict(args.defines))


def cmd_check(args) -> str:
    program = _load(args)
    counts = program.summary()
    lines = [f"{args.file}: ok, {len(program.ir.eqns)} equations"]
    lines += [f"  {kind:<10} {count}" for kind, count in sorted(counts.items())]
    lines.append(f"  outputs    {', '.join(program.outputs) or '(none)'}")
    lines += list(program.ir.warnings)
    return "\n".join(lines)


def cmd_execute(args) -> str:
    result = _load(args).execute(n=args.width, trials=args.trials, seed=args.seed,
                                 matrix_dist=args.matrix_dist, dtype=args.dtype, jobs=args.jobs,
                                 blocked=args.blocked, progress=args.progress, backend=args.backend,
                                 device=args.device, scheduler=args.scheduler,
                                 conditional=args.conditional)
    if args.out:
        result.save(args.out)
    if args.json:
        return json.dumps(result.to_dict(), indent=2)
    head = f"width {result.width}, {result.trials} trial(s), seed {result.seed}, {result.dtype}"
    if result.backend != "numpy" or result.device != "cpu":
        head += f", {result.backend} on {result.device}"
    if result.blocked:
        head += ", blocked matrices"
    if result.conditional:
        head += ", conditional matrices"
    if result.matrix_dist:
        head += f", matrices: {result.matrix_dist}"
    rows = [head, f"{'output':<16} {'mean':>14} {'std':>12}  values"]
    for name, o in result.entries.items():             # an array of outputs entry by entry
        shown = " ".join(f"{v:.6g}" for v in o.values[:8]) + (" ..." if len(o.values) > 8 else "")
        rows.append(f"{name:<16} {o.mean:>14.8g} {o.std:>12.4g}  {shown}")
    return "\n".join(rows)


def cmd_compile(args) -> str:
    from .limit.report import render_compiled
    if args.method == "particles":
        from .finite import options
        budget = Budget()
        changed = [f"--{k.replace('_', '-')}" for k in ("tol", "max_qmc_points", "max_quad_points", "max_expand_size")
                   if getattr(args, k) != getattr(budget, k)] + (["--symbolic"] if args.symbolic else [])
        if changed:
            raise TPUsageError(f"{', '.join(changed)}: options of the recurrence, not of --method particles "
                               "(which takes --particles, --replicas, --seed and --jobs)", file=args.file)
        with options(**({} if args.jobs is None else {"jobs": args.jobs})):
            compiled = _load(args).compile(method="particles", particles=args.particles, replicas=args.replicas,
                                           seed=args.seed, matrix_dist=args.matrix_dist,
                                           controls=args.control_variates)
        return render_compiled(compiled, compiled.limit(), args.emit)
    if args.particles is not None or args.replicas is not None or args.jobs is not None or args.control_variates:
        raise TPUsageError("--particles, --replicas, --jobs and --control-variates apply to --method particles "
                           "only", file=args.file)
    compiled = _load(args).compile(symbolic=args.symbolic, tol=args.tol, max_qmc_points=args.max_qmc_points,
                                   max_quad_points=args.max_quad_points, max_expand_size=args.max_expand_size,
                                   matrix_dist=args.matrix_dist, seed=args.seed)
    limit = compiled.limit()
    if args.out:
        limit.save(args.out)
    return render_compiled(compiled, limit, args.emit)


def cmd_converge(args) -> str:
    from .tools.converge import converge, render_text
    if args.plot:
        from .tools.plot import require_matplotlib
        require_matplotlib()                     # fail before the long run, not after
    program = _load(args)
    with _options(args):
        result = converge(program, args.widths, trials=args.trials, seed=args.seed,
                          matrix_dist=args.matrix_dist, dtype=args.dtype, progress=args.progress,
                          tol=args.tol, max_qmc_points=args.max_qmc_points)
    if args.plot:
        from .tools.plot import plot_convergence
        plot_convergence(result, args.plot)
    if args.json:
        return json.dumps(result.to_dict(), indent=2)
    return render_text(result) + (f"\nplot: {args.plot}" if args.plot else "")


def cmd_kernel(args) -> str:
    if args.output is not None:                  # refused before the computation, not after
        _load(args).require_output(args.output, "--output")
    from .tools.kernel import kernel, load_inputs, save_path
    from .tools.tiles import TILE_PAIRS
    X = load_inputs(args.inputs)
    directory = args.out if args.out and args.out.endswith(("/", os.sep)) else None
    saved = save_path(args.out) if args.out and directory is None else directory     # checked before the run
    with _options(args, progress=args.progress):
        result = kernel(args.file, X, n=args.width, trials=args.trials, seed=args.seed,
                        matrix_dist=args.matrix_dist, dtype=args.dtype, out=directory,
                        tile_pairs=args.tile_pairs or TILE_PAIRS, tol=args.tol,
                        max_qmc_points=args.max_qmc_points, **dict(args.defines))
    if args.out and directory is None:
        saved = result.save(args.out, args.output)
    if args.json:
        return json.dumps(result.to_dict(), indent=2)
    what = "limit" if result.width is None else f"width {result.width}, {result.trials} trial(s)"
    points = (f"{X.shape[0]} sequences of {X.shape[1]} vectors of dimension {X.shape[2]}" if X.ndim == 3
              else f"{X.shape[0]} inputs of dimension {X.shape[1]}")
    rows = [f"{points}: {what}" + (f"; saved to {saved}" if saved else "")]
    for name, row in result.summary()["outputs"].items():
        rows.append(f"  {name:<10} diag mean {row['diag_mean']:.6g}, off-diag mean {row['offdiag_mean']:.6g}, "
                    f"{row['method']}, max error {row['max_error']:.2g}")
    return "\n".join(rows + result.warnings)


def cmd_sweep(args) -> str:
    from .program import load
    from .sweep.grid import split_defines, sweep_command
    swept, fixed = split_defines(args.defines, args.file)
    result = sweep_command(load(args.file, **fixed), swept, args.contour, n=args.width, trials=args.trials, seed=args.seed,
                           matrix_dist=args.matrix_dist, dtype=args.dtype, jobs=args.jobs,
                           scheduler=args.scheduler, tol=args.tol, max_qmc_points=args.max_qmc_points,
                           out=args.out, plot=args.plot)
    if args.json:
        return json.dumps(result.to_dict(), indent=2)
    return result.summary() + (f"\nsaved to {args.out}" if args.out else "") + (f"\nplot: {args.plot}" if args.plot else "")


def cmd_tailbound(args) -> str:
    from .tools.tailbound import analyze, compare, render_rows
    program = _load(args)
    chain = analyze(program, args.output, args.lam)
    return render_rows(chain, compare(program, args.output, args.widths, args.ts, args.trials, args.seed, args.lam))


COMMANDS = {"check": cmd_check, "execute": cmd_execute, "compile": cmd_compile,
            "converge": cmd_converge, "kernel": cmd_kernel, "tailbound": cmd_tailbound, "sweep": cmd_sweep}


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        print(COMMANDS[args.command](args))
    except TPError as err:
        print(str(err), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("tpc: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:                      # e.g. piped into head
        sys.stderr.close()
        return 0
    except Exception as err:                     # a bug in tensorprog, not in the program
        if os.environ.get("TPC_DEBUG"):
            raise
        print(f"tpc: internal error ({type(err).__name__}: {err}); this is a bug in tensorprog — "
              "please report it with the program (TPC_DEBUG=1 shows the traceback)", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
