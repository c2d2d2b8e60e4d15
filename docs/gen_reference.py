"""Generates the reference pages from the code: both command lines from their Typer apps, the
HTTP endpoints from the app's OpenAPI schema and the policy options from the job model's fields
(committed under ``docs/reference/``, so that their links work where the repository is read;
``python docs/gen_reference.py`` writes them again, and a test holds them to the code), and, at
every build (mkdocs-gen-files), one page per module of both packages (with its navigation,
through mkdocs-literate-nav), as upstream Zeus's ``docs/gen_ref_pages.py`` does. Nothing here
is written by hand, so nothing can drift."""

from __future__ import annotations

import ast
import importlib.util
import json
from pathlib import Path
from typing import Any

import click
import typer
import typer.core

from zeus_bso.cli import app as client_app
from zeus_bso.cli import simulate_flags
from zeus_bso.spec import UPSTREAM_OPTIONS, JobSpec, policy_options
from zeus_bso_server.api.app import create_app
from zeus_bso_server.cli import app as server_app
from zeus_bso_server.settings import Settings


def _commands(command: click.Command, path: list[str]) -> list[tuple[list[str], click.Command]]:
    found = [(path, command)]
    if isinstance(command, click.Group):
        for name in sorted(command.commands):
            found += _commands(command.commands[name], [*path, name])
    return found


def cli_page() -> str:
    had_rich = typer.core.HAS_RICH
    typer.core.HAS_RICH = False  # click's plain help, not a terminal's boxes
    try:
        return _cli_page()
    finally:
        typer.core.HAS_RICH = had_rich


def _cli_page() -> str:
    lines = [
        "# Command line",
        "",
        "Both commands' help, generated from their definitions. `zeus-bso` is the client side's",
        "(simulate, list and manage jobs); `zeus-bso-server` runs the server and manages its",
        "database.",
        "",
    ]
    for name, app in (("zeus-bso", client_app), ("zeus-bso-server", server_app)):
        root = typer.main.get_command(app)
        for path, command in _commands(root, [name]):
            # A fixed width, whatever the terminal that writes the page.
            with click.Context(
                command, info_name=" ".join(path), terminal_width=100, max_content_width=100
            ) as ctx:
                text = command.get_help(ctx)
            heading = "##" if len(path) == 1 else "###"
            lines += [f"{heading} `{' '.join(path)}`", "", "```text", text, "```", ""]
    return "\n".join(lines)


def _schema_name(schema: dict[str, Any]) -> str:
    ref = schema.get("$ref") or schema.get("items", {}).get("$ref")
    if ref:
        name = ref.rsplit("/", 1)[-1]
        return f"`{name}`" if "$ref" in schema else f"list of `{name}`"
    return f"`{schema.get('type', 'object')}`"


def endpoints_page() -> str:
    app = create_app(Settings(database_url="sqlite:///unused.db"))
    schema = app.openapi()
    lines = [
        "# HTTP endpoints",
        "",
        "Every route of the server's OpenAPI schema, generated from the app (the server serves the",
        "same schema at `/openapi.json` and an explorer at `/docs`). The",
        "[HTTP API](http-api.md) page says how they are used.",
        "",
    ]
    routes = {
        operation["operationId"]: f"{method.upper()} {path}"
        for path, operations in schema["paths"].items()
        for method, operation in operations.items()
    }
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            lines += [f"## `{method.upper()} {path}`", ""]
            if operation.get("description"):
                lines += [operation["description"].strip(), ""]
            elif operation.get("summary"):
                lines += [operation["summary"], ""]
            parameters = operation.get("parameters", [])
            if parameters:
                lines += ["| parameter | in | required | description |", "|---|---|---|---|"]
                for parameter in parameters:
                    text = " ".join(parameter.get("description", "").split())
                    required = "yes" if parameter.get("required") else "no"
                    lines.append(
                        f"| `{parameter['name']}` | {parameter['in']} | {required} | {text} |"
                    )
                lines.append("")
            body = operation.get("requestBody", {}).get("content", {}).get("application/json")
            if body:
                lines += [f"Body: {_schema_name(body['schema'])}.", ""]
            answers = ", ".join(
                f"{code} ({answer.get('description', '')})"
                for code, answer in operation.get("responses", {}).items()
            )
            lines += [f"Answers: {answers}.", ""]
            leads = {
                f"`{routes[link['operationId']]}` ({link.get('description', '').rstrip('.')})"
                for answer in operation.get("responses", {}).values()
                for link in answer.get("links", {}).values()
            }
            if leads:
                lines += [f"Its answer's ids lead to: {', '.join(sorted(leads))}.", ""]
    lines += ["## Schemas", ""]
    for name, model in sorted(schema.get("components", {}).get("schemas", {}).items()):
        lines += [f"### `{name}`", ""]
        if model.get("description"):
            lines += [" ".join(model["description"].split()), ""]
        for example in model.get("examples", []):
            lines += ["Example:", "", "```json", json.dumps(example, indent=2), "```", ""]
        properties = model.get("properties", {})
        if properties:
            required = set(model.get("required", []))
            lines += ["| field | required | description |", "|---|---|---|"]
            for field, spec in properties.items():
                text = " ".join(spec.get("description", "").split()).replace("|", "\\|")
                lines.append(f"| `{field}` | {'yes' if field in required else 'no'} | {text} |")
            lines.append("")
    return "\n".join(lines)


