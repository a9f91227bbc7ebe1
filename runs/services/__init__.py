"""Every change to a run goes through here: one transaction per change, each appending its event.

Views, consumers and tasks call these functions; none of them sets a run's status itself.
One module per concern (admission, dispatching, lifecycle, claims, activity, interactions, spend, security); the public
functions are re-exported here, so callers write `services.create_run(...)`.
"""

from .activity import append_activity
from .admission import (
    attach_skill_package,
    attach_upload,
    create_run,
    create_run_with_files,
    expire_upload,
    fail_awaiting_upload,
    receive_upload,
    rerun,
)
from .claims import StickyWait, claim_turn, complete_turn, record_engine_pid, sticky_wait_state, turn_still_ours
from .dispatching import dispatch_queued_runs
from .interactions import (
    AUTO_DECISION_INSTRUCTION,
    OnWaitTimeout,
    ReplyFile,
    StagedReplyFiles,
    expire_wait,
    on_wait_timeout,
    recover_waiting_run,
    reply_file_limits,
    submit_reply,
)
from .lifecycle import TRANSITIONS, cancel_run, fail_run, record_warning, sticky_wait_name
from .security import record_keys_in_output
from .spend import record_relay_activity

__all__ = [
    "AUTO_DECISION_INSTRUCTION",
    "TRANSITIONS",
    "OnWaitTimeout",
    "ReplyFile",
    "StagedReplyFiles",
    "StickyWait",
    "append_activity",
    "attach_skill_package",
    "attach_upload",
    "cancel_run",
    "claim_turn",
    "complete_turn",
    "create_run",
    "create_run_with_files",
    "dispatch_queued_runs",
    "expire_upload",
    "expire_wait",
    "fail_awaiting_upload",
    "fail_run",
    "on_wait_timeout",
    "record_engine_pid",
    "record_keys_in_output",
    "record_warning",
    "record_relay_activity",
    "receive_upload",
    "recover_waiting_run",
    "reply_file_limits",
    "rerun",
    "sticky_wait_name",
    "sticky_wait_state",
    "submit_reply",
    "turn_still_ours",
]
