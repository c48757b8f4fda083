"""Every operation of the broker's OpenAPI document has a method of :class:`sluice.Client`,
named as the Rust SDK names it.

``crates/sluice-client/tests/operations.json`` maps each operation, by method and path, to the
method of each SDK that calls it; ``crates/sluice-client/tests/operations.rs`` holds the Rust
SDK to the same file. Here the file is compared both ways with the document a live broker
serves, and each Python name in it must be a method of ``Client`` that is not a deprecated
alias. The deprecated names of renamed methods and parameters are checked to warn and
forward.
"""

from __future__ import annotations

import inspect
import json
import pathlib
import warnings
from typing import Any, Dict, List, Tuple
from unittest import mock

import pytest

import sluice
from sluice.client import QueueSettings
from conftest import Broker

MAPPING = pathlib.Path(__file__).resolve().parents[2] / "crates" / "sluice-client" / "tests" / "operations.json"

#: Old names kept as deprecated aliases (dropped in 0.2), with the method each calls.
DEPRECATED = {"move": "move_message"}


def _mapping() -> List[Dict[str, Any]]:
    assert MAPPING.is_file(), f"{MAPPING} is missing: the SDKs' operation mapping"
    return list(json.loads(MAPPING.read_text())["operations"])


def _document_operations(doc: Dict[str, Any]) -> Dict[Tuple[str, str], str]:
    ops = {}
    for path, item in doc["paths"].items():
        for method, op in item.items():
            if isinstance(op, dict) and "operationId" in op:
                ops[(method.upper(), path)] = op["operationId"]
    return ops


def test_every_operation_of_the_document_is_mapped_and_every_mapping_is_an_operation(
    broker: Broker,
) -> None:
    with broker.client() as client:
        doc = _document_operations(client.openapi())
    mapped: Dict[Tuple[str, str], str] = {}
    for op in _mapping():
        key = (op["method"], op["path"])
        assert key not in mapped, f"operations.json maps {key} twice"
        mapped[key] = op["operation_id"]
    unmapped = sorted(set(doc) - set(mapped))
    assert not unmapped, (
        f"operations of the OpenAPI document without an SDK mapping in {MAPPING.name}: {unmapped}"
    )
    gone = sorted(set(mapped) - set(doc))
    assert not gone, f"operations.json maps operations the document does not have: {gone}"
    for key, op_id in doc.items():
        assert mapped[key] == op_id, f"{key}: operationId in operations.json"


@pytest.mark.parametrize("op", _mapping(), ids=lambda op: f"{op['method']} {op['path']}")
def test_each_mapped_python_method_exists(op: Dict[str, Any]) -> None:
    name = op.get("python")
    if name is None:
        assert (op.get("why") or "").strip(), f"{op['method']} {op['path']}: no Python method and no why"
        return
    assert hasattr(sluice.Client, name), f"sluice.Client has no {name} ({op['method']} {op['path']})"
    assert callable(getattr(sluice.Client, name))
    assert name not in DEPRECATED, f"{name} is a deprecated alias; map the new name"
    if op.get("rust") is not None:
        assert name == op["rust"], f"{op['method']} {op['path']}: Python {name}, Rust {op['rust']}"


def test_deprecated_aliases_warn_and_forward() -> None:
    client = sluice.Client("http://127.0.0.1:9")
    try:
        for old, new in DEPRECATED.items():
            assert "dropped in 0.2" in (inspect.getdoc(getattr(sluice.Client, old)) or "")
            with mock.patch.object(client, new, return_value="forwarded") as target:
                with pytest.warns(DeprecationWarning, match=f"{old}.*0.2.*{new}"):
                    assert getattr(client, old)("q", "r", "to", error="e") == "forwarded"
                target.assert_called_once_with("q", "r", "to", error="e", consumer=None)
    finally:
        client.close()


def test_a_push_timeout_is_seconds_and_timeout_ms_is_deprecated() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        wire = QueueSettings(push={"url": "https://example.com/h", "timeout": 2.5}).to_wire()
    assert wire["push"] == {"url": "https://example.com/h", "timeout_ms": 2500}
    with pytest.warns(DeprecationWarning, match="timeout_ms.*0.2"):
        wire = QueueSettings(push={"url": "https://example.com/h", "timeout_ms": 700}).to_wire()
    assert wire["push"]["timeout_ms"] == 700
    with pytest.raises(sluice.InvalidInput):
        QueueSettings(push={"url": "u", "timeout": 1, "timeout_ms": 1000}).to_wire()
