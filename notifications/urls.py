from django.urls import path

from . import api, views

urlpatterns = [
    path("v1/webhooks", api.WebhookListCreateView.as_view(), name="webhook-list"),
    path("v1/webhooks/<str:webhook_id>", api.WebhookDetailView.as_view(), name="webhook-detail"),
    # The settings page's webhooks section (accounts.settings_sections).
    path("settings/webhooks/", views.add_webhook, name="settings-webhook-add"),
    path("settings/webhooks/<str:webhook_id>/delete/", views.delete_webhook, name="settings-webhook-delete"),
    path("settings/webhooks/<str:webhook_id>/test/", views.send_test, name="settings-webhook-test"),
    path("settings/deliveries/<str:delivery_id>/", views.delivery_detail, name="settings-delivery"),
    path("settings/deliveries/<str:delivery_id>/redeliver/", views.redeliver, name="settings-redeliver"),
]
