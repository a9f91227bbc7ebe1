"""A whole engine in one module, as engines/README.md describes: the registry test loads it.

Its CLI (`toy [--resume S] -p P`) is a script the test writes: it prints one JSON line
`{"session": S, "message": M}` per turn, M being the agent's final message.
"""

from __future__ import annotations

from engines.activity import NoActivity
from engines.base import EngineAdapter, EngineOutput, argv_prompt, json_lines
from engines.provider_api import OPENAI_CHAT
from engines.types import EngineConfig, TurnRequest


class ToyAdapter(EngineAdapter):
    name = "toy"
    skill_root = ".toy"
    provider_api = OPENAI_CHAT
    extra_control_names = (".toyrc",)

    def auto_flags(self, config: EngineConfig) -> list[str]:
        return ["--yes"]

    def command(self, request: TurnRequest, config: EngineConfig) -> list[str]:
        resume = ["--resume", str(request.session_handle)] if request.is_resume else []
        return [config.binary, *resume, *self.auto_flags(config), "-p", argv_prompt(request.prompt)]

    def engine_env(self, config: EngineConfig) -> dict[str, str]:
        return {"TOY_HOME": str(config.home)}

    def activity_parser(self) -> NoActivity:
        return NoActivity()

    def extract(self, stdout: str, stderr: str) -> EngineOutput:
        events = json_lines(stdout)
        last = events[-1] if events else {}
        return EngineOutput(final_message=str(last.get("message", "")), session_handle=last.get("session"))
