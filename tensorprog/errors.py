"""The project's exceptions: every problem in a program is located.

A ``TPError`` carries the file name, line and column and the source text, so its
``str`` is ``FILE:LINE:COL: message`` followed by the offending line and a caret.
"""
from __future__ import annotations


class TPError(Exception):
    """Base class of every error a program can cause (message starts FILE:LINE:COL:)."""

    def __init__(self, message: str, line: int = 0, col: int = 0,
                 file: str = "<string>", source: str | None = None) -> None:
        self.message = message
        self.line = line
        self.col = col
        self.file = file
        self.source = source
        super().__init__(self._render())

    def located(self, file: str, source: str | None) -> "TPError":
        """The same error with its file and source attached (keeps the position)."""
        self.file, self.source = file, source
        self.args = (self._render(),)
        return self

    def _render(self) -> str:
        if self.line <= 0:
            return f"{self.file}: {self.message}"
        head = f"{self.file}:{self.line}:{self.col}: {self.message}"
        if not self.source:
            return head
        lines = self.source.removeprefix("\ufeff").split("\n")   # as the parser counts lines: at \n only
        if self.line > len(lines):
            return head
        text = "".join(" " if c.isspace() else c if c.isprintable() else "?"
                       for c in lines[self.line - 1].rstrip("\r"))
        caret = " " * max(self.col - 1, 0) + "^"
        return f"{head}\n    {text}\n    {caret}"

    def __str__(self) -> str:
        return self.args[0] if self.args else self._render()


class TPSyntaxError(TPError):
    """The text does not follow the grammar."""


class TPNameError(TPError):
    """An undefined or unbound name, an unknown parameter, builtin or keyword."""


class TPTypeError(TPError):
    """A value of the wrong kind: a matrix as a value, W @ scalar, mean(scalar)..."""


class TPValueError(TPError):
    """A constant out of its domain: invalid distribution parameters, non-integer index..."""


class TPIndexError(TPError):
    """An index outside its declared range."""


class TPLoadError(TPError):
    """A bad load(): missing file, outside the program's folder, not a numeric array."""


class TPLimitError(TPError):
    """The program would exceed a resource limit (unrolled size, memory, grid size)."""


class TPNumericalError(TPError):
    """A non-finite value (NaN or inf) appeared during execution or compilation."""


class TPUsageError(TPError):
    """A bad option or argument from the caller (not located in the program text)."""
