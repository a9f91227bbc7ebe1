"""Medians, p90s and the printed table."""

from __future__ import annotations

import math
import statistics
from typing import Any

# Reference: the FastAPI Skill Runner on this machine kind with a 10 ms fake engine.
REFERENCE = {"a": 100.0, "b": 270.0, "c": 137.0, "d": 93.0, "e": 4.0, "idle_mib": 86.0}
# Targets: each latency at most a fifth of the reference, throughput at least 25 runs/s.
TARGET = {"a": 20.0, "b": 54.0, "c": 27.4, "d": 18.6, "e": 25.0, "activity": 50.0}

LATENCY_ROWS = [
    # (key, label, reference key, floor key)
    ("post_rtt", "POST /v1/jobs round trip", None, None),
    ("a", "(a) POST returned -> engine started", "a", "spawn_to_start"),
    ("b_poll", "(b) POST -> succeeded seen, GET poll 10 ms", "b", "spawn_to_exit"),
    ("b_ws", "(b) POST -> succeeded seen, websocket", "b", "spawn_to_exit"),
    ("c_waiting_poll", "(c) asking engine exit -> waiting_user, GET poll", "c", "exit_to_reaped"),
    ("c_waiting_ws", "(c) asking engine exit -> waiting_user, websocket", "c", "exit_to_reaped"),
    ("c_prompt_ws", "(c) asking engine exit -> prompt on websocket", "c", "exit_to_reaped"),
    ("reply_rtt", "reply POST round trip", None, None),
    ("d", "(d) reply POST returned -> resumed engine started", "d", "spawn_to_start"),
    ("reply_to_done_ws", "reply POST -> succeeded seen, websocket", None, None),
    ("a_interactive", "interactive POST returned -> engine started", None, None),
    ("activity_ws", "engine stdout line -> activity event on websocket (R-AC3)", "activity", None),
    ("webhook_waiting", "(g) run.waiting_user committed -> webhook received", None, None),
    ("webhook_succeeded", "(g) run.succeeded committed -> webhook received", None, None),
]
# The same turns split at the worker's own event times (server clock = client clock here).
BREAKDOWN_ROWS = [
    ("t_returned_to_claim", "POST returned -> turn claimed (queue + dispatch)"),
    ("t_reply_returned_to_claim", "reply returned -> resumed turn claimed"),
    ("t_claim_to_spawn", "claimed -> engine started (prepare + spawn)"),
    ("t_exit_to_decided", "engine exited -> outcome recorded (exit seen, parse, decide, logs)"),
    ("t_decided_to_seen_poll", "outcome recorded -> client sees it, GET poll"),
    ("t_decided_to_seen_ws", "outcome recorded -> client sees it, websocket"),
]


def median(values: list[float]) -> float:
    return statistics.median(values)


