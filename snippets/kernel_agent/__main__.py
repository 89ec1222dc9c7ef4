"""python -m snippets.kernel_agent evaluate --task TASK --candidate FILE [--json]: judge one candidate file.

Also `tasks` (the tasks and their signatures) and `show --task TASK` (the task's honest reference candidate).
Exit status: 0 accepted, 1 not accepted, 2 the command could not run (unknown task, unreadable file, no sandbox,
or a fault of the harness itself: the verdict 'error', "could not evaluate").
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from snippets.kernel_agent.candidates import REFERENCE
from snippets.kernel_agent.harness import DEVICE, Settings, evaluate
from snippets.kernel_agent.sandbox import IsolationUnavailable
from snippets.kernel_agent.spec import describe
from snippets.kernel_agent.tasks import TASKS

MAX_SOURCE = 1 << 20


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m snippets.kernel_agent", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    ev = sub.add_parser("evaluate", help="judge one candidate file")
    ev.add_argument("--task", required=True)
    ev.add_argument("--candidate", required=True, type=Path, help="Python source defining kernel(..., out)")
    ev.add_argument("--json", action="store_true", help="print the report as JSON")
    ev.add_argument("--seed", type=int, help="reproduce an evaluation (default: a secret, new seed)")
    ev.add_argument("--trusted", action="store_true", help="run without the OS sandbox: only for code you wrote")
    show = sub.add_parser("show", help="print a task's honest reference candidate")
    show.add_argument("--task", required=True)
    sub.add_parser("tasks", help="list the tasks")
    args = parser.parse_args(argv)
    mode = Settings.for_device().mode
    if args.command == "tasks":
        for task in TASKS.values():
            print(f"level {task.level}  {describe(task, mode)}")
        return 0
    if args.task not in TASKS:
        return _fail(f"unknown task {args.task!r}; tasks: {', '.join(TASKS)}")
    if args.command == "show":
        print(REFERENCE[args.task], end="")
        return 0
    try:
        if args.candidate.stat().st_size > MAX_SOURCE:
            return _fail(f"{args.candidate}: larger than {MAX_SOURCE} bytes")
        source = args.candidate.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        return _fail(f"{args.candidate}: cannot read it ({e})")
    try:
        report = evaluate(TASKS[args.task], source, name=args.candidate.name,
                          settings=Settings.for_device(trusted=args.trusted), seed=args.seed)
    except IsolationUnavailable as e:
        return _fail(str(e))
    if args.json:
        print(json.dumps({**dataclasses.asdict(report), "device": DEVICE}, indent=1, default=str))
    else:
        print(report.summary())
    return 0 if report.correct else 2 if report.verdict == "error" else 1


if __name__ == "__main__":
    sys.exit(main())
