"""The package's shape: imports run one way with no cycle, evaluation stays out of the
product, every subpackage ships, and the read path loads neither torch, pyro nor pandas.

The import graph is read from the source (every ``import`` statement, at module level,
inside functions and under ``if TYPE_CHECKING:``), so a cycle hidden behind an import
inside a function, or one that exists only for the type checker, fails here too: the
layers hold for the reader of the code, not only for the interpreter. (The graph of what
runs, without the type checker's imports, is kept too: the test that it has no cycle is
the older, weaker rule.)
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import records as R

ROOT = Path(__file__).resolve().parents[1]
#: The folders of the import package ``doxa`` (pyproject.toml: package-dir).
CODE_DIRS = ("model", "inference", "data", "cli")
EVALUATION = "doxa.inference.evaluation"
#: The product: what a user's agent runs. None of it may import the evaluation part.
PRODUCT = ("doxa.model", "doxa.data", "doxa.inference.read", "doxa.inference.learn", "doxa.inference.agent")
HEAVY = ("torch", "pyro", "pandas")


def module_files() -> dict[str, Path]:
    """Dotted module name → file, for every module of the package."""
    out = {"doxa": ROOT / "__init__.py"}
    for top in CODE_DIRS:
        for path in sorted((ROOT / top).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(("doxa",) + parts)] = path
    return out


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imported_modules(name: str, path: Path, modules: set[str], *, type_checking: bool = True) -> set[str]:
    """The package's modules that ``name`` imports anywhere in its body (without those under
    ``if TYPE_CHECKING:`` when ``type_checking`` is False: what runs)."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()

    def resolve(base: str, level: int) -> str:
        if level == 0:
            return base
        anchor = name.split(".") if is_package else name.split(".")[:-1]
        anchor = anchor[: len(anchor) - (level - 1)]
        return ".".join(anchor + ([base] if base else []))

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if not type_checking and isinstance(child, ast.If) and _is_type_checking(child):
                for rest in child.orelse:
                    visit(rest)
                continue
            if isinstance(child, ast.Import):
                for alias in child.names:
                    if alias.name in modules:
                        found.add(alias.name)
            elif isinstance(child, ast.ImportFrom):
                base = resolve(child.module or "", child.level)
                for alias in child.names:
                    full = f"{base}.{alias.name}"
                    if full in modules:
                        found.add(full)
                    elif base in modules:
                        found.add(base)
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
    found.discard(name)
    return found


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    files = module_files()
    names = set(files)
    return {name: imported_modules(name, path, names) for name, path in files.items()}


@pytest.fixture(scope="module")
def runtime_graph() -> dict[str, set[str]]:
    files = module_files()
    names = set(files)
    return {name: imported_modules(name, path, names, type_checking=False) for name, path in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan 1972), iteratively."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_imports_inside_functions_and_for_the_type_checker(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from doxa.b import X\n"
                      "def f():\n    from . import c\n    import doxa.d\n")
    modules = {"doxa.a.m", "doxa.a.c", "doxa.b", "doxa.d"}
    assert imported_modules("doxa.a.m", source, modules) == {"doxa.a.c", "doxa.b", "doxa.d"}
    assert imported_modules("doxa.a.m", source, modules, type_checking=False) == {"doxa.a.c", "doxa.d"}


def test_no_import_cycle(runtime_graph):
    assert len(runtime_graph) > 40  # the whole package was read
    assert cycles(runtime_graph) == []


def test_data_is_layered_with_no_cycle_even_for_the_type_checker(graph):
    """The modules that work on an open store annotate with :class:`doxa.data.session.Session`,
    never with ``Store``: ``data/store.py`` sits above them, and in ``data/`` only what opens
    stores of its own (the demo, the replay) imports it."""
    data = {name: {d for d in deps if d.startswith("doxa.data")} for name, deps in graph.items()
            if name.startswith("doxa.data")}
    assert cycles(data) == []
    above_the_store = {name for name, deps in data.items() if "doxa.data.store" in deps}
    assert above_the_store <= {"doxa.data", "doxa.data.demo", "doxa.data.replay"}


def test_no_import_cycle_even_for_the_type_checker(graph):
    assert cycles(graph) == []


def test_the_product_never_imports_the_evaluation_part(graph):
    bad = sorted((name, dep) for name, deps in graph.items() for dep in deps
                 if (name == "doxa" or name.startswith(PRODUCT)) and dep.startswith(EVALUATION))
    assert bad == []


def test_dependencies_run_cli_to_inference_to_model_and_data(graph):
    def part(name: str) -> str:
        return name.split(".")[1] if name.count(".") else "doxa"

    bad = sorted((name, dep) for name, deps in graph.items() for dep in deps
                 if (part(name), part(dep)) in {("data", "model"), ("data", "inference"), ("data", "cli"),
                                                ("model", "inference"), ("model", "cli"), ("inference", "cli")})
    assert bad == []


def test_the_read_path_never_imports_the_agent(graph):
    """``inference/read`` answers questions from the store; ``inference/agent`` (remember, the
    organizer) writes to it through the model. The agent may use the read path, never the reverse."""
    bad = sorted((name, dep) for name, deps in graph.items() for dep in deps
                 if name.startswith("doxa.inference.read") and dep.startswith("doxa.inference.agent"))
    assert bad == []


def test_every_subpackage_is_listed_in_pyproject():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    listed = set(config["tool"]["setuptools"]["packages"])
    packages = {name for name, path in module_files().items() if path.name == "__init__.py"}
    assert packages == listed


# ---------------------------------------------------------------------------- the read path
@pytest.fixture(scope="module")
def small_store(tmp_path_factory) -> tuple[str, str]:
    import doxa

    path = str(tmp_path_factory.mktemp("arch") / "small.duckdb")
    records = R.small_store_records()
    with doxa.open(path) as mem:
        mem.ingest(records)
    question = next(r["id"] for r in records if r["type"] == "question")
    return path, question


def _loaded_after(code: str) -> dict:
    """Run ``code`` in a fresh interpreter; it must print one JSON line last."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_doxa_belief_imports_neither_torch_pyro_nor_pandas(small_store):
    path, question = small_store
    code = f"""
import io, json, sys, contextlib
from doxa.cli import main
sys.argv = ["doxa", "belief", {question!r}, "--db", {path!r}, "--json"]
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        main()
    except SystemExit as stop:
        assert not stop.code, stop.code
print(json.dumps({{"belief": json.loads(out.getvalue()), "heavy": [m for m in {HEAVY!r} if m in sys.modules]}}))
"""
    seen = _loaded_after(code)
    assert seen["belief"]["question"] == question
    assert seen["heavy"] == []


def test_the_python_api_belief_imports_neither_torch_pyro_nor_pandas(small_store):
    path, question = small_store
    code = f"""
import json, sys
import doxa
b = doxa.open({path!r}).belief({question!r})
print(json.dumps({{"question": b.question, "heavy": [m for m in {HEAVY!r} if m in sys.modules]}}))
"""
    seen = _loaded_after(code)
    assert seen == {"question": question, "heavy": []}


def test_the_architecture_page_names_every_module():
    """docs/architecture.md is where a newcomer learns what each module holds: a module it does not name is
    a room nobody was told about."""
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    missing = [str(path.relative_to(ROOT)) for folder in CODE_DIRS for path in sorted((ROOT / folder).rglob("*.py"))
               if path.name != "__init__.py" and "evaluation/worlds" not in str(path)
               and f"`{path.name}`" not in page and f"`{path.relative_to(ROOT)}`" not in page]
    assert missing == [], f"docs/architecture.md does not name: {missing}"
