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


def cli_turns(results: dict[str, Any]) -> str:
    """One real turn per engine CLI (bench/clis.py), unconfined and in bubblewrap."""
    lines = [
        "| one real CLI turn, scripted model (s) | version | unconfined | bwrap | added by the sandbox |",
        "|---|---|---|---|---|",
    ]
    for engine, figures in results.items():
        if "error" in figures:
            lines.append(f"| {engine} | - | - | - | {figures['error']} |")
            continue
        unconfined, confined = median(figures["unconfined"]), median(figures["bwrap"])
        lines.append(
            f"| {engine} | {figures['version'] or '?'} | {unconfined:.2f} | {confined:.2f} | {confined - unconfined:+.2f} |"
        )
    samples = max((len(f.get("bwrap", [])) for f in results.values()), default=0)
    lines += ["", f"medians of {samples} turn(s) per mode: one shell call and the answer, modes interleaved"]
    return "\n".join(lines)


# --- `python -m bench`: the outside driver's figures ---------------------------------------------


def _stat(*path: str) -> Any:
    """A median (ms) from a round's result, by its path of keys."""

    def read(result: dict[str, Any]) -> float | None:
        node: Any = result
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        return node

    return read


# (label, value of one round, format, FastAPI reference at cap 1 / cap 16, floor, target).
# The reference: the FastAPI Skill Runner v0.7.9 measured with the shared driver on this machine
# kind (20 ms polling, 3 rounds, medians; the burst, its CPU, (d) and the memory after the burst
# as measured again for R-CR1/R-CR2); the targets are R-CR1/R-CR2's where they set one, else
# issue #16's, for both configurations.
OUTSIDE_ROWS: list[tuple[str, Any, str, str, tuple[str, str] | None, str]] = [
    (
        "POST /v1/jobs round trip (ms)",
        _stat("sequential", "stats", "post_latency", "median_ms"),
        "{:.1f}",
        "-",
        None,
        "-",
    ),
    (
        "(a) POST returned -> engine started (ms)",
        _stat("sequential", "stats", "a_post_returned_to_engine_start", "median_ms"),
        "{:.1f}",
        "66 / 69",
        ("spawn_to_start", "spawn -> script start"),
        "<= 13",
    ),
    (
        "(b) POST sent -> succeeded seen, 20 ms polling (ms)",
        _stat("sequential", "stats", "b_post_sent_to_succeeded_seen", "median_ms"),
        "{:.1f}",
        "217 / 225",
        ("subprocess_total", "subprocess.run total"),
        "<= 45",
    ),
    (
        "engine exit -> succeeded seen (ms)",
        _stat("sequential", "stats", "engine_exit_to_succeeded_seen", "median_ms"),
        "{:.1f}",
        "-",
        None,
        "-",
    ),
    (
        "engine runtime, start stamp -> exit stamp (ms)",
        _stat("sequential", "stats", "engine_runtime", "median_ms"),
        "{:.1f}",
        "-",
        None,
        "-",
    ),
    (
        "(c) asking engine exit -> waiting_user seen (ms)",
        _stat("interactive", "stats", "c_engine_exit_to_waiting_user_seen", "median_ms"),
        "{:.1f}",
        "131 / 136",
        None,
        "<= 26",
    ),
    (
        "(d) reply sent -> resumed engine started (ms)",
        _stat("interactive", "stats", "d_reply_sent_to_resumed_start", "median_ms"),
        "{:.1f}",
        "79 / 78",
        ("spawn_to_start", "spawn -> script start"),
        "<= 15",
    ),
    (
        "(d') reply returned -> resumed engine started (ms)",
        _stat("interactive", "stats", "d_reply_returned_to_resumed_start", "median_ms"),
        "{:.1f}",
        "-",
        None,
        "-",
    ),
    (
        "reply POST round trip (ms)",
        _stat("interactive", "stats", "reply_latency", "median_ms"),
        "{:.1f}",
        "-",
        None,
        "-",
    ),
    (
        "(e) 50-run burst, runs/s",
        _stat("burst", "runs_per_s"),
        "{:.1f}",
        "4.2 / 7.8",
        None,
        ">= 30 (25 scale-out) at cap 16",
    ),
    ("(e) 50-run burst, 1000 ms engine, runs/s", _stat("delay_burst", "runs_per_s"), "{:.1f}", "- / 5.9", None, "-"),
    ("(e) most engines at once in the burst", _stat("burst", "max_concurrent_engines"), "{:.0f}", "-", None, "-"),
    ("status GET (ms)", _stat("sequential", "get_latency", "status", "median_ms"), "{:.1f}", "4.2", None, "<= 3"),
    ("result GET (ms)", _stat("sequential", "get_latency", "result", "median_ms"), "{:.1f}", "-", None, "-"),
    (
        "server CPU per run, engine excluded, one at a time (ms)",
        _stat("sequential", "cpu", "ms_per_run"),
        "{:.0f}",
        "157",
        None,
        "<= 40",
    ),
    (
        "the fake engine's own CPU per run, not in the row above (ms)",
        _stat("sequential", "cpu", "engine_ms_per_run"),
        "{:.0f}",
        "-",
        None,
        "-",
    ),
    (
        "server CPU per run, engine excluded, burst (ms)",
        _stat("burst", "cpu", "ms_per_run"),
        "{:.0f}",
        "177 / 163",
        None,
        "<= 25 (35 scale-out) at cap 16",
    ),
    ("idle CPU, % of a core", _stat("idle", "cpu_percent"), "{:.2f}", "0.1", None, "<= 0.5"),
    (
        "idle PSS of the process tree (MiB)",
        _stat("idle", "memory", "pss_mib"),
        "{:.0f}",
        "78 (1 process)",
        None,
        "<= 110 at cap 1, <= 140 at cap 16",
    ),
    ("idle RSS of the process tree (MiB)", _stat("idle", "memory", "rss_mib"), "{:.0f}", "-", None, "-"),
    ("processes in the tree", _stat("idle", "memory", "processes"), "{:.0f}", "1", None, "-"),
    ("PSS after the burst (MiB)", _stat("memory_after_burst", "pss_mib"), "{:.0f}", "87", None, "<= 1.3 x idle"),
]


