"""The package's layout holds: stages as subpackages, a one-way package graph (the order of
docs/architecture.md, "Package dependencies"), no import cycles, no private names imported across
modules, a light ``import tensorprog``, and the documented public API.

The import graph is read from the source (``ast``), imports inside functions included; only
imports under ``if TYPE_CHECKING:`` are left out (they never run)."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "tensorprog"
STAGES = ("lang", "ir", "symbolic", "distributions", "finite", "limit", "expect", "tools")
MAX_TOP_LEVEL = 10


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def runtime_nodes(tree: ast.AST):
    """Every node of the tree except what sits under ``if TYPE_CHECKING:``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def imports_of(name: str) -> list[tuple[str, str | None]]:
    """(module imported, name taken from it or None) for every import in module ``name``."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    return imports_in(path.read_text(), package)


def imports_in(text: str, package: str) -> list[tuple[str, str | None]]:
    """:func:`imports_of` for the source ``text`` of a module in ``package`` (relative imports
    are resolved against it)."""
    out = []
    for node in runtime_nodes(ast.parse(text)):
        if isinstance(node, ast.Import):
            out += [(a.name, None) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for a in node.names:
                sub = f"{target}.{a.name}"
                out.append((sub, None) if sub in MODULES else (target, a.name))
    return out


def graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports (a package's __init__ importing its own children
    is how it re-exports them, not a dependency back)."""
    edges = {}
    for name in MODULES:
        deps = {m for m, _ in imports_of(name) if m in MODULES and m != name}
        if MODULES[name].name == "__init__.py":
            deps = {d for d in deps if not d.startswith(name + ".")}
        edges[name] = deps
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in edges:
        if v not in index:
            visit(v)
    return found


#: The packages (and top-level modules) and what each may import directly; a package may also
#: import whatever those may (the closure), and nothing else.  Bottom up: the leaves (errors, the
#: builtin table, the argument checks, .npz files), the IR, the sympy side, the distributions;
#: then the front end (lang) and the back ends (finite and expect, then limit) side by side, each
#: building on the IR and never on the other; the Python API (program) joins them; tools build
#: on the API; the CLI and the re-exports sit on top.  ``tensorprog`` is the package's __init__.
DEPENDS: dict[str, frozenset[str]] = {name: frozenset(deps) for name, deps in {
    "errors": (),
    "builtins": ("errors",),
    "arguments": ("errors",),
    "npz": ("errors",),
    "display": (),
    "ir": ("builtins",),
    "symbolic": ("ir",),
    "distributions": ("symbolic",),
    "lang": ("distributions", "arguments"),
    "finite": ("distributions", "arguments", "npz", "display"),
    "expect": ("distributions", "arguments"),
    "limit": ("finite", "expect"),
    "sweep": ("lang", "limit"),
    "program": ("sweep",),
    "tools": ("program",),
    "cli": ("tools",),
    "converge": ("tools",),
    "plot": ("tools",),
    "__main__": ("cli",),
    "tensorprog": ("program", "tools"),
}.items()}

#: Edges against that order that other branches of issue 23 remove (module -> module imported,
#: owner).  Delete an entry once its owner's branch is merged; the test then keeps it out.
KNOWN_BACK_EDGES = {
}


