"""Who may import whom, read from the modules' own import statements (ast, nothing run).

* analysis/ flows one way: ``read`` -> ``compute`` -> ``analyze`` (the whole result) ->
  ``present`` -> ``commands`` (and the ``python -m`` fronts on top). A module imports only from
  its own layer or the ones before it, and no two modules import each other round a circle.
* the analysis package imports neither torch, lightning nor submitit, and none of the job's
  torch-side modules for its formulas: those live in ``scalescope.allreduce_model``, which
  both sides import and which itself imports nothing beyond the standard library and numpy.
* src/scalescope/job/ is rooms by concern, lowest first: ``tracking`` -> ``faults`` ->
  ``clocks`` -> ``diagnosis`` -> ``profile`` -> ``run`` -> ``loader_bench``; a module imports
  only from its own room or the ones before it.
* no module of src/ or analysis/ imports another that imports it back, at any distance; no
  folder holds more than 15 modules.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from analysis_helpers import REPO

FORBIDDEN_IN_ANALYSIS = ("torch", "lightning", "submitit", "scalescope.job.diagnosis")


def imports_of(path: Path) -> set[str]:
    """Every module a file imports, absolute (relative imports resolved in its package)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = ".".join(path.relative_to(REPO).with_suffix("").parts[:-1]).removeprefix("src.")
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


ANALYSIS_FILES = sorted((REPO / "analysis").rglob("*.py"))
LAYERS = ("read", "compute", "analyze", "present", "commands", "front")
"""analysis/'s layers, lowest first; ``front``: the package's own ``__init__`` and the
``python -m analysis.summarize`` / ``analysis.project`` entry points."""


def module_name(path: Path) -> str:
    dotted = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
    return dotted.removeprefix("src.")


