"""The page scripts are ES modules importing each other by relative path (issue 42): collected
with the production storage, every import still names a collected file. A storage that renames
files (a manifest) would have to rewrite the imports too."""

from __future__ import annotations

import re
from pathlib import Path

from django.conf import settings
from django.contrib.staticfiles.storage import ManifestStaticFilesStorage
from django.core.management import call_command
from django.test import override_settings
from django.utils.module_loading import import_string

IMPORT = re.compile(r'^import\s+(?:\{[^}]*\}\s+from\s+)?"([^"]+)";', re.MULTILINE)


def test_collected_modules_import_files_that_were_collected(tmp_path):
    storage = import_string(settings.STORAGES["staticfiles"]["BACKEND"])
    if issubclass(storage, ManifestStaticFilesStorage):
        assert storage.support_js_module_import_statements, "hashed names would break the modules' imports"
    with override_settings(STATIC_ROOT=tmp_path):
        call_command("collectstatic", interactive=False, verbosity=0)
    collected = tmp_path / "js"
    imports = {
        (module.relative_to(collected).as_posix(), specifier): (module.parent / specifier).resolve()
        for module in collected.rglob("*.js")
        for specifier in IMPORT.findall(module.read_text())
    }
    assert ("run/main.js", "./socket.js") in imports
    assert all(specifier.startswith(("./", "../")) for _, specifier in imports)  # same origin, no CDN
    missing = [pair for pair, target in imports.items() if not (target.is_file() and target.is_relative_to(tmp_path))]
    assert missing == []
    source = Path(settings.BASE_DIR) / "static" / "js"
    assert names_of_scripts(collected) == names_of_scripts(source)


def names_of_scripts(root: Path) -> set[str]:
    return {path.relative_to(root).as_posix() for path in root.rglob("*.js")}