def package_of(module: str) -> str:
    """``tensorprog.limit.ledger`` -> ``limit``; ``tensorprog.cli`` -> ``cli``; ``tensorprog`` itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def may_import(depends: dict[str, frozenset[str]]) -> dict[str, frozenset[str]]:
    """Each package -> every package it may import: the closure of ``depends``."""
    closed: dict[str, frozenset[str]] = {}

    def reach(name: str) -> frozenset[str]:
        if name not in closed:
            found = set(depends[name])
            for dep in depends[name]:
                found |= reach(dep)
            closed[name] = frozenset(found)
        return closed[name]

    for name in depends:
        reach(name)
    return closed


def back_edges(edges: dict[str, set[str]], depends: dict[str, frozenset[str]]) -> set[tuple[str, str]]:
    """The module edges a -> b between two packages where b's package is not one a's may import."""
    allowed = may_import(depends)
    return {(a, b) for a, targets in edges.items() for b in targets
            if package_of(a) != package_of(b) and package_of(b) not in allowed[package_of(a)]}


def test_every_package_has_a_place_in_the_order():
    assert {package_of(m) for m in MODULES} == set(DEPENDS)
    assert cycles({k: set(v) for k, v in DEPENDS.items()}) == []


def test_the_order_check_sees_imports_inside_functions():
    """A lazy import is an edge like any other (a back-edge hidden in a function is still one)."""
    text = "def f():\n    from ..tools.display import show\n    import tensorprog.lang.parser\n"
    found = {m for m, _ in imports_in(text, "tensorprog.limit")}
    assert {"tensorprog.tools.display", "tensorprog.lang.parser"} <= found
    edges = {"tensorprog.limit.x": found & set(MODULES), "tensorprog.tools.kernel": {"tensorprog.limit.compiler"}}
    assert back_edges(edges, DEPENDS) == {("tensorprog.limit.x", "tensorprog.tools.display"),
                                          ("tensorprog.limit.x", "tensorprog.lang.parser")}


def test_the_package_graph_is_one_way():
    """No package imports one after it in :data:`DEPENDS`'s order, nor a sibling (lang and the
    back ends; finite and expect), imports inside functions included; only the commented
    :data:`KNOWN_BACK_EDGES` remain, for their owners to remove."""
    found = back_edges(graph(), DEPENDS)
    assert sorted(found - set(KNOWN_BACK_EDGES)) == []


def test_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    assert cycles(graph()) == []


def test_no_private_names_imported_across_modules():
    private = [f"{name} imports {target}.{what}" for name in MODULES for target, what in imports_of(name)
               if what and target in MODULES and what.startswith("_") and not what.startswith("__")]
    assert private == []


def test_stages_are_subpackages_and_the_top_level_is_small():
    top = [n for n, path in MODULES.items() if path.parent == PACKAGE]
    assert len(top) <= MAX_TOP_LEVEL, top
    for stage in STAGES:
        assert (PACKAGE / stage / "__init__.py").is_file(), stage


def test_ir_imports_no_lark_numpy_or_sympy():
    for name in MODULES:
        if name.startswith("tensorprog.ir"):
            external = {m.split(".")[0] for m, _ in imports_of(name)}
            assert not external & {"lark", "numpy", "sympy", "scipy"}, name


def _fresh(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          cwd=ROOT).stdout


def test_import_tensorprog_loads_neither_sympy_nor_scipy():
    loaded = _fresh("import sys, tensorprog\n"
                    "print(sorted({m.split('.')[0] for m in sys.modules} & {'sympy', 'scipy'}))")
    assert loaded.strip() == "[]"


def test_checking_and_executing_a_program_loads_no_sympy():
    """tpc check and tpc execute of a program without diff() stay clear of the compiler's stack."""
    loaded = _fresh("import sys, tensorprog as tp\n"
                    "p = tp.load('programs/relu_nngp.tp')\n"
                    "p.execute(n=64, trials=1)\n"
                    "print('sympy' in sys.modules)")
    assert loaded.strip() == "False"


def test_documented_public_api():
    import tensorprog as tp
    from tensorprog.converge import converge
    from tensorprog.plot import plot_convergence
    from tensorprog.tools.converge import converge as converge_impl
    from tensorprog.tools.kernel import kernel
    from tensorprog.tools.plot import plot_convergence as plot_impl
    assert converge is converge_impl and plot_convergence is plot_impl and tp.kernel is kernel
    for name in tp.__all__:
        assert getattr(tp, name) is not None, name
    assert {"load", "parse", "Program", "kernel", "TPError"} <= set(tp.__all__)
    with pytest.raises(AttributeError):
        tp.no_such_name


def test_python_dash_m_runs_the_cli():
    proc = subprocess.run([sys.executable, "-m", "tensorprog", "check", "programs/relu_nngp.tp"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "MatMul" in proc.stdout
