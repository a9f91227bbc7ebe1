"""The admin as an audit trail (R-UI4): read-only, filterable, searchable, no N+1 queries."""

from __future__ import annotations

import pytest
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from accounts.models import ApiToken
from runs import services
from runs.models import Interaction, Run, RunEvent
from skills.models import Skill, SkillVersion

pytestmark = pytest.mark.django_db

MODELS = [Skill, SkillVersion, Run, Interaction, RunEvent]


def admin_url(model, view: str, *args) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_{view}", args=args)


@pytest.fixture
def staff_client(admin_user) -> Client:
    client = Client()
    client.force_login(admin_user)
    return client


@pytest.fixture
def make_runs(alice, bob, install_skill):
    """Runs with one answered question each, made through services (no engine runs: no commit hooks)."""
    install_skill("trip-planner")
    install_skill("haiku-writer")

    def make(count: int) -> list[Run]:
        runs = []
        for index in range(count):
            owner = alice if index % 2 == 0 else bob
            if index % 3 == 0:
                run = services.create_run(
                    owner=owner,
                    skill_id="haiku-writer",
                    engine="codex",
                    model=None,
                    input={"topic": f"topic {index}"},
                    parameter={},
                    runtime_options={},
                )
            else:
                run = services.create_run(
                    owner=owner,
                    skill_id="trip-planner",
                    engine="codex",
                    model=None,
                    input={},
                    parameter={},
                    runtime_options={"execution_mode": "interactive"},
                )
            Interaction.objects.create(
                run=run,
                interaction_id=1,
                attempt_number=1,
                prompt=f"Question number {index}?",
                payload={"prompt": f"Question number {index}?"},
                response=f"answer-{index}",
                resolution_mode="auto_decide_timeout" if index % 4 == 0 else "user_reply",
                answered_by=None if index % 4 == 0 else owner,
                answered_at=timezone.now(),
            )
            runs.append(run)
        return runs

    return make


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_everything_is_read_only(staff_client, make_runs, model):
    make_runs(1)
    obj = model.objects.first()
    assert staff_client.get(admin_url(model, "changelist")).status_code == 200
    assert staff_client.get(admin_url(model, "add")).status_code == 403
    change = staff_client.get(admin_url(model, "change", obj.pk))
    assert change.status_code == 200
    assert b'name="_save"' not in change.content  # a view page, not a form
    assert staff_client.post(admin_url(model, "change", obj.pk), {}).status_code == 403
    assert staff_client.get(admin_url(model, "delete", obj.pk)).status_code == 403
    changelist = staff_client.get(admin_url(model, "changelist"))
    assert b"delete_selected" not in changelist.content
    assert model.objects.filter(pk=obj.pk).exists()


def test_run_page_shows_interactions_and_events_inline(staff_client, make_runs, alice):
    run = make_runs(1)[0]
    _, key = ApiToken.issue(alice)
    page = staff_client.get(admin_url(Run, "change", run.pk)).content.decode()
    assert "Question number 0?" in page and "answer-0" in page
    assert "Run events" in page and "Interactions" in page
    assert page.count('class="field-seq"') == RunEvent.objects.filter(run=run).count()
    # Inlines are history: nothing to add, nothing to delete.
    assert 'name="interactions-MAX_NUM_FORMS" value="0"' in page and 'name="events-MAX_NUM_FORMS" value="0"' in page
    assert "-DELETE" not in page
    assert key not in page and ApiToken.objects.get().key_hash not in page


def changelist_ids(client: Client, model, **query) -> set[str]:
    response = client.get(admin_url(model, "changelist"), query)
    assert response.status_code == 200
    return {str(obj.pk) for obj in response.context["cl"].result_list}


