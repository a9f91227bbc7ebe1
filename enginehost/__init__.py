"""The engines as this host runs them: the Django side of `engines/` (R-EN4, R-EN5, R-EN8,
R-SK7, R-SK8, R-SK9). It turns the operator's settings and a skill's package into the engine
layer's own terms (`EngineConfig`, prompt templates, dependency environments) and says which
engines can run here. No models; it knows nothing of runs, which call it.

| module | role |
|---|---|
| `config.py` | each engine's `EngineConfig` from the settings (binary, home, key, base URL, sandbox); the secrets to redact; the sandbox's state for the readiness probe and the engine list |
| `api.py`, `urls.py` | the engine catalogue: `GET /v1/engines`, `GET /v1/engines/<engine>/models` |
| `choice.py` | which engines a run can use here, and why not, for the new-run form |
| `skill_runtime.py` | what a skill package adds to its runs: its engine defaults (read once, at creation), its prompt template, its dependency environment |
| `dependencies.py` | the Python environments of a skill's `runtime.dependencies`, built with uv outside the sandbox, one per distinct list, then reused |
"""
