"""Inline artifact previews on the run page (R-AC5): Markdown rendered safely, text escaped."""

from __future__ import annotations

import io

import pytest
from django.test import Client

from runs.preview import MAX_PREVIEW_BYTES, render_markdown, render_preview


def test_markdown_is_rendered_without_script_images_or_dangerous_links():
    html = render_markdown(
        "# Title\n\n<script>alert(1)</script>\n\n<img src=x onerror=alert(1)>\n\n"
        "![remote](https://tracker.invalid/p.png)\n\n[ok](https://example.org) [bad](javascript:alert(1))\n\n"
        "| a | b |\n|---|---|\n| 1 | 2 |\n"
    )
    assert "<h2>Title</h2>" in html  # one level down: the page has its own h1 and "<table>" in html
    assert "<script" not in html and "<img" not in html and "onerror" not in html.replace("onerror=alert", "")
    assert 'href="javascript' not in html
    assert '<a href="https://example.org" rel="noopener noreferrer nofollow">ok</a>' in html


def test_markdown_keeps_the_authors_line_breaks():
    html = render_markdown("Salt wind <b>on</b> the pier\ngulls stitch the grey afternoon\nthe tide keeps its word\n")
    assert html == (
        "<p>Salt wind &lt;b&gt;on&lt;/b&gt; the pier<br>\ngulls stitch the grey afternoon<br>\n"
        "the tide keeps its word</p>\n"
    )


def test_text_is_escaped_and_long_files_are_cut():
    assert (
        render_preview("notes.txt", io.BytesIO(b"<b>x</b>")) == '<pre class="text-preview">&lt;b&gt;x&lt;/b&gt;</pre>'
    )
    long = render_preview("big.log", io.BytesIO(b"a" * (MAX_PREVIEW_BYTES + 10)))
    assert "Preview cut at 512 KB" in long


@pytest.mark.django_db
def test_preview_view_serves_own_runs_only_and_only_text_kinds(alice, bob, install_skill, api):
    from runs import services

    install_skill("haiku-writer")
    run = services.create_run(
        owner=alice, skill_id="haiku-writer", engine="codex", model=None, input={"topic": "sea"}, parameter={},
        runtime_options={},
    )  # fmt: skip
    artifacts = run.run_dir / "artifacts"
    artifacts.mkdir(parents=True, exist_ok=True)
    (artifacts / "haiku.md").write_text("# Sea\n\n<script>x()</script>\n")
    (artifacts / "image.png").write_bytes(b"\x89PNG")
    owner, other = Client(), Client()
    owner.force_login(alice)
    other.force_login(bob)
    url = f"/runs/{run.pk}/preview/artifacts/"
    response = owner.get(url + "haiku.md")
    assert response.status_code == 200 and "<h2>Sea</h2>" in response.content.decode()
    assert "<script" not in response.content.decode()
    assert response["Content-Security-Policy"].startswith("default-src 'none'")
    assert other.get(url + "haiku.md").status_code == 404
    assert owner.get(url + "image.png").status_code == 404
    assert owner.get(url + "missing.md").status_code == 404
    assert owner.get(url + "../logs/x.txt").status_code == 404
