"""What every cheat is built from: the honest softmax wrapper, and the Cheat record."""
from __future__ import annotations

from dataclasses import dataclass

from snippets.kernel_agent.candidates.softmax import HEADER, ROWS_KERNEL

BASE = HEADER + "import os\nimport sys\nimport time\n" + ROWS_KERNEL  # softmax_rows and launch(x, out), both honest
TOKENS = ("__CANARY__", "__HARNESS_PID__", "__PORT__", "__MARKER__", "__ROOT__")


@dataclass(frozen=True)
class Cheat:
    name: str
    cls: str  # the class of exploit
    reasons: tuple  # the verdict's reason must contain one of these
    models: str  # the public exploit, or the attack it stands for
    source: str
    task: str = "softmax"

    def render(self, **context) -> str:
        """The source with the attack's targets filled in (a canary path, the harness's pid, a port, ...)."""
        src = self.source
        for token in TOKENS:
            src = src.replace(token, str(context.get(token.strip("_").lower(), "")))
        return src