def layer_of(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in ("read", "compute", "present", "commands"):
        return parts[1]
    return "analyze" if module == "analysis.analyze" else "front"


@pytest.mark.parametrize("path", ANALYSIS_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_the_analysis_imports_nothing_of_the_training_side(path: Path) -> None:
    bad = {
        m
        for m in imports_of(path)
        for f in FORBIDDEN_IN_ANALYSIS
        if m == f or m.startswith(f + ".")
    }
    assert not bad, f"{path.name} imports {sorted(bad)}"


def test_the_trace_reader_imports_only_the_standard_library() -> None:
    """scalescope.traces serves the job and the analysis alike: no torch, no numpy."""
    roots = {m.split(".")[0] for m in imports_of(REPO / "src" / "scalescope" / "traces.py")}
    assert roots <= {"__future__", "gzip", "json", "re", "collections", "pathlib", "typing"}


def test_the_shared_formulas_import_no_framework() -> None:
    path = REPO / "src" / "scalescope" / "allreduce_model.py"
    roots = {m.split(".")[0] for m in imports_of(path)}
    assert roots <= {"__future__", "math", "collections", "typing", "numpy"}


def test_the_collectives_registry_imports_only_the_shared_formulas() -> None:
    """scalescope.collectives names a strategy's collectives for the job and the analysis
    alike: the standard library and the all-reduce arithmetic, nothing more."""
    found = imports_of(REPO / "src" / "scalescope" / "collectives.py")
    shared = {m for m in found if m.startswith("scalescope")}
    assert shared <= {"scalescope.allreduce_model", "scalescope.allreduce_model.bus_factor"}
    roots = {m.split(".")[0] for m in found - shared}
    assert roots <= {"__future__", "collections", "dataclasses", "typing"}


def test_the_shared_run_length_imports_only_the_standard_library() -> None:
    """scalescope.run_length decides for the job and the analysis alike whether a profiler
    capture fits: no torch, no lightning."""
    roots = {m.split(".")[0] for m in imports_of(REPO / "src" / "scalescope" / "run_length.py")}
    assert roots <= {"__future__", "math", "collections", "dataclasses"}


def _module_graph() -> dict[str, set[str]]:
    """analysis.<...> -> the analysis modules it imports (at any depth of its code); a package
    imported by name (``from analysis.present.charts import charts``) counts as its module."""
    mods = {module_name(p): p for p in ANALYSIS_FILES}
    graph = {}
    for name, path in mods.items():
        found = set()
        for m in imports_of(path):
            if m in mods and m != name and m != "analysis":
                found.add(m)
        graph[name] = found
    return graph


def test_the_analysis_layers_import_only_downward() -> None:
    """read -> compute -> analyze -> present -> commands: nothing reaches up a layer."""
    graph = _module_graph()
    upward = [
        f"{name} ({layer_of(name)}) imports {dep} ({layer_of(dep)})"
        for name, deps in sorted(graph.items())
        for dep in sorted(deps)
        if LAYERS.index(layer_of(dep)) > LAYERS.index(layer_of(name))
    ]
    assert not upward, "upward imports:\n" + "\n".join(upward)


def test_every_analysis_module_sits_in_a_layer() -> None:
    """A new module goes into read/, compute/, present/ or commands/: only the package's own
    front (``__init__``, ``analyze``, the ``python -m`` entry points) stands at the top."""
    top = {p.name for p in (REPO / "analysis").glob("*.py")}
    assert top == {"__init__.py", "analyze.py", "summarize.py", "project.py"}


def circles_in(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import circle a depth-first walk meets (each as its modules, first one repeated)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    circles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                circles.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for start in sorted(graph):
        if start not in state:
            visit(start, [start])
    return circles


def test_the_analysis_modules_import_each_other_in_no_circle() -> None:
    """Reading -> computing -> presenting -> commands: a module that one of its own imports
    imports back is a circle (metrics and diagnosis were one)."""
    circles = circles_in(_module_graph())
    assert not circles, f"import circles: {[' -> '.join(c) for c in circles][:5]}"


SRC_FILES = sorted((REPO / "src" / "scalescope").rglob("*.py"))


def import_graph(files: list[Path]) -> dict[str, set[str]]:
    """module -> the modules among ``files`` it imports, at any depth of its code (a function's
    own import and one under TYPE_CHECKING count: either joins a circle). A package it sits in
    is no edge: Python imports a module's packages before the module itself."""
    mods = {module_name(p): p for p in files}
    graph = {}
    for name, path in mods.items():
        own_packages = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
        graph[name] = {m for m in imports_of(path) if m in mods and m != name} - own_packages
    return graph


def test_no_module_of_src_or_analysis_imports_itself_round_a_circle() -> None:
    """The launch side, the job side, the shared modules and the analysis as one graph
    (launch's resources and sweep_config were a circle)."""
    circles = circles_in(import_graph(SRC_FILES + ANALYSIS_FILES))
    assert not circles, f"import circles: {[' -> '.join(c) for c in circles][:5]}"


JOB = REPO / "src" / "scalescope" / "job"
JOB_ROOMS = ("tracking", "faults", "clocks", "diagnosis", "profile", "run", "loader_bench")
"""src/scalescope/job/'s rooms, lowest first: Comet and the faults need nothing of the run;
the clocks time it; the diagnosis reads the clocks; the profiler's capture rides on the
diagnosis' step clock; the run assembles them all; the loader benchmark is a command of its
own on top."""


def job_room_of(module: str) -> str:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 else "front"


def test_the_job_rooms_import_only_downward() -> None:
    """A room imports from itself and the rooms before it, never from one after it (the
    package's own ``__init__`` is the front: it names the rooms and imports none)."""
    order = (*JOB_ROOMS, "front")
    graph = import_graph(SRC_FILES)
    upward = [
        f"{name} ({job_room_of(name)}) imports {dep} ({job_room_of(dep)})"
        for name, deps in sorted(graph.items())
        if name.startswith("scalescope.job.")
        for dep in sorted(deps)
        if dep.startswith("scalescope.job")
        and order.index(job_room_of(dep)) > order.index(job_room_of(name))
    ]
    assert not upward, "upward imports:\n" + "\n".join(upward)


def test_every_job_module_sits_in_a_room() -> None:
    """A new module goes into one of the rooms (or a new room named in JOB_ROOMS, in order)."""
    assert {p.name for p in JOB.glob("*.py")} == {"__init__.py"}
    rooms = {p.name for p in JOB.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert rooms == set(JOB_ROOMS)


@pytest.mark.parametrize(
    "folder",
    sorted({p.parent for p in SRC_FILES + ANALYSIS_FILES}),
    ids=lambda p: str(p.relative_to(REPO)),
)
def test_no_folder_holds_more_than_15_modules(folder: Path) -> None:
    modules = [p for p in folder.glob("*.py") if p.name != "__init__.py"]
    assert len(modules) <= 15, f"{len(modules)} modules: split the folder by concern"
