"""GitHub Actions workflow files (YAML) checked against the workflow JSON Schema.

The schema is the one ``check-jsonschema`` vendors (``--builtin-schema
vendor.github-workflows``); documents are parsed with ``check-jsonschema``'s own YAML loader
(ruamel.yaml, YAML 1.2, so ``on:`` stays a string key) and validated with ``jsonschema``'s
Draft 7 validator, as ``check-jsonschema`` does. The generator writes YAML text from
vocabularies of top-level keys, events, job keys, step keys and values, each with wrong
entries (``trigger``, ``commit``, ``image``, ``script`` ...).
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import check_jsonschema
import jsonschema
import ruamel.yaml
from check_jsonschema.parsers.yaml import construct_yaml_implementation

from realworld import Benchmark

TOP_KEYS = ("name", "on", "jobs", "env", "permissions", "trigger")
EVENTS = ("push", "pull_request", "workflow_dispatch", "schedule", "release", "commit", "merge")
EVENT_KEYS = ("branches", "tags", "paths", "types", "cron", "files")
JOB_IDS = ("build", "test", "lint", "deploy", "2fast")
JOB_KEYS = ("runs-on", "needs", "timeout-minutes", "strategy", "image")
STEP_KINDS = ("run", "uses", "script")
STEP_KEYS = ("name", "with", "env", "shell", "id")
RUNNERS = ("ubuntu-latest", "windows-latest", "macos-14", "[self-hosted, linux]", "{}")
ACTIONS = ("actions/checkout@v4", "actions/setup-python@v5", "./local", "docker://alpine", "")
SHELLS = ("bash", "pwsh", "python", "sh", "fish")
SCALARS = ("main", "'v*'", "ci", "${{ matrix.os }}", "1", "true", "null", "[]", "'*/5 * * * *'")
PERMISSIONS = ("read-all", "write-all", "{contents: read}", "{issues: maybe}", "none")
MATRIX = ("{os: [ubuntu-latest, macos-14]}", "{python: ['3.11', '3.12']}", "[]", "{}")


def _event(g: Any, indent: str) -> list[str]:
    event = g.choice(EVENTS, label="event")
    if not g.boolean(label="event_body"):
        return [f"{indent}{event}:"]
    lines = [f"{indent}{event}:"]
    for _ in range(g.integer(1, 2, label="n_event_keys")):
        key = g.choice(EVENT_KEYS, label="event_key")
        lines.append(f"{indent}  {key}: [{g.choice(SCALARS, label='event_value')}]")
    return lines


def _on(g: Any) -> list[str]:
    form = g.choice(("single", "list", "map"), label="on_form")
    if form == "single":
        return [f"on: {g.choice(EVENTS, label='event')}"]
    if form == "list":
        events = [g.choice(EVENTS, label="event") for _ in range(g.integer(1, 3, label="n_events"))]
        return [f"on: [{', '.join(events)}]"]
    lines = ["on:"]
    for _ in range(g.integer(1, 3, label="n_events")):
        with g.scope("event"):
            lines.extend(_event(g, "  "))
    return lines


def _value(g: Any, key: str) -> str:
    """A value for ``key``: from the vocabulary that fits it, with wrong entries."""
    if key == "uses":
        return g.choice(ACTIONS, label="action")
    if key == "shell":
        return g.choice(SHELLS, label="shell")
    if key in ("with", "env"):
        return (
            "{"
            + g.choice(("python-version: '3.11'", "fetch-depth: 0", "A: b", ""), label=key)
            + "}"
        )
    if key == "runs-on":
        return g.choice(RUNNERS, label="runner")
    if key == "needs":
        return g.choice(JOB_IDS, label="needs")
    if key == "strategy":
        return "{matrix: " + g.choice(MATRIX, label="matrix") + "}"
    if key == "timeout-minutes":
        return g.choice(("10", "0", "soon", "-1"), label="timeout")
    if key == "permissions":
        return g.choice(PERMISSIONS, label="permissions")
    return g.choice(SCALARS, label="scalar")


def _mapping(g: Any, keys: tuple[str, ...], first: str, rest: str) -> list[str]:
    """Some of ``keys`` (each in or out by a choice), one ``key: value`` line each."""
    lines: list[str] = []
    for key in keys:
        if g.boolean(label=key):
            with g.scope(key):
                lines.append(f"{rest if lines else first}{key}: {_value(g, key)}")
    return lines


def _step(g: Any, first: str, rest: str) -> list[str]:
    """A step: what it does (``run``, ``uses`` or a wrong ``script``), then optional keys."""
    kind = g.choice(STEP_KINDS, label="step_kind")
    with g.scope(kind):
        head = f"{first}{kind}: {_value(g, kind)}"
    return [head, *_mapping(g, STEP_KEYS, rest, rest)]


def _job(g: Any, job_id: str) -> list[str]:
    lines = [f"  {job_id}:", *_mapping(g, JOB_KEYS, "    ", "    ")]
    if g.boolean(label="has_steps"):
        lines.append("    steps:")
        for _ in range(g.integer(1, 3, label="n_steps")):
            with g.scope("step"):
                lines.extend(_step(g, "    - ", "      "))
    return lines


def workflow(g: Any) -> str:
    """A workflow file's YAML text: each top-level key in or out, then its value."""
    lines: list[str] = []
    for key in TOP_KEYS:
        if not g.boolean(label=key):
            continue
        with g.scope(key):
            if key == "on":
                lines.extend(_on(g))
            elif key == "jobs":
                lines.append("jobs:")
                for _ in range(g.integer(1, 2, label="n_jobs")):
                    with g.scope("job"):
                        lines.extend(_job(g, g.choice(JOB_IDS, label="job_id")))
            elif key == "steps":
                lines.append("steps:")
                with g.scope("step"):
                    lines.extend(_step(g, "  - ", "    "))
            else:
                lines.append(f"{key}: {_value(g, key)}")
    return "\n".join(lines) + "\n"


def make() -> Benchmark:
    """The benchmark, with the vendored schema loaded and its validator built once."""
    schema_text = (
        resources.files(check_jsonschema)
        .joinpath("builtin_schemas/vendor/github-workflows.json")
        .read_text(encoding="utf-8")
    )
    validator = jsonschema.Draft7Validator(json.loads(schema_text))
    yaml = construct_yaml_implementation()

    def check(text: str) -> bool:
        try:
            document = yaml.load(text)
        except ruamel.yaml.YAMLError:
            return False
        return bool(validator.is_valid(document))

    return Benchmark.traced(
        "workflow", workflow, check, include=[jsonschema, ruamel.yaml],
        traced="jsonschema and ruamel.yaml",
        description="GitHub Actions workflow YAML valid under check-jsonschema's vendored schema",
    )  # fmt: skip
