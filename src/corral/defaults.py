"""corral's local tunables and fixed vocabularies, with their defaults.

The cluster settings (stored in the cluster itself, so every process agrees) are
declared once, with their defaults, as the fields of ``corral.model.Settings``; the
role keywords and model strengths they start from are here.
"""

from __future__ import annotations

from typing import Literal, get_args

from corral.types import (
    HealthStatus,
    NodeStatus,
    Priority,
    ProcessAction,
    ProcessState,
    Strength,
    TaskStatus,
)

__all__ = [
    "ALERT_STATE_INTERVAL",
    "BUSY_TIMEOUT_SECONDS",
    "DEFAULT_DIR",
    "DEFAULT_ROLE_KEYWORDS",
    "DEFAULT_SQLITE_FILE",
    "HEALTH_STATUSES",
    "MANAGER_ROLE",
    "MAX_BATCH_IDS",
    "MAX_CLAIM_WAIT",
    "MAX_DEPENDENCIES",
    "MAX_DESCRIPTION",
    "MAX_ID_LENGTH",
    "MAX_PAYLOAD_BYTES",
    "MAX_PROCESSES",
    "MAX_TASK_AGE",
    "MAX_TIMESTAMP",
    "MAX_TITLE",
    "MODEL_STRENGTHS",
    "MONITOR_MAX_SLEEP",
    "NODE_STATUSES",
    "PRIORITIES",
    "PROCESS_ACTIONS",
    "PROCESS_STATES",
    "PROGRESS_REPORT_EVERY",
    "RETRY_BACKOFF_CAP",
    "RUNNER_ROLE",
    "SQLITE_CHECKPOINT_EVERY",
    "SQLITE_WAIT_RECHECK",
    "SQLITE_WAL_LIMIT_PAGES",
    "SQLITE_WAL_RESTART_PAGES",
    "STRENGTHS",
    "STUCK_ACTIONS",
    "TASK_STATUSES",
    "USAGE_ROLL_UP_EVERY",
    "StuckAction",
]

MANAGER_ROLE = "bootstrap_manager"
RUNNER_ROLE = "runner"  # the activation scheduler's runners (corral.scheduler)

# The value sets are the Literals of corral.types (one declaration each).
NODE_STATUSES: tuple[str, ...] = get_args(NodeStatus)
TASK_STATUSES: tuple[str, ...] = get_args(TaskStatus)
PRIORITIES: tuple[str, ...] = get_args(Priority)
STRENGTHS: tuple[str, ...] = get_args(Strength)
HEALTH_STATUSES: tuple[str, ...] = get_args(HealthStatus)
PROCESS_STATES: tuple[str, ...] = get_args(ProcessState)
# What happens to a stuck task (the ``stuck_action`` setting): flagged only, taken back
# and put back to pending with a new epoch, or failed.
StuckAction = Literal["flag", "requeue", "fail"]
STUCK_ACTIONS: tuple[str, ...] = get_args(StuckAction)
# ``corral worker`` reports its child's output lines as progress at most this often
# (seconds): a line sooner after the last report is not sent.
PROGRESS_REPORT_EVERY = 1.0
PROCESS_ACTIONS: tuple[str, ...] = get_args(ProcessAction)
MAX_PROCESSES = 10_000  # the most processes one host reports

DEFAULT_ROLE_KEYWORDS: dict[str, list[str]] = {
    "architect": ["design", "architect", "plan"],
    "developer": ["implement", "code", "test"],
}

# Substrings of a model name -> strength, first match wins (so "claude-sonnet-4-5"
# is high and "claude-haiku" medium); no match is medium.
MODEL_STRENGTHS: list[list[str]] = [
    ["opus", "high"],
    ["sonnet", "high"],
    ["gpt-5", "high"],
    ["o3", "high"],
    ["gemini-2.5-pro", "high"],
    ["haiku", "medium"],
    ["mini", "medium"],
    ["flash", "medium"],
    ["nano", "low"],
]

# Sizes accepted at the edge.
MAX_ID_LENGTH = 64
MAX_TITLE = 500
MAX_DESCRIPTION = 20_000
MAX_PAYLOAD_BYTES = 64 * 1024
MAX_BATCH_IDS = 1000  # the task ids a bulk action's answer lists (its count is whole)
MAX_TASK_AGE = 1e9  # seconds: the largest minimum age a bulk action's filter takes

# Local defaults (not cluster settings).
DEFAULT_DIR = ".corral"
DEFAULT_SQLITE_FILE = "corral.db"
BUSY_TIMEOUT_SECONDS = 30.0
MONITOR_MAX_SLEEP = 0.5
# How often the monitor adds the usage reports kept on completed tasks (SQLite) to
# their hours (``Store.roll_up_usage``): the reads count the rest, so this bounds
# how many each read goes through, not what it sees.
USAGE_ROLL_UP_EVERY = 1.0
ALERT_STATE_INTERVAL = 5.0  # the leading alerter re-reads processes and idle runs this often
MAX_CLAIM_WAIT = 3600.0  # longest ``claim_best_task(wait=…)``, seconds
# The longest wait before a failed attempt is claimable again (``retry_backoff``'s
# doubling stops here), seconds; a task's own retry_backoff above it is used as given.
RETRY_BACKOFF_CAP = 3600.0
# The most dependencies one task names (``add_task``'s ``depends_on``).
MAX_DEPENDENCIES = 1000
# The latest ``not_before`` a task takes: a time (seconds since the epoch) in year 5138.
MAX_TIMESTAMP = 1e11
SQLITE_WAIT_RECHECK = 1.0  # a waiting claim on SQLite re-checks for other processes' tasks
SQLITE_CHECKPOINT_EVERY = 200  # commits between background WAL checkpoints (per process)
SQLITE_WAL_LIMIT_PAGES = 10_000  # the commit that fills the WAL this far checkpoints itself
SQLITE_WAL_RESTART_PAGES = 1_000  # a background checkpoint past this restarts the WAL
