"""The packages' layout, drawn from their imports: no circle, and no arrow running back up.

Every ``import`` and ``from ... import`` of the two packages counts, those inside functions and
under ``TYPE_CHECKING`` included (a function-level import is how a circle hides).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"

FLOORS: tuple[frozenset[str], ...] = (
    # `entry` imports nothing of the project (it loads a command by name), and gives both
    # commands their ``--version``.
    frozenset({"errors", "units", "lazy", "exits", "entry"}),
    frozenset({"wire"}),
    frozenset({"spec"}),
    frozenset({"policy", "energy", "scaling"}),
    frozenset({"power"}),
    frozenset({"options"}),
    frozenset({"client"}),
    frozenset({"training", "sim"}),
    frozenset({"integrations", "cli", "testing"}),
    # The elastic batch size: its Lightning callback sets each epoch's size where the batch size
    # optimizer's callback sets its one (`zeus_bso.integrations.lightning_trainer.BatchTarget`).
    frozenset({"elastic"}),
    # The package's front door and the adapters' first import paths: re-exports of what is below.
    frozenset({"", "lightning", "huggingface", "accelerate", "fabric"}),
)
"""The client package's parts, lowest first: a part imports only from its own or lower floors."""

SERVER_MAY_IMPORT = frozenset({"errors", "spec", "wire", "policy", "entry", "units"})
"""What the server uses of the client package: the wire models (the protocol's through their
face, `zeus_bso.spec`; the read routes' from `zeus_bso.wire.reads`), the algorithm, how a
command is loaded, and how energy and time are written for people."""


def modules(package: str) -> dict[str, Path]:
    found = {}
    for path in (SRC / package).rglob("*.py"):
        name = ".".join(path.relative_to(SRC).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


MODULES = {**modules("zeus_bso"), **modules("zeus_bso_server")}


def imported(path: Path) -> Iterator[str]:
    """Every module of ours that ``path`` imports (a name imported from a package is the
    submodule of that name, when there is one)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        for name in names:
            while name and name not in MODULES:
                name = name.rpartition(".")[0]
            if name:
                yield name


GRAPH = {
    name: {target for target in imported(path) if target != name} for name, path in MODULES.items()
}


def part(module: str) -> str:
    """``zeus_bso.client.http`` -> ``client``; the package itself -> ``""``."""
    return module.split(".")[1] if module.count(".") else ""


def floor(module: str) -> int:
    name = part(module)
    for level, parts in enumerate(FLOORS):
        if name in parts:
            return level
    raise AssertionError(f"{module}: its part {name!r} is on no floor of tests/test_layout.py")


def test_every_part_of_the_client_package_is_on_a_floor() -> None:
    for module in GRAPH:
        if module.startswith("zeus_bso."):
            floor(module)


def test_no_import_runs_back_up() -> None:
    upward = [
        f"{module} -> {target}"
        for module, targets in GRAPH.items()
        if module == "zeus_bso" or module.startswith("zeus_bso.")
        for target in targets
        if target.startswith("zeus_bso.")
        and part(target) != part(module)
        and floor(target) >= floor(module)
    ]
    assert not upward, "imports from a part on the same or a higher floor:\n" + "\n".join(upward)


ADAPTERS = frozenset(
    {"integrations", "elastic", "lightning", "huggingface", "accelerate", "fabric"}
)
ADAPTERS_MAY_IMPORT = frozenset(
    {"training", "options", "power", "scaling", "energy", "spec", "wire", "errors", "units", "lazy"}
)
"""What the adapters may use besides one another: the training session (the run), the options,
the knobs (power limits, the learning rate), the meters, the wire models and the floor below
them; nothing of the client's conversation with the server, of the simulator or of the command
line."""


def test_the_adapters_speak_only_to_the_session() -> None:
    reaching = {
        f"{module} -> {target}"
        for module, targets in GRAPH.items()
        if module.startswith("zeus_bso.") and part(module) in ADAPTERS
        for target in targets
        if target.startswith("zeus_bso.")
        and part(target) not in ADAPTERS
        and part(target) not in ADAPTERS_MAY_IMPORT
    }
    assert not reaching, "adapters that reach past the session:\n" + "\n".join(sorted(reaching))


def test_the_server_uses_only_the_wire_models_errors_and_policy() -> None:
    used = {
        f"{module} -> {target}"
        for module, targets in GRAPH.items()
        if module.startswith("zeus_bso_server")
        for target in targets
        if target.startswith("zeus_bso.") and part(target) not in SERVER_MAY_IMPORT
    }
    assert not used


def circles() -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(GRAPH[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(GRAPH):
        if node not in index:
            visit(node)
    return found


MOST_LINES = 600
"""The longest a module of either package may be: one that grows past it holds more than one
thing, and is split by what it does."""


def test_no_module_is_longer_than_most_lines() -> None:
    lengths = {name: len(path.read_text().splitlines()) for name, path in MODULES.items()}
    assert {name: n for name, n in lengths.items() if n > MOST_LINES} == {}


def test_no_import_circles() -> None:
    assert circles() == []


@pytest.mark.parametrize(
    ("module", "target"),
    [("zeus_bso.spec", "zeus_bso.policy.bandits"), ("zeus_bso.client.http", "zeus_bso.cli.jobs")],
)
def test_the_checks_see_an_import_that_would_break_the_layout(module: str, target: str) -> None:
    """Negative control: an import inside a function, added to the graph, is an upward arrow
    and a circle."""
    GRAPH[module].add(target)
    try:
        with pytest.raises(AssertionError):
            test_no_import_runs_back_up()
        assert circles()
    finally:
        GRAPH[module].discard(target)


def test_an_import_inside_a_function_or_under_type_checking_counts(tmp_path: Path) -> None:
    source = tmp_path / "module.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from zeus_bso.spec import JobSpec\n"
        "def f() -> None:\n"
        "    from zeus_bso.policy.bandits import BANDITS\n"
        "    import zeus_bso.client.http\n"
    )
    assert sorted(imported(source)) == [
        "zeus_bso.client.http",
        "zeus_bso.policy.bandits",
        "zeus_bso.spec",
    ]


def test_the_architecture_page_lists_the_middlewares_in_the_order_they_run() -> None:
    """The page's life of a report names the server's middlewares, outermost first: the order
    the app adds them in (a token set: every one of them)."""
    import re

    from zeus_bso_server.api.app import create_app
    from zeus_bso_server.settings import load_settings

    page = (SRC.parent / "docs" / "concepts" / "architecture.md").read_text()
    sentence = page.split("the middlewares run, outermost first:", 1)[1].split("; then", 1)[0]
    listed = re.findall(r"`(\w+)\.py`", sentence)
    app = create_app(load_settings(token="layout-test-token", database_url="sqlite://"))
    running = [m.cls.__module__.rpartition(".")[2] for m in app.user_middleware]
    assert listed == running
