"""One table of inference backends: every command that offers them, and the Python API, take
their choices and help from `ner.inference.backend_table`, so none can drift from another."""

from __future__ import annotations

import pytest

from ner.cli import export as export_command
from ner.cli import tag as tag_command
from ner.inference.backend_table import (
    BACKENDS_TABLE,
    QUANTIZATIONS,
    backend_help,
    check_backend,
    quantize_help,
)
from ner.utils.errors import NERError


def options(parser) -> dict:
    return {a.dest: a for a in parser._actions}


@pytest.mark.parametrize("module", ["tag", "serve"])
def test_commands_offer_what_the_table_holds(module):
    if module == "tag":
        parser = tag_command.parser()
    else:
        from ner.cli import serve as serve_command

        parser = serve_command.parser()
    found = options(parser)
    assert tuple(found["backend"].choices) == tuple(BACKENDS_TABLE)
    assert tuple(found["quantize"].choices) == tuple(QUANTIZATIONS)
    assert found["backend"].help == backend_help() and found["quantize"].help == quantize_help()
    for backend in BACKENDS_TABLE.values():
        assert f"{backend.name}: {backend.summary}" in found["backend"].help


def test_export_describes_the_int8_graph_the_table_names():
    assert (
        QUANTIZATIONS["int8"].by_backend["onnx"] in options(export_command.parser())["no_int8"].help
    )


def test_the_api_refuses_what_the_table_does_not_hold():
    for backend in BACKENDS_TABLE:
        check_backend(backend, None)
        for name, spec in QUANTIZATIONS.items():
            if backend in spec.by_backend:
                check_backend(backend, name)
    with pytest.raises(NERError, match="backend: 'tensorrt' is not one of torch, onnx"):
        check_backend("tensorrt", None)
    with pytest.raises(NERError, match="quantize: 'int4' is not one of int8 on torch"):
        check_backend("torch", "int4")


def test_accelerate_checks_against_the_table():
    from ner.inference.backends import accelerate

    with pytest.raises(NERError, match="backend: 'tensorrt' is not one of torch, onnx"):
        accelerate(None, "tensorrt")
    with pytest.raises(NERError, match="quantize: 'int4' is not one of int8 on onnx"):
        accelerate(None, "onnx", "int4")
