"""Text -> abstract syntax tree, with the grammar in ``grammar/tensorprog.lark``.

Lark (LALR) parses; a post-lexer drops newlines inside brackets so that lists and
calls may span lines; a ``Transformer`` whose methods are named after the grammar's
rules builds ``syntax`` nodes carrying line and column.
"""
from __future__ import annotations

import re

from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Iterator

from lark import Lark, Token, Transformer_NonRecursive, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from . import syntax as S
from ..errors import TPSyntaxError

_OPEN, _CLOSE = {"LPAR", "LSQB"}, {"RPAR", "RSQB"}


def grammar_text() -> str:
    """The grammar, from the installed package or, in a source tree, from ``grammar/``."""
    try:
        return resources.files("tensorprog.grammar").joinpath("tensorprog.lark").read_text()
    except (ModuleNotFoundError, FileNotFoundError):
        return (Path(__file__).resolve().parents[2] / "grammar" / "tensorprog.lark").read_text()


class _BracketNewlines:
    """Post-lexer: inside ( ) and [ ] a newline is whitespace."""
    always_accept = ("_NL",)

    def process(self, stream: Iterator[Token]) -> Iterator[Token]:
        depth = 0
        for tok in stream:
            if tok.type in _OPEN:
                depth += 1
            elif tok.type in _CLOSE:
                depth = max(depth - 1, 0)
            elif tok.type == "_NL" and depth:
                continue
            yield tok


@lru_cache(maxsize=1)
def _lark() -> Lark:
    """The parser.  Lark's own cache keeps the LALR tables it derives from the grammar in a
    temporary file (named by a digest of the grammar and the options), so that a new process
    loads them in milliseconds instead of deriving them again (~0.1 s)."""
    return Lark(grammar_text(), parser="lalr", postlex=_BracketNewlines(),
                propagate_positions=True, maybe_placeholders=True, cache=True)


def _pos(tok) -> tuple[int, int]:
    if isinstance(tok, Token):
        return tok.line, tok.column
    return tok.line, tok.col


@v_args(meta=True)
class _ToAst(Transformer_NonRecursive):
    """One method per grammar rule; each returns a ``syntax`` node.  Non-recursive, so a deep
    expression reaches the lowering, which bounds it with a located error."""

    # ---- expressions
    def number(self, meta, c):
        return S.Number(meta.line, meta.column, float(c[0]))

    def string(self, meta, c):
        return S.String(meta.line, meta.column, str(c[0])[1:-1])

    def name(self, meta, c):
        return S.Name(meta.line, meta.column, str(c[0]))

    def index(self, meta, c):
        return S.Index(meta.line, meta.column, str(c[0]), tuple(c[1:]))

    def call(self, meta, c):
        args = [a for a in c[1:] if a is not None]
        pos = tuple(a for a in args if not isinstance(a, tuple))
        kws = tuple(a for a in args if isinstance(a, tuple))
        return S.Call(meta.line, meta.column, str(c[0]), pos, kws)

    def pos_arg(self, meta, c):
        return c[0]

    def kw_arg(self, meta, c):
        return (str(c[0]), c[1])

    def _bin(op):  # noqa: N805 - a factory used in the class body
        def rule(self, meta, c):
            return S.BinOp(meta.line, meta.column, op, c[0], c[1])
        return rule

    add, sub, mul, div, matmul, pow = _bin("+"), _bin("-"), _bin("*"), _bin("/"), _bin("@"), _bin("**")

    def cmp(self, meta, c):
        return S.BinOp(meta.line, meta.column, str(c[1]), c[0], c[2])

    def neg(self, meta, c):
        return S.Neg(meta.line, meta.column, c[0])

    def attr(self, meta, c):
        if str(c[1]) != "T":
            line, col = _pos(c[1])
            raise TPSyntaxError(f"unknown attribute '.{c[1]}': only '.T' (transpose) exists", line, col)
        return S.Transpose(meta.line, meta.column, c[0])

    def cond(self, meta, c):
        return S.Cond(meta.line, meta.column, c[0], c[1], c[2])

    def range(self, meta, c):
        return S.Range(meta.line, meta.column, c[0], c[1])

    def sum_over(self, meta, c):
        return S.SumOver(meta.line, meta.column, str(c[0]), c[1], c[2])

    def list_lit(self, meta, c):
        return S.ListLit(meta.line, meta.column, tuple(x for x in c if x is not None))

    def list_comp(self, meta, c):
        return S.ListComp(meta.line, meta.column, c[0], str(c[1]), c[2])

    # ---- statements
    def start(self, meta, c):
        return S.Module(tuple(c))

    def body(self, meta, c):
        return tuple(c)

    def param(self, meta, c):
        return S.Param(meta.line, meta.column, str(c[0]), c[1])

    def dim(self, meta, c):
        return S.Dim(meta.line, meta.column, str(c[0]), c[1])

    def decl(self, meta, c):
        return S.Decl(meta.line, meta.column, str(c[0]), c[1])

    def dist(self, meta, c):
        call = self.call(meta, c)
        return S.Dist(call.line, call.col, call.func, call.args, call.kwargs)

    def vector(self, meta, c):
        *decls, width, dist = c
        return S.VectorDecl(meta.line, meta.column, tuple(decls),
                            None if width is None else str(width), dist,
                            None if width is None else _pos(width))

    def data(self, meta, c):
        decl, width, value = c
        return S.Data(meta.line, meta.column, decl, str(width), value, _pos(width))

    def matrix(self, meta, c):
        *decls, rows, x, cols, dist = c
        decl, more = decls[0], tuple(decls[1:])
        if x is not None and str(x) != "x":
            line, col = _pos(x)
            raise TPSyntaxError(f"expected 'x' between the widths of a matrix, got '{x}'", line, col)
        shape = None if rows is None else (str(rows), str(cols))
        at = None if rows is None else (_pos(rows), _pos(cols))
        return S.MatrixDecl(meta.line, meta.column, decl, shape, dist, at, more)

    def target(self, meta, c):
        return (str(c[0]), tuple(x for x in c[1:] if x is not None))

    def assign(self, meta, c):
        (name, idx), value = c
        return S.Assign(meta.line, meta.column, name, idx, value)

    def for_loop(self, meta, c):
        return S.For(meta.line, meta.column, str(c[0]), c[1], c[2])

    def def_fn(self, meta, c):
        *params, body = c[1:]
        return S.Def(meta.line, meta.column, str(c[0]),
                     tuple(str(p) for p in params if p is not None), body)

    def out(self, meta, c):
        (name, idx), value = c
        return S.Out(meta.line, meta.column, name, value, idx)


