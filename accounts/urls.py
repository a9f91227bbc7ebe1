from django.contrib.auth import views as auth_views
from django.urls import path

# The OpenAPI document's description of our token authentication: registered where the document
# is served (and `manage.py spectacular` reads this URLconf), not at every process's start.
from . import login, schema, views  # noqa: F401

urlpatterns = [
    path("admin/login/", login.admin_login),  # the root URLconf mounts this before the admin's own (R-FS1)
    # Only these two: the password-reset and -change flows need mail this service does not set up (R-FS3).
    path("accounts/login/", login.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("settings/", views.settings_page, name="account-settings"),
    path("settings/tokens/", views.create_token, name="settings-token-create"),
    path("settings/tokens/<str:token_id>/revoke/", views.revoke_token, name="settings-token-revoke"),
]
