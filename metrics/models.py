"""What the scrape cannot afford to count from every run, turn or event ever stored, counted as it
happens instead, in the transaction that records it (R-OP11: under 50 ms beside 10,000 runs): the
turn duration histogram's buckets, the runs that ended by status and error code, and what the
provider relay counted and refused. Each row only grows: the figures are true counters, whatever retention removes."""

from __future__ import annotations

from django.db import models


class TurnDurations(models.Model):
    """Turns of one engine that ended within one bucket of metrics.collector.TURN_DURATION_BUCKETS
    (index `bucket`; the last one is beyond them all), and their durations' sum."""

    engine = models.CharField(max_length=32)
    bucket = models.PositiveSmallIntegerField()
    turns = models.PositiveBigIntegerField(default=0)
    duration_ms = models.PositiveBigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["engine", "bucket"], name="unique_turn_durations_bucket")]

    def __str__(self) -> str:
        return f"{self.engine} bucket {self.bucket}: {self.turns}"


class RunEnds(models.Model):
    """Runs that ended in one status (succeeded, failed, canceled) with one error code ("": none,
    as every success has)."""

    status = models.CharField(max_length=16)
    code = models.TextField()  # a code is the service's or an engine's: no length to refuse
    runs = models.PositiveBigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["status", "code"], name="unique_run_ends_status_code")]

    def __str__(self) -> str:
        return f"{self.status} {self.code or 'without a code'}: {self.runs}"


class RelayRefusals(models.Model):
    """Requests of one engine that the provider relay refused for one reason (R-SB9)."""

    engine = models.CharField(max_length=32)
    reason = models.TextField()
    refusals = models.PositiveBigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["engine", "reason"], name="unique_relay_refusals_reason")]

    def __str__(self) -> str:
        return f"{self.engine} {self.reason}: {self.refusals}"


class ModelTokens(models.Model):
    """Model tokens the provider relay counted for one engine's runs (R-SB8)."""

    engine = models.CharField(max_length=32, unique=True)
    tokens = models.PositiveBigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.engine}: {self.tokens}"