def test_run_filters(staff_client, make_runs):
    runs = make_runs(6)
    ids = {str(run.pk) for run in runs}
    haiku = {str(run.pk) for run in runs if run.skill.skill_id == "haiku-writer"}
    services.cancel_run(runs[1])
    assert changelist_ids(staff_client, Run, status="canceled") == {str(runs[1].pk)}
    assert changelist_ids(staff_client, Run, engine="codex") == ids
    assert changelist_ids(staff_client, Run, skill__id__exact=runs[0].skill_id) == haiku
    assert changelist_ids(staff_client, Run, execution_mode="interactive") == ids - haiku
    assert changelist_ids(staff_client, Run, interactions__resolution_mode="auto_decide_timeout") == {
        str(runs[0].pk),
        str(runs[4].pk),
    }
    midnight = timezone.localtime().replace(hour=0, minute=0, second=0, microsecond=0)
    assert changelist_ids(staff_client, Run, created_at__gte=midnight.isoformat()) == ids
    assert changelist_ids(staff_client, Interaction, resolution_mode="user_reply") == {
        str(i.pk) for i in Interaction.objects.filter(resolution_mode="user_reply")
    }
    assert changelist_ids(staff_client, RunEvent, kind="status") == {
        str(e.pk) for e in RunEvent.objects.filter(kind="status")
    }


def test_run_search(staff_client, make_runs):
    runs = make_runs(4)
    target = runs[2]
    assert changelist_ids(staff_client, Run, q=str(target.pk)) == {str(target.pk)}
    assert changelist_ids(staff_client, Run, q="bob") == {str(runs[1].pk), str(runs[3].pk)}
    assert changelist_ids(staff_client, Run, q='"Question number 2?"') == {str(target.pk)}
    assert changelist_ids(staff_client, Run, q="answer-3") == {str(runs[3].pk)}
    assert changelist_ids(staff_client, Interaction, q="answer-1") == {str(runs[1].interactions.get().pk)}
    assert changelist_ids(staff_client, Interaction, q=str(target.pk)) == {str(target.interactions.get().pk)}
    assert changelist_ids(staff_client, RunEvent, q=str(target.pk)) == {str(e.pk) for e in target.events.all()}


def test_run_search_covers_the_skill_and_says_what_it_searches(staff_client, make_runs):
    runs = make_runs(4)
    haiku = {str(run.pk) for run in runs if run.skill.skill_id == "haiku-writer"}
    assert changelist_ids(staff_client, Run, q="haiku-writer") == haiku
    assert changelist_ids(staff_client, Run, q="Trip planner") == {str(run.pk) for run in runs} - haiku
    assert changelist_ids(staff_client, Interaction, q="haiku-writer") == {
        str(run.interactions.get().pk) for run in runs if str(run.pk) in haiku
    }
    page = staff_client.get(admin_url(Run, "changelist")).content.decode()
    assert "Searches run ids, owners&#x27; user names, skill ids and names, questions and answers." in page


def test_the_admin_is_branded_links_the_site_and_indents_json(staff_client, make_runs):
    run = make_runs(1)[0]
    page = staff_client.get(admin_url(Run, "change", run.pk)).content.decode()
    assert "Skill Runner administration" in page and 'href="/static/favicon.svg"' in page
    assert '<a href="/">View site</a>' in page
    assert (
        f'href="/admin/r/{ContentType.objects.get_for_model(Run).pk}/{run.pk}/" class="viewsitelink">View on site</a>'
        in page
    )
    assert '<pre class="readonly-json" tabindex="0">{\n  &quot;topic&quot;: &quot;topic 0&quot;\n}</pre>' in page
    assert staff_client.get(f"/admin/r/{ContentType.objects.get_for_model(Run).pk}/{run.pk}/")["Location"].endswith(
        f"/runs/{run.pk}/"
    )
    columns = staff_client.get(admin_url(Run, "changelist")).context["cl"].list_display
    # The selection box first: the export actions act on the selected runs.
    assert list(columns[:7]) == ["action_checkbox", "run", "skill", "owner", "status", "tokens", "cost"]


