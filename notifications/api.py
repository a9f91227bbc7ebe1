"""`/v1/webhooks` (R-NT1): thin views over `services`."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle
from rest_framework.views import APIView

from kernel.throttles import SETTINGS_SCOPE

from . import services
from .models import ALL_EVENTS, WebhookEndpoint


class WebhookInput(serializers.Serializer):
    url = serializers.URLField(max_length=2048)
    events = serializers.ListField(
        child=serializers.ChoiceField(choices=ALL_EVENTS),
        allow_empty=False,
        required=False,
        default=lambda: list(ALL_EVENTS),
        help_text="the run events to send; all four when left out",
    )

    def validate_events(self, events: list[str]) -> list[str]:
        return list(dict.fromkeys(events))


class WebhookOutput(serializers.ModelSerializer):
    class Meta:
        model = WebhookEndpoint
        fields = ["id", "url", "events", "created_at"]


class WebhookCreatedOutput(WebhookOutput):
    secret = serializers.CharField(help_text="signs every delivery; shown only in this answer")

    class Meta(WebhookOutput.Meta):
        fields = ["id", "url", "events", "secret", "created_at"]


def _settings_change_throttles(view: APIView) -> list[ScopedRateThrottle]:
    """Registering and removing webhooks share the settings page's limit (R-FS1); reads are free."""
    return [ScopedRateThrottle()] if view.request.method in ("POST", "DELETE") else []


class WebhookListCreateView(APIView):
    throttle_scope = SETTINGS_SCOPE

    def get_throttles(self):
        return _settings_change_throttles(self)

    @extend_schema(responses=WebhookOutput(many=True))
    def get(self, request):
        return Response(WebhookOutput(services.endpoints_of(request.user), many=True).data)

    @extend_schema(request=WebhookInput, responses={201: WebhookCreatedOutput})
    def post(self, request):
        payload = WebhookInput(data=request.data)
        payload.is_valid(raise_exception=True)
        endpoint = services.register_endpoint(owner=request.user, **payload.validated_data)
        return Response(WebhookCreatedOutput(endpoint).data, status=status.HTTP_201_CREATED)


class WebhookDetailView(APIView):
    throttle_scope = SETTINGS_SCOPE

    def get_throttles(self):
        return _settings_change_throttles(self)

    @extend_schema(request=None, responses={204: None})
    def delete(self, request, webhook_id):
        services.delete_endpoint(request.user, webhook_id)
        return Response(status=status.HTTP_204_NO_CONTENT)
