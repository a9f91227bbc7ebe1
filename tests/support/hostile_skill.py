"""A skill package written by an attacker: markup that runs script in every text field it has
(R-FS4). Pages must show the text as text; the flag `window.__xss` stays unset."""

from __future__ import annotations

import json
from pathlib import Path

SKILL_ID = "hostile-skill"
# Each piece runs script if it reaches the page as markup: a script element, an event handler,
# and an attribute break-out.
PAYLOAD = '<script>window.__xss=1</script><img src=x onerror="window.__xss=1">"><svg onload="window.__xss=1">'


def write_hostile_skill(root: Path) -> Path:
    folder = root / SKILL_ID
    (folder / "assets").mkdir(parents=True)
    # JSON strings are valid YAML double-quoted scalars.
    (folder / "SKILL.md").write_text(
        f"---\nname: {SKILL_ID}\ndescription: {json.dumps('Front matter ' + PAYLOAD)}\n---\n\n{PAYLOAD}\n"
    )
    manifest = {
        "id": SKILL_ID,
        "version": "1.0.0",
        "name": f"Name {PAYLOAD}",
        "description": f"Description {PAYLOAD}",
        "execution_modes": ["auto", "interactive"],
        "schemas": {
            "input": "assets/input.schema.json",
            "parameter": "assets/parameter.schema.json",
            "output": "assets/output.schema.json",
        },
    }
    text = {"type": "string", "title": f"Title {PAYLOAD}", "description": f"Help {PAYLOAD}", "default": PAYLOAD}
    choice = {"enum": [PAYLOAD, "plain"], "title": f"Choice {PAYLOAD}", "description": f"Pick {PAYLOAD}"}
    as_json = {"type": "object", "title": f"Object {PAYLOAD}", "description": f"JSON {PAYLOAD}"}
    schemas = {
        "input": {"type": "object", "properties": {"topic": text, "extra": as_json}, "required": ["topic"]},
        "parameter": {
            "type": "object",
            "properties": {"style": choice, "loud": {"type": "boolean", "description": PAYLOAD}},
        },
        "output": {"type": "object", "properties": {"ok": {"type": "boolean", "description": PAYLOAD}}},
    }
    (folder / "assets" / "runner.json").write_text(json.dumps(manifest))
    for name, schema in schemas.items():
        (folder / "assets" / f"{name}.schema.json").write_text(json.dumps(schema))
    return folder
