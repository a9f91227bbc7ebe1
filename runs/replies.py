"""The one way a reply comes in, whatever carries it: the REST endpoint (in the service's and
upstream's forms), the run socket, the inbox and upstream's file reply all hand it here and only
translate the answer (or the coded error) to their transport."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kernel.throttles import REPLY_SCOPE, check_rate

from . import selectors
from .models import Run
from .serializers import ReplyInput
from .services import StagedReplyFiles, submit_reply


@dataclass(frozen=True)
class SentReply:
    """A reply as its transport received it: `fields` as sent (`interaction_id`, `response`,
    `idempotency_key`; their shape is checked here) and the files a file reply staged."""

    fields: Mapping[str, Any]
    files: StagedReplyFiles | None = None


def receive_reply(user, request_id: Any, read: Callable[[Run], SentReply]) -> Run:
    """Take one reply of `user` to run `request_id` and return the run as the reply left it.

    Counted against the user's reply rate first (R-FS1: once per reply, so no transport bypasses
    another; an attempt at a run they cannot see counts too), then the run looked up as the user
    may see it (404 otherwise). Only then is the reply read (`read`, given the run: a file reply's
    body is not read past the limit, an inbox answer finds its option's value), its shape checked,
    and it is submitted.
    """
    check_rate(user, REPLY_SCOPE)
    run = selectors.run_for(user, request_id)
    sent = read(run)
    payload = ReplyInput(data=sent.fields)
    payload.is_valid(raise_exception=True)
    data = payload.validated_data
    return submit_reply(
        run,
        user=user,
        interaction_id=data["interaction_id"],
        response=data["response"],
        idempotency_key=data["idempotency_key"],
        files=sent.files,
    )
