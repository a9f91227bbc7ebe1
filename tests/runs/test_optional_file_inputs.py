"""Optional file inputs: a run waits for them only when its creator says files are coming."""

import io
import json
import shutil
import zipfile

import pytest

from runs import services
from tests.conftest import BUNDLED_SKILLS

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def optional_file_skill(tmp_path, install_skill):
    root = tmp_path / "skills"
    shutil.copytree(BUNDLED_SKILLS / "word-count", root / "word-count")
    schema_path = root / "word-count" / "assets" / "input.schema.json"
    schema = json.loads(schema_path.read_text())
    schema["required"] = []
    schema_path.write_text(json.dumps(schema))
    return install_skill("word-count", root=root)


def _zip(name: str, content: bytes) -> io.BytesIO:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(name, content)
    buffer.seek(0)
    return buffer


def test_without_expected_upload_the_run_starts_at_once(alice, optional_file_skill, fake_codex):
    fake_codex.script({"message": json.dumps({"lines": 0, "words": 0})})
    run = services.create_run(
        owner=alice, skill_id="word-count", engine="codex", model=None, input={}, parameter={}, runtime_options={}
    )
    run.refresh_from_db()
    assert run.awaiting_upload is False and run.status == "succeeded"


def test_expected_upload_of_an_optional_file_is_waited_for_and_used(alice, optional_file_skill, fake_codex):
    fake_codex.script({"message": json.dumps({"lines": 1, "words": 2})})
    run = services.create_run(
        owner=alice,
        skill_id="word-count",
        engine="codex",
        model=None,
        input={},
        parameter={},
        runtime_options={},
        expects_upload=True,
    )
    assert run.awaiting_upload is True and fake_codex.invocations() == []
    services.attach_upload(run, _zip("document", b"two words\n"))
    run.refresh_from_db()
    assert run.status == "succeeded"
    assert str(run.run_dir / "uploads" / "document") in fake_codex.invocations()[0]["prompt"]
