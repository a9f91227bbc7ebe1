from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.templatetags.static import static
from django.urls import include, path, register_converter
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

# The OpenAPI document's description of our token authentication: registered where the document
# is served (and `manage.py spectacular` reads this URLconf), not at every process's start.
from accounts import login, schema  # noqa: F401
from accounts import views as account_views
from enginehost import api as engines
from notifications import api as webhooks
from notifications import views as webhook_views
from runs import api as jobs
from skills import api as skills
from upstream import api as upstream

from . import system
from .converters import AnyPathConverter

register_converter(AnyPathConverter, "anypath")

# The admin says whose it is; its "View site" and each run's "View on site" lead to the pages.
admin.site.site_header = "Skill Runner administration"
admin.site.site_title = "Skill Runner admin"
admin.site.index_title = "Runs, skills, users and settings"
admin.site.site_url = "/"
# Without the side list of models (the index and the breadcrumbs lead to them), a change list has
# the page's width beside its filters: the run list's columns fit at 1280 px.
admin.site.enable_nav_sidebar = False

job = "v1/jobs/<str:request_id>"

api_v1 = [
    path("v1/system/ping", system.ping, name="ping"),
    path("v1/system/healthz", system.healthz),
    path("v1/system/readyz", system.readyz),
    path("v1/skills", skills.SkillListView.as_view(), name="skill-list"),
    path("v1/skills/<str:skill_id>", skills.SkillDetailView.as_view(), name="skill-detail"),
    path("v1/skill-packages/install", skills.SkillInstallView.as_view(), name="skill-install"),
    path("v1/engines", engines.EngineListView.as_view(), name="engine-list"),
    path("v1/engines/<str:engine>/models", engines.EngineModelsView.as_view(), name="engine-models"),
    path("v1/jobs", jobs.JobListCreateView.as_view(), name="job-list"),
    # The service's fields and upstream's (SPEC R-UP10), as are the reply's.
    path(job, upstream.JobDetailView.as_view(), name="job-detail"),
    path(f"{job}/upload", jobs.JobUploadView.as_view(), name="job-upload"),
    path(f"{job}/interaction/pending", jobs.PendingInteractionView.as_view(), name="job-pending"),
    path(f"{job}/interaction/reply", upstream.ReplyView.as_view(), name="job-reply"),
    path(f"{job}/interaction/history", jobs.InteractionHistoryView.as_view(), name="job-history"),
    path(f"{job}/cancel", jobs.CancelView.as_view(), name="job-cancel"),
    path(f"{job}/result", jobs.ResultView.as_view(), name="job-result"),
    path(f"{job}/artifacts", jobs.ArtifactListView.as_view(), name="job-artifacts"),
    path(f"{job}/artifacts/<anypath:path>", jobs.ArtifactFileView.as_view(), name="job-artifact"),
    path(f"{job}/bundle", jobs.BundleView.as_view(), name="job-bundle"),
    path(f"{job}/logs", jobs.LogsView.as_view(), name="job-logs"),
    # The service's own form, or upstream's when asked with its parameters (SPEC R-UP5).
    path(f"{job}/events/history", upstream.EventHistoryView.as_view(), name="job-events-history"),
    path(f"{job}/events", upstream.EventStreamView.as_view(), name="job-events"),
    path("v1/webhooks", webhooks.WebhookListCreateView.as_view(), name="webhook-list"),
    path("v1/webhooks/<str:webhook_id>", webhooks.WebhookDetailView.as_view(), name="webhook-detail"),
    path("v1/usage", jobs.UsageView.as_view(), name="usage"),
    path("v1/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("v1/docs/", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="docs"),
]

urlpatterns = [
    *api_v1,
    path("", include("upstream.urls")),
    # Browsers ask for it whatever the page says; the pages link the SVG itself.
    path("favicon.ico", RedirectView.as_view(url=static("favicon.svg"), permanent=True)),
    path("healthz", system.healthz),
    path("", include("metrics.urls")),
    path("readyz", system.readyz),
    path("admin/login/", login.admin_login),  # before the admin's own (R-FS1)
    path("admin/", admin.site.urls),
    # Only these two: the password-reset and -change flows need mail this service does not set up (R-FS3).
    path("accounts/login/", login.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("settings/", account_views.settings_page, name="account-settings"),
    path("settings/webhooks/", webhook_views.add_webhook, name="settings-webhook-add"),
    path("settings/webhooks/<str:webhook_id>/delete/", webhook_views.delete_webhook, name="settings-webhook-delete"),
    path("settings/webhooks/<str:webhook_id>/test/", webhook_views.send_test, name="settings-webhook-test"),
    path("settings/deliveries/<str:delivery_id>/", webhook_views.delivery_detail, name="settings-delivery"),
    path("settings/deliveries/<str:delivery_id>/redeliver/", webhook_views.redeliver, name="settings-redeliver"),
    path("settings/tokens/", account_views.create_token, name="settings-token-create"),
    path("settings/tokens/<str:token_id>/revoke/", account_views.revoke_token, name="settings-token-revoke"),
    path("", include("skillrunner.urls_ui")),
]
