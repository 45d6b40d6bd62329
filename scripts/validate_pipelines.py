"""Validates pipeline files against pipelines/pipeline.schema.json (JSON Schema 2020-12) as an
editor would: prints `<file>: <path>: <message>` for every violation and exits 1 when there is
one. Used by tests/reference_docs.rs (`just refs-venv` installs jsonschema)."""
import json
import pathlib
import sys
import tomllib

import jsonschema

schema = json.load(open(pathlib.Path(__file__).resolve().parent.parent / "pipelines" / "pipeline.schema.json", encoding="utf-8"))
validator = jsonschema.Draft202012Validator(schema)
bad = 0
for name in sys.argv[1:]:
    with open(name, "rb") as f:
        doc = tomllib.load(f)
    for e in sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path)):
        bad += 1
        print(f"{name}: {'.'.join(str(p) for p in e.absolute_path) or '(top)'}: {e.message}")
sys.exit(1 if bad else 0)
