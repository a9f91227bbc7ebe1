"""An engine's output reaches the run's logs redacted, in bounded memory, however it is cut
(R-AC2): one line of 100 MB, with secrets straddling the pieces the worker redacts it in."""

from __future__ import annotations

import io
import json
import mmap
import os
import re
import sys
import tracemalloc

import pytest

from enginehost.config import configured_secrets
from engines.process import run_process
from engines.types import TurnResult
from kernel.logging import READ_BYTES, REDACTED, redact, redact_stream
from tests.engines.fakes import FakeControl
from worker.execution import RawOutput, _save_logs

API_KEY = "sk-live-0123456789abcdefGHIJ"  # the configured engine key
PATTERNED = "sr_0123abcd" + "T" * 32  # an API token of ours: redacted by its pattern
TOTAL_BYTES = 100 * 1024 * 1024
MAX_GROWTH = 64 * 1024 * 1024

# Writes TOTAL_BYTES of dots without a newline, in 1 MiB writes, with each placed text at its offset.
CHILD = """
import json, sys
total, placed = int(sys.argv[1]), json.loads(sys.argv[2])
block = 1 << 20
for start in range(0, total, block):
    data = bytearray(b"." * min(block, total - start))
    for offset, text in placed:
        raw = text.encode()
        for i in range(max(offset, start), min(offset + len(raw), start + len(data))):
            data[i - start] = raw[i - offset]
    sys.stdout.buffer.write(data)
"""


class RecordingControl(FakeControl):
    """The worker's way with output: every byte to the raw log, as ClaimControl does."""

    def __init__(self, raw: RawOutput) -> None:
        super().__init__()
        self.raw = raw

    def on_output(self, stream: str, chunk: bytes) -> None:
        self.raw.write(stream, chunk)


def straddling(border: int, text: str) -> tuple[int, str]:
    """`text` placed with its middle on `border`, between spaces (dots would continue a token)."""
    text = f" {text} "
    return border - len(text) // 2, text


def test_a_100_mb_line_is_logged_redacted_in_bounded_memory(configure_engine, tmp_path):
    configure_engine("codex", api_key=API_KEY)
    placed = [straddling(READ_BYTES * k, API_KEY) for k in (1, 7, 50)]
    placed += [straddling(READ_BYTES * 60, PATTERNED), straddling(READ_BYTES * 61, f"Authorization: Bearer {API_KEY}")]
    logs = tmp_path / "records" / "logs"
    raw = RawOutput(logs)
    lines: list[bytes] = []

    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        result = run_process(
            [sys.executable, "-c", CHILD, str(TOTAL_BYTES), json.dumps(placed)],
            cwd=tmp_path,
            env={"PATH": "/usr/bin:/bin"},
            control=RecordingControl(raw),
            hard_timeout=120,
            on_line=lines.append,
        )
        turn = TurnResult(outcome="final", stdout=result.stdout, stderr=result.stderr, exit_code=result.exit_code)
        found = _save_logs(tmp_path / "records", 1, "the prompt", turn, raw, configured_secrets())
        growth = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    print(f"peak memory growth while running and logging {TOTAL_BYTES >> 20} MiB: {growth / 2**20:.1f} MiB")

    assert result.exit_code == 0 and lines == []  # one line, too long for a line reader
    assert found == ["logs/attempt-1.stdout.txt"]  # the places to record (R-SB10)
    log = logs / "attempt-1.stdout.txt"
    assert sorted(path.name for path in logs.iterdir()) == [
        f"attempt-1.{name}.txt" for name in ("prompt", "stderr", "stdout")
    ]
    with open(log, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as text:
        found = {secret: len(re.findall(re.escape(secret.encode()), text)) for secret in (API_KEY, PATTERNED, REDACTED)}
    assert found == {API_KEY: 0, PATTERNED: 0, REDACTED: len(placed)}
    expected_size = TOTAL_BYTES + sum(len(REDACTED) - len(secret) for secret in (API_KEY,) * 4 + (PATTERNED,))
    assert log.stat().st_size == expected_size
    assert growth < MAX_GROWTH, f"{growth / 2**20:.1f} MiB"


SAMPLES = [
    f"plain text {API_KEY} and more",
    "Authorization: Bearer " + "z" * 90 + " then the rest",
    'config {"api_key": "' + "k" * 150 + '", "password": "hunter2hunter2"}\nnext line',
    "token=" + "v" * 200 + ",after",  # a value longer than what is held: replaced at once
    "sr_0123abcd" + "Q" * 40 + f"{API_KEY}sk-" + "w" * 30,
    "password: 'password: 'x authorization: token token=abc " + "y" * 70,  # one replacement makes the next
]


@pytest.mark.parametrize("text", SAMPLES)
@pytest.mark.parametrize("read_bytes", [1, 7, 64])
def test_the_stream_redacts_exactly_as_the_whole_text_would(text, read_bytes, monkeypatch):
    """Whatever the pieces, the same as `redact` of the whole: here pieces of a few bytes and a
    hold shorter than some values (the module's are 1 MiB and 64 KiB)."""
    monkeypatch.setattr("kernel.logging.READ_BYTES", read_bytes)
    monkeypatch.setattr("kernel.logging.HOLD_CHARS", 64)
    text = text + " é " + text  # a character of two bytes, cut between them when read a byte at a time
    streamed = io.StringIO()
    redact_stream(io.BytesIO(text.encode()), streamed, (API_KEY,))
    assert streamed.getvalue() == redact(text, (API_KEY,))
    assert API_KEY not in streamed.getvalue()


def test_a_short_output_is_kept_in_memory_and_a_long_one_spills_to_an_unnamed_file(tmp_path):
    """A few KB, as most turns print, make no file before the log; more than RAW_IN_MEMORY_BYTES
    go to a file of the logs folder that has no name, so nothing is left behind to remove."""
    from worker.execution import RAW_IN_MEMORY_BYTES

    logs = tmp_path / "logs"
    raw = RawOutput(logs)
    raw.write("stdout", b'{"type": "turn.completed"}\n')
    raw.write("stderr", b"x" * RAW_IN_MEMORY_BYTES)
    raw.write("stderr", b"y")
    assert list(logs.iterdir()) == []
    (spilled,) = [path for path in _open_files() if path.startswith(str(logs))]  # stderr's, unnamed
    assert spilled.endswith(" (deleted)"), spilled
    turn = TurnResult(outcome="final", stdout="capped copy", stderr="capped copy", exit_code=0)
    assert _save_logs(tmp_path, 1, "the prompt", turn, raw, ()) == []
    assert (logs / "attempt-1.stdout.txt").read_text() == '{"type": "turn.completed"}\n'
    assert (logs / "attempt-1.stderr.txt").read_text() == "x" * RAW_IN_MEMORY_BYTES + "y"
    assert [path for path in _open_files() if path.startswith(str(logs))] == []  # closed with the logs written


def _open_files() -> list[str]:
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            found.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:  # the listing's own descriptor, closed by now
            pass
    return found