def options_page() -> str:
    lines = [
        "# Policy options",
        "",
        "Every field of a job (`zeus_bso.spec.JobSpec`, the body of `POST /jobs`), generated from",
        "its definition. *Upstream* is the value that reproduces upstream Zeus 0.16's decisions",
        "(`zeus_bso.spec.UPSTREAM_OPTIONS`, or `zeus-bso simulate --upstream`); options without",
        "one behave as upstream's at their default. Upstream clients send `num_pruning_rounds`",
        "and `mab_num_explorations` themselves (2 and 2). Each policy option is declared once, in",
        "`zeus_bso.spec` (`PolicyOption`): this table, the upstream preset, the job-id hashing",
        "rule and the `zeus-bso simulate` flags are derived from the declaration.",
        "",
        "| option | default | upstream | what it does |",
        "|---|---|---|---|",
    ]
    options = policy_options()
    for name, field in JobSpec.model_fields.items():
        if field.is_required():
            default = "required"
        elif field.default_factory is not None:
            default = f"`{json.dumps(field.default_factory())}`"  # type: ignore[call-arg]
        else:
            default = f"`{json.dumps(field.default)}`"
        upstream = f"`{json.dumps(UPSTREAM_OPTIONS[name])}`" if name in UPSTREAM_OPTIONS else ""
        text = " ".join((field.description or "").split()).replace("|", "\\|")
        if name in options:
            text += f" (`zeus-bso simulate {simulate_flags(name).split('/')[0]}`)"
        lines.append(f"| `{name}` | {default} | {upstream} | {text} |")
    return "\n".join(lines) + "\n"


DOCS = Path(__file__).resolve().parent
SRC = DOCS.parent / "src"
MODULES_DIR = "reference/modules"


def _public_modules(package: str) -> list[tuple[str, Path]]:
    """Each public module of ``package`` (as `module_pages` gives it a page), by dotted name:
    no Alembic migration script, no NVML test double, nothing private."""
    found = []
    for path in sorted((SRC / package).rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        if (
            "migrations" in parts
            or "gpu_double" in parts
            or any(part.startswith("_") and part != "__init__" for part in parts)
        ):
            continue
        found.append((".".join(parts).removesuffix(".__init__"), path))
    return found


def _module_page(path: Path) -> str:
    """The page of the module in ``path`` under ``reference/modules/`` (a package's:
    ``index.md``), as `module_pages` writes it."""
    doc = path.relative_to(SRC).with_suffix(".md")
    return (doc.with_name("index.md") if doc.stem == "__init__" else doc).as_posix()


def _what_it_is(path: Path) -> str:
    """The first paragraph of a module's docstring, on one line."""
    docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
    return " ".join(docstring.split("\n\n", 1)[0].split()).replace("|", "\\|")


def packages_page() -> str:
    """Every public module of both packages, floor by floor as ``tests/test_layout.py`` holds
    the imports to them, with the first paragraph of its docstring."""
    layout = _load("test_layout", DOCS.parent / "tests" / "test_layout.py")
    lines = [
        "# Packages",
        "",
        "Every module of both packages and what its docstring says it is, generated from the code",
        "(`docs/gen_reference.py`; a test holds this page to it). The client package's parts are",
        "floors: a part imports only from its own or lower floors, lowest first here, and",
        "`tests/test_layout.py` draws the graph from the imports and holds it to this order. How",
        "the parts work together: [Architecture](../concepts/architecture.md).",
        "",
    ]
    client = _public_modules("zeus_bso")
    for number, floor in enumerate(layout.FLOORS, start=1):
        parts = sorted(floor)
        named = ", ".join(f"`{part}`" if part else "the package's face" for part in parts)
        lines += [f"## Floor {number}: {named}", ""]
        for name, path in client:
            if layout.part(name) in floor:
                lines.append(f"- [`{name}`](modules/{_module_page(path)}): {_what_it_is(path)}")
        lines.append("")
    uses = ", ".join(f"`{part}`" for part in sorted(layout.SERVER_MAY_IMPORT))
    lines += [
        "## The server: `zeus_bso_server`",
        "",
        f"Above every floor; of the client package it imports only {uses}.",
        "",
    ]
    for name, path in _public_modules("zeus_bso_server"):
        lines.append(f"- [`{name}`](modules/{_module_page(path)}): {_what_it_is(path)}")
    return "\n".join(lines) + "\n"


def _load(name: str, path: Path) -> Any:
    """A module loaded from its file (the layout test, which is not in a package's path)."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


COMMITTED = {
    "reference/packages.md": packages_page,
    "reference/cli.md": cli_page,
    "reference/http-endpoints.md": endpoints_page,
    "reference/policy-options.md": options_page,
}
"""The pages generated from the code and committed, by their path under ``docs/``."""


def write_pages() -> None:
    """Write the committed pages again from the code."""
    for page, content in COMMITTED.items():
        (DOCS / page).write_text(content())


def module_pages() -> None:
    """One page per public module (``::: module``), and the section's navigation. Alembic's
    migration scripts are not an API, nor is the NVML test double (a ``pynvml`` put first on a
    process's path, `zeus_bso.testing.gpus`, not a module of the package)."""
    import mkdocs_gen_files

    nav = mkdocs_gen_files.Nav()
    modules = _public_modules("zeus_bso") + _public_modules("zeus_bso_server")
    for name, path in sorted(modules, key=lambda module: module[1]):
        doc = _module_page(path)
        nav[tuple(name.split("."))] = doc
        with mkdocs_gen_files.open(f"{MODULES_DIR}/{doc}", "w") as out:
            out.write(f"::: {name}\n")
    with mkdocs_gen_files.open(f"{MODULES_DIR}/SUMMARY.md", "w") as out:
        out.writelines(nav.build_literate_nav())


if __name__ == "__main__":
    write_pages()
elif __name__ == "<run_path>":  # mkdocs-gen-files runs this script at every build
    module_pages()
