"""The README's layer table names every layer that ``handgrad.layers`` registers, and
only those."""

import re
from pathlib import Path

import handgrad  # noqa: F401  (registers every layer)
from handgrad.layers.registry import REGISTRY

README = Path(__file__).resolve().parents[1] / "README.md"


def table_names():
    section = README.read_text().split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")][1:]
    return {name for row in rows for name in re.findall(r"`(\w+)`", row)}


def test_the_readme_layer_table_names_every_registered_layer():
    layers = {name for name, cls in REGISTRY.items()
              if cls.__module__.startswith("handgrad.layers.")}
    listed = table_names()
    assert not layers - listed, f"add to the README's layer table: {sorted(layers - listed)}"
    assert not listed - layers, f"not layers (any more): {sorted(listed - layers)}"
