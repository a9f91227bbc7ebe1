"""What Gemini CLI and its fork Qwen Code share: the command line and the settings file.

Both run one turn as ``B [--resume S] --yolo --output-format stream-json [-m M] -p P`` (the
resumed session is found by id among the current directory's sessions), and both read a
user-level ``settings.json`` whose ``model.name`` names the model. Their output, environment and
defaults differ: each adapter subclasses ``GeminiFamilyAdapter`` for those.
"""

from __future__ import annotations

from typing import Any

from .base import EngineAdapter, argv_prompt
from .types import EngineConfig, TurnRequest


class GeminiFamilyAdapter(EngineAdapter):
    """Abstract: the command line and settings.json handling of Gemini CLI and its forks."""

    def auto_flags(self, config: EngineConfig) -> list[str]:
        return ["--yolo"]

    def command(self, request: TurnRequest, config: EngineConfig) -> list[str]:
        argv = [config.binary]
        if request.is_resume:
            argv += ["--resume", str(request.session_handle)]
        argv += [*self.auto_flags(config), "--output-format", "stream-json", *self.model_args(request, config)]
        return argv + ["-p", self.prompt_argument(request.prompt)]

    def prompt_argument(self, prompt: str) -> str:
        """The prompt as the ``-p`` value: one the option parser cannot take for a flag."""
        return argv_prompt(prompt)

    def skill_model(self, settings: dict[str, Any]) -> str | None:
        model = settings.get("model")
        name = model.get("name") if isinstance(model, dict) else model
        return name if isinstance(name, str) and name else None
