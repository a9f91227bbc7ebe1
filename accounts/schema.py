"""Describes token authentication in the OpenAPI document, so /v1/docs/ can send a token."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class HashedTokenScheme(OpenApiAuthenticationExtension):
    target_class = "accounts.authentication.HashedTokenAuthentication"
    name = "tokenAuth"

    def get_security_definition(self, auto_schema):
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": "Token authentication: `Authorization: Token <key>` (keys from `manage.py create_api_token`).",
        }
