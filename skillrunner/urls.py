"""The root URLconf: each app's routes (its `urls.py`), the OpenAPI document, the admin, and the
pages of the apps that have them in the `ui` namespace."""

from django.contrib import admin
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from runs import urls as run_urls
from skills import urls as skill_urls

# The admin says whose it is; its "View site" and each run's "View on site" lead to the pages.
admin.site.site_header = "Skill Runner administration"
admin.site.site_title = "Skill Runner admin"
admin.site.index_title = "Runs, skills, users and settings"
admin.site.site_url = "/"
# Without the side list of models (the index and the breadcrumbs lead to them), a change list has
# the page's width beside its filters: the run list's columns fit at 1280 px.
admin.site.enable_nav_sidebar = False

pages = [*run_urls.page_patterns, *skill_urls.page_patterns]

urlpatterns = [
    path("", include("health.urls")),
    path("", include("skills.urls")),
    path("", include("enginehost.urls")),
    path("", include("runs.urls")),
    path("", include("upstream.urls")),
    path("", include("notifications.urls")),
    path("v1/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("v1/docs/", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="docs"),
    path("", include("metrics.urls")),
    # Browsers ask for it whatever the page says; the pages link the SVG itself.
    path("favicon.ico", RedirectView.as_view(url=static("favicon.svg"), permanent=True)),
    path("", include("accounts.urls")),  # its admin login before the admin's own
    path("admin/", admin.site.urls),
    path("", include((pages, "ui"))),
]
