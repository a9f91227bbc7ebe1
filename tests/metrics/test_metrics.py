"""GET /metrics (R-OP11): every metric README lists and nothing else, with its labels; the figures
of a known set of runs made through the services; who may scrape; the dashboard's names."""

from __future__ import annotations

import ipaddress
import json
import re
from pathlib import Path

import pytest
from django.core import mail
from prometheus_client.parser import text_string_to_metric_families
from rest_framework.test import APIClient

from engines.relay import RelayRefusal
from tests.support.clients import client_for
from tests.support.conversations import ask, interactive_job
from tests.support.jobs import create_job, haiku_step
from tests.support.settings_probe import run_with_production_settings
from tests.support.webhook_receiver import WebhookReceiver

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DASHBOARD = REPO / "deploy" / "grafana" / "skillrunner.json"
ROW = re.compile(r"^\| `(skillrunner_\w+)` \| (gauge|counter|histogram) \|([^|]*)\|", re.MULTILINE)
NAME = re.compile(r"\bskillrunner_\w+")


def readme_section() -> str:
    return README.read_text().split("\n## Metrics\n", 1)[1].split("\n## ", 1)[0]


def readme_metrics() -> dict[str, tuple[str, set[str]]]:
    """README's "Metrics" section: name → (type, labels)."""
    return {name: (kind, set(re.findall(r"`(\w+)`", labels))) for name, kind, labels in ROW.findall(readme_section())}


def scrape(client: APIClient) -> dict[str, tuple[str, set[str], list]]:
    """name (as queried: counters with `_total`) → (type, labels, samples)."""
    response = client.get("/metrics")
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=")
    found = {}
    for family in text_string_to_metric_families(response.content.decode()):
        name = family.name + ("_total" if family.type == "counter" else "")
        labels = {label for sample in family.samples for label in sample.labels if label != "le"}
        found[name] = (family.type, labels, family.samples)
    return found


def value(samples: list, name: str, **labels: str) -> float:
    (match,) = [sample.value for sample in samples if sample.name == name and sample.labels == labels]
    return match


@pytest.fixture
def known_runs(settings, alice, api, install_skill, fake_codex, manual_dispatch):
    """alice: one run succeeded and one failed (ENGINE_FAILED), each a codex turn; one waiting for
    her answer, emailed; one queued; one running (its slot held); the relay counted 1,500 tokens
    and refused two requests of the succeeded run; her webhook got the success (200) and refused
    the failure (410); one live connection of hers is open."""
    from accounts.connections import open_connection
    from notifications.email import offer_due_question_emails
    from notifications.services import register_endpoint
    from runs.services import claim_turn
    from runs.services.spend import record_relay_activity

    install_skill("haiku-writer")
    install_skill("trip-planner")
    settings.SKILLRUNNER_MAX_CONCURRENT_TURNS = 4
    settings.SKILLRUNNER_WEBHOOK_ALLOW_PRIVATE = True
    settings.SKILLRUNNER_EMAIL_GRACE_SECONDS = 0
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    alice.email = "alice@example.org"
    alice.save()
    with WebhookReceiver(answers=[200, 410]) as receiver:
        register_endpoint(owner=alice, url=receiver.url, events=["run.succeeded", "run.failed"])
        runs = {}
        for name, step in [("succeeded", haiku_step()), ("failed", haiku_step(exit=3))]:
            fake_codex.script(step)
            runs[name] = create_job(api, runtime_options={"no_cache": True})["request_id"]
            manual_dispatch.run_inline(runs[name])
        assert len(receiver.received) == 2
    fake_codex.script(ask())
    waiting = api.post("/v1/jobs", interactive_job(), format="json").json()["request_id"]
    manual_dispatch.run_inline(waiting)
    assert offer_due_question_emails() == 1 and len(mail.outbox) == 1
    create_job(api, runtime_options={"no_cache": True}, input={"topic": "queued"})
    running = create_job(api, runtime_options={"no_cache": True}, input={"topic": "running"})["request_id"]
    assert claim_turn(running, 1, "test:1:metrics") is not None
    refusals = [RelayRefusal("key_in_request", "POST", "/v1/x", "a key"), RelayRefusal("path", "GET", "/x", "no")]
    record_relay_activity(runs["succeeded"], 1, 1_500, refusals)
    open_connection(alice)
    return runs


@pytest.fixture
def staff_scraper(admin_user) -> APIClient:
    return client_for(admin_user)


def test_the_scrape_is_what_readme_lists(known_runs, staff_scraper):
    """Every metric of a scrape is in README with its type and labels, and every one README lists
    is scraped (the known runs give each family a sample)."""
    scraped = {name: (kind, labels) for name, (kind, labels, _) in scrape(staff_scraper).items()}
    assert scraped == readme_metrics()