def p90(values: list[float]) -> float:
    """Nearest-rank 90th percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.1f}"


def _cell(values: list[float] | None) -> str:
    if not values:
        return "-"
    return f"{_ms(median(values))} / {_ms(p90(values))}"


def table(results: dict[str, dict[str, Any]], floor: dict[str, list[float]]) -> str:
    """Markdown table: one column per configuration (median / p90), then floor, reference, target."""
    names = list(results)
    header = [
        "metric (ms unless noted)",
        *[f"{name} median / p90" for name in names],
        "floor median",
        "reference",
        "target",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for key, label, reference, floor_key in LATENCY_ROWS:
        cells = [_cell(results[name]["latency"].get(key)) for name in names]
        floor_cell = _ms(median(floor[floor_key])) if floor_key else "-"
        ref = f"{REFERENCE[reference]:.0f}" if reference in REFERENCE else "-"
        target = f"<= {TARGET[reference]:.1f}" if reference else "-"
        lines.append("| " + " | ".join([label, *cells, floor_cell, ref, target]) + " |")
    bursts = []
    for name in names:
        rates = [b["runs_per_s"] for b in results[name].get("burst", [])]
        refused = sum(b.get("refused", 0) for b in results[name].get("burst", []))
        cell = f"{median(rates):.1f} / {min(rates):.1f} (min)" if rates else "-"
        bursts.append(cell + (f", {refused} submissions refused" if refused else ""))
    lines.append(
        "| "
        + " | ".join(
            [
                "(e) 50 runs at once -> all terminal, runs/s",
                *bursts,
                "-",
                f"{REFERENCE['e']:.0f}",
                f">= {TARGET['e']:.0f}",
            ]
        )
        + " |"
    )
    cells = []
    for name in names:
        per_run = [b["cpu_ms_per_run"] for b in results[name].get("burst", []) if "cpu_ms_per_run" in b]
        cells.append(
            " / ".join(f"{median([c[part] for c in per_run]):.0f}" for part in ("web", "worker", "engines"))
            if per_run
            else "-"
        )
    lines.append("| " + " | ".join(["(e) CPU ms per run: web / worker / engines", *cells, "-", "-", "-"]) + " |")
    for label, key in (
        ("idle CPU after start, web + worker, % of one core", "idle_cpu_percent"),
        ("idle CPU after the runs above, % of one core", "warm_idle_cpu_percent"),
    ):
        cpu = [f"{results[name][key]:.1f}" if key in results[name] else "-" for name in names]
        lines.append("| " + " | ".join([label, *cpu, "-", "-", "-"]) + " |")
    waiting = max((result.get("waiting_runs", 0) for result in results.values()), default=0)
    for label, phase in (
        ("(f) memory idle after start, MiB RSS (PSS)", "idle"),
        ("(f) memory idle after the runs above, MiB RSS (PSS)", "warm"),
        (f"(f) memory, {waiting:,} runs waiting, MiB RSS (PSS)", "waiting"),
    ):
        cells = []
        for name in names:
            memory = results[name].get("memory", {}).get(phase)
            cells.append(
                f"{memory['rss_mib']:.0f} ({memory['pss_mib']:.0f}), {memory['processes']} procs" if memory else "-"
            )
        ref = f"{REFERENCE['idle_mib']:.0f}" if phase == "idle" else "-"
        lines.append("| " + " | ".join([label, *cells, "-", ref, "-"]) + " |")
    return "\n".join(lines)


def breakdown(results: dict[str, dict[str, Any]]) -> str:
    names = list(results)
    header = ["segment (ms)", *[f"{name} median / p90" for name in names]]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for key, label in BREAKDOWN_ROWS:
        lines.append("| " + " | ".join([label, *[_cell(results[name]["latency"].get(key)) for name in names]]) + " |")
    return "\n".join(lines)


def sample_counts(results: dict[str, dict[str, Any]]) -> str:
    parts = []
    for name, result in results.items():
        counts = ", ".join(
            f"{key}={len(result['latency'][key])}" for key, _, _, _ in LATENCY_ROWS if key in result["latency"]
        )
        bursts = len(result.get("burst", []))
        parts.append(f"{name} samples: {counts}; {bursts} bursts")
    return "\n".join(parts)


SANDBOX_TARGET_MS = 15.0


def sandbox_cost(timings: dict[str, list[float]]) -> str:
    """What bubblewrap adds to a turn (SPEC §11): one engine turn, unconfined and sandboxed."""
    added = median(timings["bwrap"]) - median(timings["unconfined"])
    verdict = "within" if added * 1000 < SANDBOX_TARGET_MS else "OVER"
    return "\n".join(
        [
            "| agent sandbox, one bench-engine turn | median | p90 |",
            "|---|---|---|",
            f"| unconfined | {_ms(median(timings['unconfined']))} | {_ms(p90(timings['unconfined']))} |",
            f"| bwrap | {_ms(median(timings['bwrap']))} | {_ms(p90(timings['bwrap']))} |",
            f"| added by the sandbox | {_ms(added)} | - |",
            "",
            f"added median {added * 1000:.1f} ms: {verdict} the {SANDBOX_TARGET_MS:g} ms target "
            f"(n={len(timings['bwrap'])} per mode, interleaved)",
        ]
    )
