"""Browser pages, mounted at the site root under the namespace `ui`; each app owns its pages."""

from runs import urls_ui as run_pages
from skills import urls_ui as skill_pages

app_name = "ui"

urlpatterns = [*run_pages.urlpatterns, *skill_pages.urlpatterns]
