"""XML Schema documents that ``xmlschema`` accepts and compiles into a schema.

The generator writes an ``xs:schema`` document: components and their children with tags
from a dictionary of XSD element names plus wrong ones (``elem``, ``type``, ``node``),
attributes from a dictionary of XSD attribute names plus wrong ones (``kind``, ``size``),
and values from small vocabularies (names, built-in and user type names, occurrence
bounds). Valid when ``xmlschema.XMLSchema(text)`` builds the schema (meta-schema
validation, reference resolution, content-model checks), the library's default strict mode.
"""

from __future__ import annotations

from typing import Any

import xmlschema

from realworld import Benchmark

TOP_TAGS = ("element", "complexType", "simpleType", "attribute", "group", "elem", "type")
CHILD_TAGS = (
    "element", "complexType", "simpleType", "sequence", "choice", "all", "attribute",
    "restriction", "enumeration", "simpleContent", "extension", "annotation", "node",
)  # fmt: skip
ATTRIBUTES = ("name", "type", "ref", "minOccurs", "maxOccurs", "base", "value", "use", "kind")
VALUES = {
    "name": ("a", "b", "item", "t", "1x"),
    "type": ("xs:string", "xs:int", "xs:decimal", "t", "a", "xs:strin"),
    "ref": ("a", "b", "item", "t"),
    "minOccurs": ("0", "1", "2", "-1"),
    "maxOccurs": ("1", "2", "unbounded", "0"),
    "base": ("xs:string", "xs:int", "t", "xs:anyType"),
    "value": ("x", "1", ""),
    "use": ("required", "optional", "prohibited", "always"),
    "kind": ("x",),
}
MAX_DEPTH = 3


def _component(g: Any, tags: tuple[str, ...], depth: int) -> str:
    tag = g.choice(tags, label="tag")
    with g.scope(tag):
        # Set as on a DOM element (the paper's generators build one): an attribute chosen
        # twice keeps its last value. Written out as repeated text it would make the
        # document ill-formed XML, a rejection no state that sees only the ancestors
        # could learn to avoid.
        attributes: dict[str, str] = {}
        for _ in range(g.integer(0, 2, label="n_attributes")):
            attribute = g.choice(ATTRIBUTES, label="attribute")
            with g.scope(attribute):
                attributes[attribute] = g.choice(VALUES[attribute], label="value")
        children = []
        if depth < MAX_DEPTH:
            for _ in range(g.integer(0, 2, label="n_children")):
                children.append(_component(g, CHILD_TAGS, depth + 1))
    head = f"xs:{tag}" + "".join(f' {key}="{value}"' for key, value in attributes.items())
    if not children:
        return f"<{head}/>"
    return f"<{head}>{''.join(children)}</xs:{tag}>"


def schema(g: Any) -> str:
    """An XML Schema document's text."""
    components = [_component(g, TOP_TAGS, 1) for _ in range(g.integer(1, 3, label="n_top"))]
    return (
        '<xs:schema xmlns:xs="http://www.w3.org/2001/XMLSchema">'
        + "".join(components)
        + "</xs:schema>"
    )


def check(text: str) -> bool:
    """``xmlschema`` builds a schema from ``text`` (any exception is a rejection)."""
    try:
        xmlschema.XMLSchema(text)
    except Exception:
        return False
    return True


def make() -> Benchmark:
    """The benchmark."""
    return Benchmark.traced(
        "xsd", schema, check, include=[xmlschema], traced="xmlschema",
        description="XML Schema documents xmlschema compiles",
    )  # fmt: skip
