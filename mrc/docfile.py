"""Reading a document a person wrote (a topology, a sweep's grid): JSON, or
YAML when its name ends in .yaml or .yml (pyyaml, the ``yaml`` extra). Every
failure is one line that names the file and what to do."""

from __future__ import annotations

import json

from mrc.errors import UsageError


def read(path: str, what: str) -> object:
    """The document at ``path`` (``what`` names it in errors: "topology file", "grid")."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        raise UsageError(f"cannot read {what} {path}: {e.strerror}") from None
    if path.endswith((".yaml", ".yml")):
        try:
            import yaml
        except ImportError:
            raise UsageError(f"{path} is YAML: pip install pyyaml (or 'mrc[yaml]'), or write it as JSON") from None
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise UsageError(f"{path}: not valid YAML: {str(e).splitlines()[0]}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise UsageError(f"{path}: not valid JSON: {e.msg} at line {e.lineno}") from None