def test_figures_of_a_known_set_of_runs(known_runs, staff_scraper):
    metrics = scrape(staff_scraper)
    runs = metrics["skillrunner_runs"][2]
    expected = {"queued": 1, "running": 1, "waiting_user": 1, "succeeded": 1, "failed": 1, "canceled": 0}
    assert {sample.labels["status"]: sample.value for sample in runs} == expected
    assert value(metrics["skillrunner_failed_runs"][2], "skillrunner_failed_runs", code="ENGINE_FAILED") == 1
    assert len(metrics["skillrunner_failed_runs"][2]) == 1
    assert value(metrics["skillrunner_queue_depth"][2], "skillrunner_queue_depth") == 1
    oldest = value(metrics["skillrunner_waiting_user_oldest_seconds"][2], "skillrunner_waiting_user_oldest_seconds")
    assert 0 < oldest < 60
    assert value(metrics["skillrunner_slots_used"][2], "skillrunner_slots_used") == 1
    assert value(metrics["skillrunner_slots_free"][2], "skillrunner_slots_free") == 3
    durations = metrics["skillrunner_turn_duration_seconds"][2]
    # Three codex turns ended (succeeded, failed, the question), each in well under a minute.
    assert value(durations, "skillrunner_turn_duration_seconds_count", engine="codex") == 3
    assert value(durations, "skillrunner_turn_duration_seconds_bucket", engine="codex", le="60.0") == 3
    assert value(durations, "skillrunner_turn_duration_seconds_bucket", engine="codex", le="+Inf") == 3
    assert 0 < value(durations, "skillrunner_turn_duration_seconds_sum", engine="codex") < 180
    tokens = metrics["skillrunner_model_tokens_total"][2]
    assert value(tokens, "skillrunner_model_tokens_total", engine="codex") == 1_500
    refusals = metrics["skillrunner_relay_refusals_total"][2]
    assert {(s.labels["engine"], s.labels["reason"]): s.value for s in refusals} == {
        ("codex", "key_in_request"): 1,
        ("codex", "path"): 1,
    }
    deliveries = {s.labels["state"]: s.value for s in metrics["skillrunner_webhook_deliveries"][2]}
    assert deliveries == {"pending": 0, "delivered": 1, "failed": 1}
    emails = {s.labels["state"]: s.value for s in metrics["skillrunner_question_emails"][2]}
    assert emails == {"pending": 0, "sent": 1, "skipped": 0, "failed": 0}
    assert value(metrics["skillrunner_live_connections"][2], "skillrunner_live_connections") == 1


def test_an_empty_service_scrapes_zeros(staff_scraper):
    metrics = scrape(staff_scraper)
    assert {sample.value for sample in metrics["skillrunner_runs"][2]} == {0}
    assert value(metrics["skillrunner_waiting_user_oldest_seconds"][2], "skillrunner_waiting_user_oldest_seconds") == 0


def test_the_dashboard_and_readme_name_only_scraped_metrics(known_runs, staff_scraper):
    """The Grafana dashboard's queries and README's section name series a scrape has."""
    metrics = scrape(staff_scraper)
    series = {sample.name for _, _, samples in metrics.values() for sample in samples} | set(metrics)
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]
    assert queries and {name for expr in queries for name in NAME.findall(expr)} <= series
    assert set(NAME.findall(readme_section())) <= series


def test_no_credentials_get_401_and_a_token_challenge(db):
    response = APIClient().get("/metrics")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"
    assert response.json()["detail"]["code"] == "NOT_AUTHENTICATED"


def test_a_bad_token_gets_401(db):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token sr_0000000011111111222222223333333344444444")
    response = client.get("/metrics")
    assert response.status_code == 401
    assert response.json()["detail"]["code"] == "NOT_AUTHENTICATED"


def test_a_token_of_someone_not_staff_gets_403(api):
    response = api.get("/metrics")
    assert response.status_code == 403
    assert response.json()["detail"]["code"] == "PERMISSION_DENIED"


def test_a_staff_token_scrapes(staff_scraper):
    assert "skillrunner_runs" in scrape(staff_scraper)


@pytest.mark.parametrize(
    ("allowed", "peer", "status"),
    [
        ("127.0.0.1", "127.0.0.1", 200),
        ("10.0.0.0/8", "10.1.2.3", 200),
        ("10.0.0.0/8", "::ffff:10.1.2.3", 200),  # an IPv4 peer of a dual-stack socket
        ("2001:db8::/32", "2001:db8::7", 200),
        ("10.0.0.0/8", "192.168.1.1", 401),
        ("", "127.0.0.1", 401),
    ],
)
def test_a_scrape_address_needs_no_token(settings, db, allowed, peer, status):
    settings.SKILLRUNNER_METRICS_ALLOW = tuple(ipaddress.ip_network(entry) for entry in filter(None, [allowed]))
    response = APIClient(REMOTE_ADDR=peer).get("/metrics")
    assert response.status_code == status, response.content


def test_local_mode_scrapes_from_loopback_without_credentials(settings, db):
    """The local user, staff, is whoever calls without credentials; other peers stay refused."""
    settings.SKILLRUNNER_LOCAL_MODE = True
    assert APIClient().get("/metrics").status_code == 200
    assert APIClient(REMOTE_ADDR="10.1.2.3").get("/metrics").status_code == 403


def test_a_bad_scrape_address_is_refused_at_start(tmp_path):
    result = run_with_production_settings(
        "import django; django.setup()", tmp_path, SKILLRUNNER_METRICS_ALLOW="10.0.0.0/8,prometheus.internal"
    )
    assert result.returncode != 0
    assert "SKILLRUNNER_METRICS_ALLOW must list IP addresses or networks (CIDR), got 'prometheus.internal'" in (
        result.stderr
    )
