"""What the scrape cannot afford to count from every turn ever stored: the turn duration
histogram's buckets, kept as each turn ends (metrics.receivers) instead of read from all of
TurnUsage at every scrape (R-OP11: under 50 ms beside 10,000 runs)."""

from __future__ import annotations

from django.db import models


class TurnDurations(models.Model):
    """Turns of one engine that ended within one bucket of metrics.collector.TURN_DURATION_BUCKETS
    (index `bucket`; the last one is beyond them all), and their durations' sum. Only ever grows:
    the histogram is a true counter, whatever retention removes."""

    engine = models.CharField(max_length=32)
    bucket = models.PositiveSmallIntegerField()
    turns = models.PositiveBigIntegerField(default=0)
    duration_ms = models.PositiveBigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["engine", "bucket"], name="unique_turn_durations_bucket")]

    def __str__(self) -> str:
        return f"{self.engine} bucket {self.bucket}: {self.turns}"
