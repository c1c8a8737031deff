"""The scripted many-agents demo behind ``computer demo`` (see README, "The demo")."""

from __future__ import annotations

from ._agent import AgentState, ChatModel, run_agent
from ._openai_model import ModelError, OpenAIChatModel
from ._projects import TEMPLATES, Project, project_by_label, project_for
from ._prompt import REPORT_PATH, task_messages
from ._run import DemoError, DemoSummary, PersistenceCheck, print_summary, run_demo
from ._scripted_model import ScriptedModel, scripted_reply

__all__ = [
    "REPORT_PATH",
    "TEMPLATES",
    "AgentState",
    "ChatModel",
    "DemoError",
    "DemoSummary",
    "ModelError",
    "OpenAIChatModel",
    "PersistenceCheck",
    "Project",
    "ScriptedModel",
    "print_summary",
    "project_by_label",
    "project_for",
    "run_agent",
    "run_demo",
    "scripted_reply",
    "task_messages",
]
