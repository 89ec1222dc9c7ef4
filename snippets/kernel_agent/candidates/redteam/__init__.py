"""The red team: cheats in eleven classes, each with the verdict the evaluator must reach."""
from snippets.kernel_agent.candidates.redteam.common import Cheat
from snippets.kernel_agent.candidates.redteam.escape import ESCAPE
from snippets.kernel_agent.candidates.redteam.forgery import FORGERY
from snippets.kernel_agent.candidates.redteam.inputs import INPUTS
from snippets.kernel_agent.candidates.redteam.resources import RESOURCES
from snippets.kernel_agent.candidates.redteam.work import WORK

CHEATS = ESCAPE + FORGERY + INPUTS + WORK + RESOURCES

__all__ = ["CHEATS", "Cheat"]