def _median_of(rounds: list[dict[str, Any]], read: Any) -> float | None:
    values = [value for value in (read(result) for result in rounds) if value is not None]
    return median(values) if values else None


def round_line(result: dict[str, Any]) -> str:
    """The headline figures of one round, for the progress output."""
    picks = [row for row in OUTSIDE_ROWS if row[3] not in ("-", "1")]  # the figures with a reference
    parts = [
        f"{label.split(' (')[0]} {fmt.format(read(result))}"
        for label, read, fmt, *_ in picks
        if read(result) is not None
    ]
    return ", ".join(parts) + f"; load {result['loadavg_before']} -> {result['loadavg_after']}"


def outside_table(results: dict[str, Any]) -> str:
    """Rows = figures; columns = reference, each configuration and cap (median across rounds), floor, target."""
    keys = list(results["runs"])
    header = ["figure (median)", "FastAPI ref cap 1 / 16", *keys, "floor", "target"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for label, read, fmt, reference, floor, target in OUTSIDE_ROWS:
        cells = []
        for key in keys:
            value = _median_of(results["runs"][key], read)
            cells.append("-" if value is None else fmt.format(value))
        floor_cell = "-"
        if floor:
            floor_cell = f"{results['floor'][floor[0]]['median_ms']:.1f} ({floor[1]})"
        lines.append("| " + " | ".join([label, reference, *cells, floor_cell, target]) + " |")
    loads = [f"{key}: {', '.join(r['loadavg_before'].split()[0] for r in results['runs'][key])}" for key in keys]
    lines.append("")
    lines.append("1-minute load average at the start of each round: " + "; ".join(loads))
    return "\n".join(lines)


def waiting_table(waiting: dict[str, dict[str, Any]]) -> str:
    """At the default cap: idle, and with runs parked in waiting_user."""
    if not waiting:
        return "(no waiting-runs figure: --waiting 0)"
    names = list(waiting)
    lines = ["| at cap 4 | " + " | ".join(names) + " | target |", "|---|" + "---|" * (len(names) + 1)]
    rows = [
        (
            "idle PSS (RSS) of the tree, MiB",
            lambda w: (
                f"{w['idle']['memory']['pss_mib']:.0f} ({w['idle']['memory']['rss_mib']:.0f}), {w['idle']['memory']['processes']} processes"
            ),
            "PSS <= 160",
        ),
        ("idle CPU, % of a core", lambda w: f"{w['idle']['cpu_percent']:.2f}", "<= 0.5"),
        (
            lambda: f"{next(iter(waiting.values()))['runs']:,} runs in waiting_user: PSS (RSS), MiB",
            lambda w: f"{w['memory']['pss_mib']:.0f} ({w['memory']['rss_mib']:.0f})",
            "-",
        ),
        ("... engine processes alive / slots held", lambda w: f"{w['engines_alive']} / {w['slots_held']}", "0 / 0"),
        ("... parking rate, runs/s", lambda w: f"{w['parked']['runs_per_s']:.1f}", "-"),
    ]
    for label, cell, target in rows:
        text = label() if callable(label) else label
        lines.append("| " + " | ".join([text, *[cell(waiting[name]) for name in names], target]) + " |")
    loads = "; ".join(f"{name}: {waiting[name]['loadavg_before']}" for name in names)
    return "\n".join([*lines, "", f"load average before: {loads}"])


# --- `python -m bench.crowd`: live connections on one web process (R-SC2) -------------------------

CROWD_GOAL_P99_MS = 250.0


def _rate(value: float, seconds: float) -> str:
    return f"{value / seconds:.1f}"


def _idle_db(idle: dict[str, Any]) -> str:
    """The database's work in one idle window, per second."""
    seconds = idle["seconds"]
    if "postgres" in idle:
        counters = idle["postgres"]
        return (
            f"{_rate(counters['xact_commit'] + counters['xact_rollback'], seconds)} xact, "
            f"{_rate(counters['tup_returned'], seconds)} rows returned, {_rate(counters['tup_fetched'], seconds)} fetched"
        )
    if "sqlite_syscalls" in idle:
        return f"{_rate(sum(idle['sqlite_syscalls'].values()), seconds)} syscalls on the db files"
    return "-"


def _fan_out(figures: dict[str, Any]) -> str:
    if not figures.get("n"):
        return "-"
    return f"{figures['p50_ms']:.0f} / {figures['p99_ms']:.0f} / {figures['max_ms']:.0f}"


def crowd_table(results: dict[str, dict[str, Any]]) -> str:
    """Rows = figures; columns = setups (embedded, scaleout with one and two web processes)."""
    names = list(results)
    rows: list[tuple[str, Any]] = [
        (
            "connections: run sockets / inbox sockets / event streams / upstream streams",
            lambda r: " / ".join(
                str(r["connections"].get(kind, 0)) for kind in ("socket", "inbox", "stream", "upstream")
            ),
        ),
        ("web processes; runs followed", lambda r: f"{r['webs']}; {r['runs']}"),
        (
            "idle, database work per second: 1 connection per web -> all",
            lambda r: f"{_idle_db(r['idle_one'])} -> {_idle_db(r['idle_all'])}",
        ),
        (
            "idle, web CPU % of a core (each web): 1 -> all",
            lambda r: " -> ".join(
                ", ".join(f"{cpu:.1f}" for cpu in r[key]["web_cpu_percent"]) for key in ("idle_one", "idle_all")
            ),
        ),
        (
            f"fan-out, event created_at -> received, p50 / p99 / max ms (goal p99 <= {CROWD_GOAL_P99_MS:.0f})",
            lambda r: _fan_out(r["fan_out"]["from_created_at"]),
        ),
        (
            "... receipts (missing); connections the service closed meanwhile",
            lambda r: f"{r['fan_out']['from_created_at'].get('n', 0)} ({r['fan_out']['missing']}); {r['closed_early']}",
        ),
        (
            "fan-out, bench's FIFO write -> received, p50 / p99 / max ms",
            lambda r: _fan_out(r["fan_out"]["from_fifo_write"]),
        ),
        (
            "memory per idle connection, KiB RSS (PSS)",
            lambda r: f"{r['kib_per_connection']['rss_kib']:.0f} ({r['kib_per_connection']['pss_kib']:.0f})",
        ),
        (
            "web RSS MiB: none / 1 / all (each web)",
            lambda r: " / ".join(
                ", ".join(f"{web['rss_kib'] / 1024:.0f}" for web in r["memory"][key]) for key in ("none", "one", "all")
            ),
        ),
        ("web threads with all connections", lambda r: ", ".join(str(n) for n in r["idle_all"]["web_threads"])),
        ("opening them, s", lambda r: f"{r['open_seconds']:.1f}"),
        ("load average before -> after", lambda r: f"{r['loadavg_before']} -> {r['loadavg_after']}"),
    ]
    lines = ["| | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for label, cell in rows:
        lines.append("| " + " | ".join([label, *[cell(results[name]) for name in names]]) + " |")
    return "\n".join(lines)
