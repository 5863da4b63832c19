"""A long fuzzing run over the strategies of ``tests/test_fuzz.py`` (issue 6, item 1).

    python tools/fuzz_long.py --minutes 10 [--seed S] [--report fuzz_report.txt]

Rounds of random programs (fresh seeds each round) go through the same properties
as the CI suite, but with many more examples and compile included everywhere:

* valid programs ("safe": every function finite on its domain): parse, compile and
  take the limit, execute at n = 64 -- nothing may be raised;
* valid programs with unguarded exp/log/sqrt/division and non-smooth builtins:
  only located ``tp.TPError``s;
* mutants of valid text: a located ``tp.TPError`` or a program that runs.

Failures are deduplicated by (stage, exception type, the innermost frame in
``tensorprog/``) and printed with the shortest program that produced each.  A
compile that exceeds ``--timeout`` seconds counts as a timeout (reported apart).
Exit status 1 if a failure was found.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import time
import traceback
import warnings
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from hypothesis import HealthCheck, given, seed, settings  # noqa: E402

import tensorprog as tp  # noqa: E402
import test_fuzz as F  # noqa: E402


class Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise Timeout()


def where(exc: BaseException) -> str:
    """file:line of the innermost frame inside tensorprog/ (else the innermost frame)."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if "/tensorprog/" in f.filename.replace(os.sep, "/")]
    f = (ours or frames or [None])[-1]
    return f"{Path(f.filename).name}:{f.lineno}" if f else "?"


class Fuzzer:
    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.tried: Counter = Counter()
        self.failures: dict[tuple, list] = {}       # key -> [count, shortest text, message]
        self.timeouts = 0
        self.slow: dict[tuple, list] = {}           # (family, stage) -> [count, shortest text]
        self.known: Counter = Counter()

    def record(self, key: tuple, text: str, message: str) -> None:
        entry = self.failures.setdefault(key, [0, text, message])
        entry[0] += 1
        if len(text) < len(entry[1]):
            entry[1], entry[2] = text, message

    def stage(self, family: str, name: str, text: str, fn, strict: bool) -> object:
        """Run one stage; returns its value, or None after recording what went wrong."""
        signal.setitimer(signal.ITIMER_REAL, self.timeout)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return fn()
        except Timeout:
            self.timeouts += 1
            entry = self.slow.setdefault((family, name), [0, text])
            entry[0] += 1
            if len(text) < len(entry[1]):
                entry[1] = text
            return None
        except tp.TPError as err:
            if not strict:
                try:
                    if err.line:
                        F.check_located(err, text)
                except AssertionError as bad:
                    self.record((family, name, "unlocated " + type(err).__name__, where(err)), text, str(bad))
                return None
            known = F.known_bug(err)
            if known:
                self.known[known] += 1
                return None
            self.record((family, name, type(err).__name__, where(err)), text, str(err).splitlines()[0])
            return None
        except Exception as err:  # noqa: BLE001 - that is what we are looking for
            known = F.known_bug(err)
            if known:
                self.known[known] += 1
                return None
            self.record((family, name, type(err).__name__, where(err)), text,
                        f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}")
            return None
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)

    def valid(self, family: str, text: str, strict: bool) -> None:
        self.tried[family] += 1
        p = self.stage(family, "parse", text, lambda: tp.parse(text), strict=True)
        if p is None:
            return
        self.stage(family, "compile", text, lambda: p.compile().limit(), strict)
        self.stage(family, "execute", text, lambda: p.execute(n=64, trials=2, seed=1), strict)

    def mutant(self, case) -> None:
        text, kind, _ = case
        self.tried["mutant"] += 1
        try:
            p = tp.parse(text, max_nodes=F.MUTANT_NODES)
        except tp.TPError as err:
            try:
                F.check_located(err, text)
            except AssertionError as bad:
                self.record(("mutant", "parse", "unlocated " + type(err).__name__, where(err)), text, str(bad))
            return
        except Exception as err:  # noqa: BLE001
            self.record(("mutant", "parse", type(err).__name__, where(err)), text,
                        f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}")
            return
        if F.always_invalid(kind, text):
            self.record(("mutant", "parse", "accepted", kind), text, f"a {kind} mutant was accepted")
        self.stage("mutant", "compile", text, lambda: p.compile().limit(), strict=False)
        self.stage("mutant", "execute", text, lambda: p.execute(n=8, trials=1), strict=False)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds per compile/execute")
    ap.add_argument("--round", type=int, default=50, help="examples per strategy per round")
    ap.add_argument("--report", default=None, help="also write the report to this file")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGALRM, _alarm)
    fz = Fuzzer(args.timeout)
    deadline = time.monotonic() + 60 * args.minutes
    families = [("safe", F.programs(), True), ("smooth", F.programs(smooth=True), True),
                ("unsafe", F.programs(safe=False), False)]
    opts = dict(deadline=None, database=None, derandomize=False, max_examples=args.round,
                suppress_health_check=list(HealthCheck))
    rnd = 0
    while time.monotonic() < deadline:
        for family, strategy, strict in families:
            def body(text, family=family, strict=strict):
                if time.monotonic() < deadline:
                    fz.valid(family, text, strict)
            seed(args.seed * 1_000_003 + rnd)(settings(**opts)(given(strategy)(
                lambda text: body(text))))()
            rnd += 1

        @seed(args.seed * 1_000_003 + rnd)
        @settings(**{**opts, "max_examples": 4 * args.round})
        @given(F.mutants(F.programs(max_stmts=3)))
        def run_mutants(case):
            if time.monotonic() < deadline:
                fz.mutant(case)
        run_mutants()
        rnd += 1
        total = sum(fz.tried.values())
        print(f"[{time.strftime('%H:%M:%S')}] {total} programs, {len(fz.failures)} distinct failures, "
              f"{fz.timeouts} timeouts", file=sys.stderr, flush=True)
    lines = [f"programs tried: {sum(fz.tried.values())} ({', '.join(f'{k} {v}' for k, v in fz.tried.items())})",
             f"distinct failures: {len(fz.failures)} ({sum(e[0] for e in fz.failures.values())} failing programs)",
             f"timeouts (> {args.timeout:g} s): {fz.timeouts}",
             f"known bugs hit: {dict(fz.known) or 'none'}"]
    for key, (count, text, message) in sorted(fz.failures.items(), key=lambda kv: -kv[1][0]):
        lines.append(f"\n=== {' / '.join(map(str, key))}: {count} programs\n{message}\n--- shortest:\n{text}")
    for (family, stage), (count, text) in fz.slow.items():
        lines.append(f"\n=== timeout: {family} / {stage}: {count} programs over {args.timeout:g} s\n--- shortest:\n{text}")
    report = "\n".join(lines)
    print(report)
    if args.report:
        Path(args.report).write_text(report + "\n")
    return 1 if fz.failures else 0


if __name__ == "__main__":
    sys.exit(main())
