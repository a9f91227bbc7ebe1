"""API tokens, stored hashed: only the holder ever sees the secret (shown once at creation)."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import uuid
from datetime import datetime

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import models
from django.db.models import Q
from django.utils import timezone

from kernel.compiled import PreparedQuery

TOKEN_PREFIX = "sr_"
LOOKUP_LENGTH = 8
NAME_MAX_LENGTH = 100


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def split_key(key: str) -> tuple[str, str] | None:
    """The lookup a well-formed key is found by and the digest its stored hash must equal."""
    if not key.startswith(TOKEN_PREFIX) or len(key) < len(TOKEN_PREFIX) + LOOKUP_LENGTH + 16:
        return None
    return key[len(TOKEN_PREFIX) : len(TOKEN_PREFIX) + LOOKUP_LENGTH], _digest(key)


def is_key_hash(stored: str, digest: str) -> bool:
    return hmac.compare_digest(stored, digest)  # constant time: no timing hint about the hash


def lock_user(user) -> str | None:
    """Holds `user`'s row until the transaction ends: one admission at a time against a per-user
    cap, so two requests cannot both take the last place. Returns the password hash the row holds."""
    return get_user_model().objects.select_for_update().filter(pk=user.pk).values_list("password", flat=True).first()


def expired(now: datetime, via: str = "") -> Q:
    """Tokens whose expiry is `now` or earlier (one without an expiry never expires); `via`, a
    relation's path with its "__", finds rows by the token they name."""
    return Q(**{f"{via}expires_at__lte": now})


class ApiTokenQuerySet(models.QuerySet["ApiToken"]):
    def active(self, now: datetime | None = None) -> ApiTokenQuerySet:
        """Tokens that still open the API (`now`, by default the present): neither revoked nor expired."""
        return self.filter(~expired(now or timezone.now()), revoked_at__isnull=True)

    def for_key(self, key: str) -> ApiToken | None:
        """The active token whose key this is, compared in constant time. Expiry is a condition
        of the same statement: an expired token is refused as a revoked one, at no extra query."""
        parts = split_key(key)
        if parts is None:
            return None
        lookup, digest = parts
        for token in _ACTIVE_BY_LOOKUP.instances(lookup, timezone.now()):
            if is_key_hash(token.key_hash, digest):
                return token
        return None


class ApiToken(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    # Unique among a user's active tokens (accounts.services.issue_token checks it): a name
    # says what a token is for, so two live ones of the same name could not be told apart.
    name = models.CharField(max_length=NAME_MAX_LENGTH)
    lookup = models.CharField(max_length=LOOKUP_LENGTH, db_index=True, editable=False)
    key_hash = models.CharField(max_length=64, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(
        null=True, blank=True, help_text="refused from then on, as if revoked; empty: never"
    )

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} {TOKEN_PREFIX}{self.lookup}… ({self.user})"

    @property
    def prefix(self) -> str:
        """What the page shows of the key: enough to recognise it, nothing to use."""
        return f"{TOKEN_PREFIX}{self.lookup}…"

    @property
    def is_active(self) -> bool:
        """As `ApiTokenQuerySet.active` reads it, for a token already loaded."""
        expired = self.expires_at is not None and self.expires_at <= timezone.now()
        return self.revoked_at is None and not expired

    @classmethod
    def default_name(cls, user) -> str:
        """ "Token N", N past the user's tokens so far and any active token's name."""
        taken = set(cls.objects.filter(user=user).active().values_list("name", flat=True))
        number = cls.objects.filter(user=user).count() + 1
        while f"Token {number}" in taken:
            number += 1
        return f"Token {number}"

    @classmethod
    def issue(cls, user, name: str = "", expires_at: datetime | None = None) -> tuple[ApiToken, str]:
        """Create a token and return it with its plain key, which is not stored anywhere. Without
        a name it is called as `default_name` says."""
        lookup = secrets.token_hex(LOOKUP_LENGTH // 2)
        key = f"{TOKEN_PREFIX}{lookup}{secrets.token_urlsafe(32)}"
        name = name or cls.default_name(user)
        token = cls.objects.create(user=user, name=name, lookup=lookup, key_hash=_digest(key), expires_at=expires_at)
        return token, key


# Every request with an API key reads its token: compiled once per process (kernel.compiled).
_ACTIVE_BY_LOOKUP = PreparedQuery(
    lambda lookup, now: ApiToken.objects.active(now).filter(lookup=lookup).select_related("user").order_by(),
    ApiToken._meta.get_field("lookup"),
    ApiToken._meta.get_field("expires_at"),
)


class NotificationSettings(models.Model):
    """A user's choices about notifications (R-NT3); a user without a row gets the defaults."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notification_settings"
    )
    email_questions = models.BooleanField(
        default=True,
        help_text="email me when one of my runs asks a question I have not answered within the grace period",
    )

    class Meta:
        verbose_name_plural = "notification settings"

    def __str__(self) -> str:
        return f"notification settings of {self.user}"


class LiveConnection(models.Model):
    """One open websocket or event stream (R-FS2, R-FS3): counted toward its user's cap, and
    ended when the token or browser session it was opened with is revoked or ends.

    Rows live in the database every web process shares, so the cap holds across processes. The
    process holding a connection renews its rows' `expires_at` (accounts.connections); rows of a
    process that died stop counting once they expire."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="live_connections")
    token = models.ForeignKey(ApiToken, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    # The browser session's key, as django_session holds it: its connections end with it.
    session_key = models.CharField(max_length=40, blank=True, db_index=True)
    opened_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(db_index=True)

    def __str__(self) -> str:
        return f"live connection of {self.user_id} since {self.opened_at}"


class SpendLimit(models.Model):
    """A user's own daily token budget at the provider relay (R-SB9), set by an admin; a user
    without a row has SKILLRUNNER_USER_MAX_TOKENS_PER_DAY."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="spend_limit")
    max_tokens_per_day = models.PositiveBigIntegerField(
        help_text="model tokens this user's runs may spend per day (0: no limit)"
    )

    def __str__(self) -> str:
        return f"spend limit of {self.user}"
