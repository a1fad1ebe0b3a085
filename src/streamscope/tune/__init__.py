"""The auto-tuner: a capacity model proposes, paired in-run checks verify (see README.md).

:class:`Tuner` runs in a rank's main process and moves a :class:`Target` (a loader, adapted by ``api``): the live
knobs of its board and its number of workers between epochs, within :class:`Budgets`.
"""

from __future__ import annotations

from streamscope.tune.budgets import Budgets, resolve
from streamscope.tune.controller import Controller
from streamscope.tune.decision import Decision
from streamscope.tune.model import Estimates, Model, Plan
from streamscope.tune.paired import Noise, Paired
from streamscope.tune.policy import WORKERS, Move, Policy, Resources
from streamscope.tune.runner import Sensors, Tuner
from streamscope.tune.signals import Reading, Window, cpu_pressure, read_view, window
from streamscope.tune.target import Target, TargetInfo

__all__ = [
    "WORKERS",
    "Budgets",
    "Controller",
    "Decision",
    "Estimates",
    "Model",
    "Move",
    "Noise",
    "Paired",
    "Plan",
    "Policy",
    "Reading",
    "Resources",
    "Sensors",
    "Target",
    "TargetInfo",
    "Tuner",
    "Window",
    "cpu_pressure",
    "read_view",
    "resolve",
    "window",
]