def _describe(err: UnexpectedInput) -> str:
    if isinstance(err, UnexpectedCharacters):
        return f"unexpected character {err.char!r}"
    if isinstance(err, UnexpectedEOF):
        return "unexpected end of program"
    tok = err.token
    if tok.type == "$END":
        return "unexpected end of program"
    shown = "newline" if tok.type == "_NL" else repr(str(tok))
    expected = sorted({r for r in map(_readable, getattr(err, "expected", ())) if r})
    hint = f" (expected {', '.join(expected[:8])})" if expected else ""
    return f"unexpected {shown}{hint}"


def _end_position(text: str) -> tuple[int, int]:
    """Just after the last token (comments and blank lines skipped)."""
    lines = text.split("\n")                 # lines as the lexer counts them
    for number in range(len(lines), 0, -1):
        code = lines[number - 1].split("#", 1)[0].rstrip()
        if code:
            return number, len(code) + 1
    return 1, 1


_READABLE = {"AT": "'@'", "LSQB": "'['", "RSQB": "']'", "LPAR": "'('", "RPAR": "')'", "LBRACE": "'{'",
             "RBRACE": "'}'", "COMMA": "','", "EQUAL": "'='", "PLUS": "'+'", "MINUS": "'-'",
             "STAR": "'*'", "SLASH": "'/'", "COLON": "':'", "TILDE": "'~'", "DOT": "'.'",
             "SEMICOLON": "';'", "CMP": "a comparison", "NAME": "a name", "NUMBER": "a number",
             "STRING": "a string", "_NL": "a newline", "$END": "the end", "DOUBLESTAR": "'**'"}


def _readable(terminal: str) -> str:
    if terminal in _READABLE:
        return _READABLE[terminal]
    if terminal.startswith("__ANON") or terminal.startswith("_"):
        return ""
    return f"'{terminal.lower()}'" if terminal.isalpha() else terminal


#: a backslash-newline with nothing but blanks after it: a continuation of no line
_DANGLING = re.compile(r"\\\r?\n[ \t\f\r\n]*\Z")


@lru_cache(maxsize=64)
def parse_text(text: str, file: str = "<string>") -> S.Module:
    """Parse ``.tp`` text into a ``syntax.Module``; raise ``TPSyntaxError`` located in ``file``.
    The tree is immutable, so the last texts' trees are kept (a template parsed once per call of
    ``tp.kernel`` is parsed once)."""
    source = text if text.endswith("\n") else text + "\n"
    if source.startswith("\ufeff"):             # a byte-order mark: invisible, so not a column
        source = source[1:]
    dangling = _DANGLING.search(source)
    start = source.rfind("\n", 0, dangling.start()) + 1 if dangling else 0
    if dangling and "#" not in source[start:dangling.start()]:   # (a backslash ending a comment is text)
        line = source.count("\n", 0, dangling.start()) + 1      # as in Python: a continuation joins a line
        col = dangling.start() - start + 1
        raise TPSyntaxError("a line continuation '\\' at the end of the file joins no line", line, col,
                            file, text)
    try:
        tree = _lark().parse(source)
        return _ToAst().transform(tree)
    except UnexpectedInput as err:
        line, col = getattr(err, "line", 0), getattr(err, "column", 0)
        if isinstance(err, (UnexpectedToken, UnexpectedEOF)) and (
                isinstance(err, UnexpectedEOF) or err.token.type == "$END"):
            line, col = _end_position(text)
        raise TPSyntaxError(_describe(err), max(line, 1), max(col, 1), file, text) from None
    except TPSyntaxError as err:
        raise err.located(file, text) from None
    except Exception as err:  # VisitError wrapping ours
        inner = getattr(err, "orig_exc", None)
        if isinstance(inner, TPSyntaxError):
            raise inner.located(file, text) from None
        raise