def count_queries(client: Client, url: str) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert client.get(url).status_code == 200
    return len(queries)


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_changelists_do_not_grow_with_rows(staff_client, make_runs, model, django_assert_max_num_queries):
    make_runs(3)
    few = count_queries(staff_client, admin_url(model, "changelist"))
    make_runs(60)
    with django_assert_max_num_queries(few):
        staff_client.get(admin_url(model, "changelist"))
    with django_assert_max_num_queries(20):
        staff_client.get(admin_url(model, "changelist"))


def test_run_page_does_not_grow_with_its_history(staff_client, make_runs, alice):
    run = make_runs(1)[0]
    # The first view in a process also fills per-process caches (ContentType's), one query more.
    count_queries(staff_client, admin_url(Run, "change", run.pk))
    few = count_queries(staff_client, admin_url(Run, "change", run.pk))
    for number in range(2, 30):
        Interaction.objects.create(
            run=run,
            interaction_id=number,
            attempt_number=number,
            prompt="q",
            payload={},
            response="a",
            answered_by=alice,
        )
    for seq in range(run.last_event_seq + 1, run.last_event_seq + 40):
        RunEvent.objects.create(run=run, seq=seq, kind="assistant_message", payload={"text": "hi"})
    assert count_queries(staff_client, admin_url(Run, "change", run.pk)) == few


def test_admin_times_are_to_the_second_with_their_zone(staff_client, make_runs):
    run = make_runs(1)[0]
    page = staff_client.get(admin_url(Run, "change", run.pk)).content.decode()
    stamp = timezone.localtime(run.created_at).strftime("%Y-%m-%d %H:%M:%S UTC")
    assert stamp in page


def test_run_page_names_the_model_it_ran_with(staff_client, make_runs, settings):
    run = make_runs(1)[0]
    settings.SKILLRUNNER_ENGINES = {**settings.SKILLRUNNER_ENGINES}
    settings.SKILLRUNNER_ENGINES["codex"] = {**settings.SKILLRUNNER_ENGINES["codex"], "model": "gpt-5-codex"}
    page = staff_client.get(admin_url(Run, "change", run.pk)).content.decode()
    assert "gpt-5-codex (default)" in page
    Run.objects.filter(pk=run.pk).update(model="o4-mini")
    assert "o4-mini" in staff_client.get(admin_url(Run, "change", run.pk)).content.decode()


@pytest.mark.parametrize("kind", ["csv", "json"])
def test_export_of_the_selected_runs_interaction_history(staff_client, make_runs, alice, bob, kind):
    import csv
    import io
    import json

    runs = make_runs(3)
    Interaction.objects.filter(run=runs[1]).update(response={"city": "Oslo"})
    Interaction.objects.filter(run=runs[2]).update(response="=HYPERLINK(0)")
    chosen = [runs[1].pk, runs[2].pk]
    with CaptureQueriesContext(connection) as queries:
        response = staff_client.post(
            admin_url(Run, "changelist"), {"action": f"export_interactions_{kind}", "_selected_action": chosen}
        )
    assert response.status_code == 200
    assert response["Content-Disposition"] == f'attachment; filename="interaction-history.{kind}"'
    body = response.content.decode()
    if kind == "json":
        records = json.loads(body)["interactions"]
        answers = [record["answer"] for record in records]
    else:
        records = list(csv.DictReader(io.StringIO(body)))
        answers = [record["answer"] for record in records]
    assert {record["run"] for record in records} == {str(pk) for pk in chosen}  # the selected runs only
    first = next(record for record in records if record["run"] == str(runs[1].pk))
    assert first["question"] == "Question number 1?"
    assert first["skill"] == "trip-planner" and first["engine"] == "codex"
    assert first["asked_by"] == bob.username and first["answered_by"] == bob.username
    assert first["resolution"] == "user_reply" and first["answered_at"] and first["asked_at"]
    if kind == "json":
        assert {"city": "Oslo"} in answers and "=HYPERLINK(0)" in answers
    else:
        assert '{"city": "Oslo"}' in answers and "'=HYPERLINK(0)" in answers  # never a formula
    assert len(queries) < 12  # one query for the history, however many runs
