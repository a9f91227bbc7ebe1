"""What OpenCode and its fork Kilo share: ``<cli> run --format json``, resumable by session id.

Both are the same program under two names (Kilo keeps OpenCode's code and renames its variables
``OPENCODE_*`` to ``KILO_*`` and its folders ``opencode`` to ``kilo``), so everything but those
names, the default agent and a few Kilo-only services lives here:

* The prompt goes in on stdin: ``run`` wraps every argument holding a space in literal double
  quotes (``run "a b"`` sends ``"a b"`` to the model) and escapes the quotes inside.
* The endpoint is one OpenAI-compatible provider (Chat Completions) the adapter writes into the
  CLI's global config, with the key read from the environment (``{env:…}``), never from disk.
* Project config is off: no ``opencode.json``, ``.opencode/`` or AGENTS.md of the run directory
  configures the CLI; the run-local skill copy is found through the config's ``skills.paths``.
* The JSON stream reports a tool only once it has finished, so a small plugin in the engine home
  prints a ``skillrunner_tool_start`` line when one starts (R-AC1).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

from .activity import Activity, ActivityParser, tokens, tool_summary, usage_report
from .base import (
    EngineAdapter,
    EngineOutput,
    json_lines,
    missing_event,
    without_links,
    write_if_changed,
    write_json_settings,
)
from .provider_api import OPENAI_CHAT
from .types import EngineConfig, TurnRequest

PROVIDER_ID = "skillrunner"  # the provider entry in the CLI's config: `-m skillrunner/<model>`
PROVIDER_KEY_VAR = "SKILLRUNNER_PROVIDER_API_KEY"
TOOL_START = "skillrunner_tool_start"

# Loaded from the engine home's config folder: one JSON line on stdout as each tool starts
# (the CLI itself prints a tool when it has finished).
ACTIVITY_PLUGIN = """\
// Written by Skill Runner: reports each tool call as it starts, for the run's live activity.
export const SkillRunnerActivity = async () => ({
  "tool.execute.before": async (input, output) => {
    const part = { callID: input.callID, tool: input.tool, input: output.args };
    process.stdout.write(JSON.stringify({ type: "TOOL_START", sessionID: input.sessionID, part }) + "\\n");
  },
});
""".replace("TOOL_START", TOOL_START)

# Tools whose input names the file they write (reported as file changes too).
_FILE_TOOLS = ("write", "edit", "multiedit", "patch", "apply_patch")
# The argument that says what a tool call does, by the CLIs' tool parameter names.
TOOL_SUMMARY_KEYS = ("command", "filePath", "pattern", "url", "query", "name", "description")


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _usage(steps: list[dict[str, Any]]) -> dict[str, Any]:
    """One turn's usage from its step_finish parts. The CLI counts input apart from cache reads
    and writes, and output apart from reasoning: the report counts them as the provider billed
    them. It prices a model by the config, which names no prices, so a cost of 0 means unknown."""
    input_tokens = cached = output = reasoning = 0
    cost = 0.0
    for step in steps:
        counts = _dict(step.get("tokens"))
        cache = _dict(counts.get("cache"))
        read, written = tokens(cache.get("read")) or 0, tokens(cache.get("write")) or 0
        thought = tokens(counts.get("reasoning")) or 0
        cached += read
        input_tokens += (tokens(counts.get("input")) or 0) + read + written
        reasoning += thought
        output += (tokens(counts.get("output")) or 0) + thought
        step_cost = step.get("cost")
        if isinstance(step_cost, int | float) and not isinstance(step_cost, bool):
            cost += step_cost
    return usage_report(input_tokens, cached, output, reasoning, cost if cost > 0 else None)


class OpenCodeActivity(ActivityParser):
    """``run --format json``: text and reasoning parts, tools (started by the plugin's line,
    finished by ``tool_use``), todo lists as plans, written files."""

    def __init__(self) -> None:
        super().__init__()
        self._session: str | None = None  # the turn's own session: subagents' tools are not shown

    def on_event(self, event: dict[str, Any]) -> list[Activity]:
        kind = event.get("type")
        session = event.get("sessionID")
        if self._session is None and isinstance(session, str):
            self._session = session
        part = _dict(event.get("part"))
        if kind == TOOL_START:
            tool = str(part.get("tool") or "")
            if session != self._session or tool == "todowrite":
                return []
            return self.tool_started(
                str(part.get("callID") or ""), tool, tool_summary(part.get("input"), TOOL_SUMMARY_KEYS)
            )
        if kind == "text":
            return self.message_text(str(part.get("text") or ""))
        if kind == "reasoning":
            return self.reasoning(str(part.get("text") or ""))
        if kind == "tool_use":
            return self._tool_used(part)
        if kind == "error" or (kind == "step_finish" and part.get("reason") != "tool-calls"):
            self.drop_held_text()
        return []

    def _tool_used(self, part: dict[str, Any]) -> list[Activity]:
        tool = str(part.get("tool") or "")
        state = _dict(part.get("state"))
        tool_input = _dict(state.get("input"))
        ok = state.get("status") == "completed"
        if tool == "todowrite":
            return self.todo_plan(tool_input.get("todos")) if ok else []
        exit_code = _dict(state.get("metadata")).get("exit")
        exit_code = exit_code if isinstance(exit_code, int) else None
        times = _dict(state.get("time"))
        start, end = times.get("start"), times.get("end")
        duration = end - start if isinstance(start, int) and isinstance(end, int) else None
        output = state.get("output") if ok else state.get("error")
        items = self.tool_finished(
            str(part.get("callID") or ""),
            ok=ok and exit_code in (0, None),
            output=output if isinstance(output, str) else "",
            exit_code=exit_code,
            duration_ms=duration,
            name=tool,
            command=tool_summary(tool_input, TOOL_SUMMARY_KEYS),
        )
        path = tool_input.get("filePath")
        if ok and tool in _FILE_TOOLS and isinstance(path, str):
            items.append({"type": "file_change", "paths": [path]})
        return items


class OpenCodeFamilyAdapter(EngineAdapter):
    """Abstract: OpenCode's command line, config, output and activity; each CLI adds its names
    (``env_prefix``, ``app_name``, ``plugin_package``, ``primary_agent``) and its ``engine_env``."""

    env_prefix: ClassVar[str]  # of the CLI's own variables: OPENCODE, KILO
    app_name: ClassVar[str]  # its folder under the XDG folders and its config file's name
    plugin_package: ClassVar[str]  # the package it installs into each config folder it can write
    primary_agent: ClassVar[str]  # the agent `run` uses, which carries the reasoning effort
    known_models = ("gpt-5.5",)
    provider_id = "openai"  # any OpenAI-compatible endpoint; OpenAI's own by default
    efforts = ("minimal", "low", "medium", "high")
    default_provider_url = "https://api.openai.com/v1"
    provider_api = OPENAI_CHAT

    def auto_flags(self, config: EngineConfig) -> list[str]:
        return ["--auto"]  # approves every permission the config does not deny

    def turn_model(self, request: TurnRequest, config: EngineConfig) -> str:
        """The run's model, else the skill's, else the operator's, else the first one listed."""
        return request.model or self.default_model(config) or self.known_models[0]

    def model_args(self, request: TurnRequest, config: EngineConfig) -> list[str]:
        return [self.model_flag, f"{PROVIDER_ID}/{self.turn_model(request, config)}"]

    def command(self, request: TurnRequest, config: EngineConfig) -> list[str]:
        argv = [config.binary, "run", "--format", "json", *self.auto_flags(config), "--thinking"]
        if request.is_resume:
            argv += ["--session", str(request.session_handle)]
        else:  # a title of its own spares the CLI a model call that writes one
            argv += ["--title", request.skill.skill_id]
        return argv + self.model_args(request, config)

    def stdin_prompt(self, request: TurnRequest) -> str:
        return request.prompt

    def effort_settings(self, effort: str) -> dict[str, Any]:
        # An agent's unknown keys are passed to the provider as options (Chat Completions'
        # reasoning_effort).
        return {"agent": {self.primary_agent: {"reasoningEffort": effort}}}

    # ---- the engine home ---------------------------------------------------------------------

    def xdg_dirs(self, config: EngineConfig) -> dict[str, Path]:
        home = Path(config.home)
        return {
            "XDG_CONFIG_HOME": home / "config",
            "XDG_DATA_HOME": home / "data",  # sessions: <app>/<app>.db (SQLite)
            "XDG_CACHE_HOME": home / "cache",
            "XDG_STATE_HOME": home / "state",
        }

    def config_dir(self, config: EngineConfig) -> Path:
        return self.xdg_dirs(config)["XDG_CONFIG_HOME"] / self.app_name

    def shared_env(self, config: EngineConfig) -> dict[str, str]:
        """The variables both CLIs read under their own prefix: their folders in the home, nothing
        fetched or loaded from elsewhere, the key for the config's ``{env:…}``."""
        env = {name: str(path) for name, path in self.xdg_dirs(config).items()}
        for switch in (
            "DISABLE_PROJECT_CONFIG",  # the run directory configures nothing
            "DISABLE_EXTERNAL_SKILLS",  # no .claude/.agents skills from the home or the run directory
            "DISABLE_CLAUDE_CODE",  # no CLAUDE.md
            "DISABLE_AUTOUPDATE",
            "DISABLE_MODELS_FETCH",  # the models.dev catalogue
            "DISABLE_LSP_DOWNLOAD",
            "DISABLE_DEFAULT_PLUGINS",
            "DISABLE_SHARE",
        ):
            env[f"{self.env_prefix}_{switch}"] = "1"
        if config.api_key:
            env[PROVIDER_KEY_VAR] = config.api_key
        return env

    def prepare_home(self, config: EngineConfig) -> None:
        super().prepare_home(config)
        root, folder = Path(config.home), self.config_dir(config)
        write_if_changed(folder / "plugins" / "skillrunner-activity.js", ACTIVITY_PLUGIN, root)
        # The CLI installs its plugin package (from the npm registry) into every config folder it
        # can write, unless node_modules exists and a lock file names the package: both say so.
        without_links(root, folder / "node_modules").mkdir(parents=True, exist_ok=True)
        lock = {"lockfileVersion": 3, "packages": {"": {"dependencies": {self.plugin_package: "*"}}}}
        write_if_changed(folder / "package-lock.json", json.dumps(lock) + "\n", root)

    def prepare_turn(self, request: TurnRequest, config: EngineConfig) -> list[str]:
        argv = super().prepare_turn(request, config)
        self.write_config(request, config)
        return argv

    def write_config(self, request: TurnRequest, config: EngineConfig) -> None:
        """The CLI's global config: the skill's defaults beneath the operator's (R-SK9)."""
        model = self.turn_model(request, config)
        skills = self.skill_dir(Path(request.run_dir), request.skill.skill_id).parent
        operator: dict[str, Any] = {
            "provider": {
                PROVIDER_ID: {
                    "npm": "@ai-sdk/openai-compatible",  # bundled in the CLI: nothing installed
                    "name": "Skill Runner",
                    "options": {
                        "baseURL": config.base_url or self.default_provider_url,
                        "apiKey": "{env:" + PROVIDER_KEY_VAR + "}",
                    },
                    "models": {model: {"name": model, "tool_call": True}},
                }
            },
            "enabled_providers": [PROVIDER_ID],  # no other provider's catalogue is fetched
            "model": f"{PROVIDER_ID}/{model}",
            "small_model": f"{PROVIDER_ID}/{model}",
            "skills": {"paths": [str(skills)], "urls": []},
            "plugin": [],  # npm packages a skill could name; the activity plugin is a local file
            "instructions": [],
            "autoupdate": False,
            "share": "disabled",
        }
        write_json_settings(self.config_dir(config) / f"{self.app_name}.json", operator, config)

    # ---- output ------------------------------------------------------------------------------

    def activity_parser(self) -> OpenCodeActivity:
        return OpenCodeActivity()

    def extract(self, stdout: str, stderr: str) -> EngineOutput:
        output = EngineOutput()
        texts: list[str] = []  # the text since the latest tool: the final answer
        steps: list[dict[str, Any]] = []
        for event in json_lines(stdout):
            kind = event.get("type")
            if kind == TOOL_START:
                continue  # the plugin's line: possibly a subagent's session
            if output.session_handle is None and isinstance(event.get("sessionID"), str):
                output.session_handle = event["sessionID"]
            if kind == "text":
                texts.append(str(_dict(event.get("part")).get("text") or ""))
            elif kind == "tool_use":
                texts = []
            elif kind == "step_finish":
                steps.append(_dict(event.get("part")))
            elif kind == "error":
                error = _dict(event.get("error"))
                output.error = str(_dict(error.get("data")).get("message") or error.get("name") or "error")
        output.final_message = "\n".join(text for text in texts if text)
        if steps:
            output.usage = _usage(steps)
        elif output.error is None:
            output.error = missing_event(self.name, "step_finish", stderr)
        return output
