"""The workflows keep pull-request code off the GPU runner and deploy only what was tested (MAINTAINERS.md).

Each check below is a function from workflow texts to a list of problems. It runs on the real
.github/workflows/*.yml, and on a small good set of workflows (GOOD) with one targeted breakage each,
so that every check is shown to fail when its property is broken.

YAML 1.1 reads the key `on` as the boolean True: `triggers()` looks under both.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW_DIR = ROOT / ".github" / "workflows"
DEPENDABOT = ROOT / ".github" / "dependabot.yml"

PR_EVENTS = {"pull_request", "pull_request_target"}
# Events whose runs a pull request's code can reach: workflow_run runs after a (possibly pull-request) run.
PR_REACHABLE_EVENTS = PR_EVENTS | {"workflow_run"}
GPU_EVENTS = {"push", "workflow_dispatch"}
HOSTED = re.compile(r"^(ubuntu|windows|macos)-[0-9a-z.-]+$")  # GitHub-hosted labels; anything else is not
PINNED = re.compile(r"^[\w.-]+/[\w.-]+(/[\w./-]+)?@[0-9a-f]{40}$")
VERSION_COMMENT = re.compile(r"#\s*v\d+(\.\d+)*\b")
GPU_STEPS = ["make gpu-run", "pytest -m gpu", "pytest tests/test_results.py tests/test_labs.py"]


# Reading workflows.

def real_workflows() -> dict[str, str]:
    return {p.name: p.read_text(encoding="utf-8") for p in sorted(WORKFLOW_DIR.glob("*.y*ml"))}


def parse(texts: dict[str, str]) -> dict[str, dict]:
    return {name: yaml.safe_load(text) for name, text in texts.items()}


def triggers(wf: dict) -> dict:
    """The `on:` block as {event: config}; YAML 1.1 parses the key `on` as True."""
    on = wf.get("on", wf.get(True))
    if isinstance(on, str):
        return {on: None}
    if isinstance(on, list):
        return {e: None for e in on}
    return dict(on or {})


def jobs(wf: dict) -> dict[str, dict]:
    return dict(wf.get("jobs") or {})


def steps(job: dict) -> list[dict]:
    return list(job.get("steps") or [])


def runs(job: dict) -> list[str]:
    return [s["run"] for s in steps(job) if "run" in s]


def action(step: dict) -> str:
    """'actions/checkout' for 'actions/checkout@<sha>'."""
    return str(step.get("uses", "")).split("@")[0]


def is_hosted(runs_on) -> bool:
    """True only for a GitHub-hosted label (ubuntu-24.04, ...): self-hosted, groups, expressions, custom labels
    and a missing runs-on all count as not hosted."""
    if isinstance(runs_on, list) and len(runs_on) == 1:
        runs_on = runs_on[0]
    return isinstance(runs_on, str) and bool(HOSTED.match(runs_on))


def local_callee(job: dict) -> str | None:
    """The file name of a local reusable workflow a job calls (`uses: ./.github/workflows/x.yml`)."""
    uses = job.get("uses")
    if isinstance(uses, str) and uses.startswith("./.github/workflows/"):
        return uses.rsplit("/", 1)[1]
    return None


def needs(job: dict) -> list[str]:
    n = job.get("needs") or []
    return [n] if isinstance(n, str) else list(n)


def ancestors(wf: dict, job_id: str) -> set[str]:
    """Every job `job_id` waits for, directly or through other jobs."""
    seen: set[str] = set()
    todo = needs(jobs(wf)[job_id])
    while todo:
        j = todo.pop()
        if j not in seen:
            seen.add(j)
            todo += needs(jobs(wf).get(j, {}))
    return seen


def runs_make_test(job: dict, wfs: dict[str, dict]) -> bool:
    """The job runs `make test` (or .ci/run, which is `make test`), itself or through a local reusable workflow."""
    if any(re.search(r"(^|\s)(make test|\.ci/run)\b", r) for r in runs(job)):
        return True
    callee = local_callee(job)
    return callee in wfs and any(runs_make_test(j, wfs) for j in jobs(wfs[callee]).values())


def self_hosted_jobs(wfs: dict[str, dict]) -> list[tuple[str, str, dict]]:
    return [(name, jid, job) for name, wf in wfs.items() for jid, job in jobs(wf).items()
            if "uses" not in job and not is_hosted(job.get("runs-on"))]


# The checks: each returns a list of problems, empty when the property holds.

def check_pinned(texts: dict[str, str]) -> list[str]:
    """Every `uses:` of an action or remote workflow is a full 40-hex commit with a `# vX.Y.Z` comment."""
    problems = []
    for name, text in texts.items():
        wf = yaml.safe_load(text)
        found = [job["uses"] for job in jobs(wf).values() if "uses" in job]
        found += [s["uses"] for job in jobs(wf).values() for s in steps(job) if "uses" in s]
        lines = text.splitlines()
        for uses in found:
            if uses.startswith("./"):
                continue  # a workflow or action of this repository, at the same commit
            if not PINNED.match(uses):
                problems.append(f"{name}: `uses: {uses}` is not pinned to a full 40-hex commit SHA")
                continue
            line = next((ln for ln in lines if re.search(r"\buses:\s*" + re.escape(uses) + r"(\s|$)", ln)), "")
            comment = line.split(uses, 1)[1] if uses in line else ""
            if not VERSION_COMMENT.search(comment):
                problems.append(f"{name}: `uses: {uses}` has no trailing version comment (# vX.Y.Z)")
    return problems


def check_no_self_hosted_for_pull_requests(texts: dict[str, str]) -> list[str]:
    """No job that a pull_request/pull_request_target (or a workflow_run after one) can start, directly or
    through a local reusable workflow, runs anywhere but on a GitHub-hosted runner."""
    wfs = parse(texts)
    problems = []

    def walk(name: str, via: str, stack: tuple[str, ...]) -> None:
        for jid, job in jobs(wfs[name]).items():
            where = f"{via}{name}:{jid}"
            uses = job.get("uses")
            if uses:
                callee = local_callee(job)
                if callee is None:
                    problems.append(f"{where}: calls {uses}, which this test cannot see into")
                elif callee not in wfs:
                    problems.append(f"{where}: calls {uses}, which does not exist")
                elif callee not in stack:
                    walk(callee, where + " -> ", stack + (callee,))
            elif not is_hosted(job.get("runs-on")):
                problems.append(f"{where}: reachable from a pull request, runs on {job.get('runs-on')!r}, "
                                "not a GitHub-hosted runner")

    for name, wf in wfs.items():
        events = set(triggers(wf)) & PR_REACHABLE_EVENTS
        if events:
            walk(name, f"[{', '.join(sorted(events))}] ", (name,))
    return problems


def check_gpu_job(texts: dict[str, str]) -> list[str]:
    """The self-hosted (GPU) job is in publish.yml, which runs only on a push to main and by hand; it is gated
    by an environment and runs make gpu-run, pytest -m gpu, the results tests, then uploads results/."""
    wfs = parse(texts)
    found = self_hosted_jobs(wfs)
    if not found:
        return ["no job runs on the self-hosted GPU runner"]
    problems = []
    for name, jid, job in found:
        where = f"{name}:{jid}"
        if name != "publish.yml":
            problems.append(f"{where}: only publish.yml may use the self-hosted runner (its runner group "
                            "admits publish.yml at refs/heads/main)")
        on = triggers(wfs[name])
        if set(on) - GPU_EVENTS or not on:
            problems.append(f"{where}: its workflow runs on {sorted(on)}; only push to main and workflow_dispatch")
        push = on.get("push")
        if "push" in on and (not isinstance(push, dict) or push.get("branches") != ["main"]
                             or set(push) - {"branches"}):
            problems.append(f"{where}: push must be limited to branches: [main] (got {push!r})")
        env = job.get("environment")
        if not (env if isinstance(env, str) else isinstance(env, dict) and env.get("name")):
            problems.append(f"{where}: has no environment (its required reviewers gate the GPU)")
        script = runs(job)
        at = [next((i for i, r in enumerate(script) if want in r), None) for want in GPU_STEPS]
        if None in at or at != sorted(at):
            problems.append(f"{where}: must run {GPU_STEPS} in that order (runs {script})")
        uploads = [s for s in steps(job) if action(s) == "actions/upload-artifact"]
        if not any(str((s.get("with") or {}).get("path", "")).rstrip("/") == "results" for s in uploads):
            problems.append(f"{where}: does not upload results/ as an artifact")
    return problems


def check_deploy_order(texts: dict[str, str]) -> list[str]:
    """Deploying waits for the GPU job, which waits for `make test`; the site is built and deployed on
    GitHub-hosted runners from the GPU job's results/ artifact."""
    wfs = parse(texts)
    problems = []
    deploys = [(n, jid, job) for n, wf in wfs.items() for jid, job in jobs(wf).items()
               if any(action(s) == "actions/deploy-pages" for s in steps(job))]
    if not deploys:
        return ["no job deploys the site (actions/deploy-pages)"]
    for name, jid, job in deploys:
        wf = wfs[name]
        where = f"{name}:{jid}"
        if not is_hosted(job.get("runs-on")):
            problems.append(f"{where}: deploys from {job.get('runs-on')!r}, not a GitHub-hosted runner")
        before = ancestors(wf, jid)
        gpu = [j for j in before if not is_hosted(jobs(wf)[j].get("runs-on")) and "uses" not in jobs(wf)[j]]
        if not gpu:
            problems.append(f"{where}: does not wait for the GPU job")
        for g in gpu:
            if not any(runs_make_test(jobs(wf)[t], wfs) for t in ancestors(wf, g)):
                problems.append(f"{name}:{g}: the GPU job does not wait for a job that runs `make test`")
        builders = [j for j in before | {jid} if any(action(s) == "actions/upload-pages-artifact"
                                                      for s in steps(jobs(wf)[j]))]
        if not builders:
            problems.append(f"{where}: no job before it uploads the Pages artifact")
        for b in builders:
            bjob = jobs(wf)[b]
            if not is_hosted(bjob.get("runs-on")):
                problems.append(f"{name}:{b}: builds the site on {bjob.get('runs-on')!r}, not a GitHub-hosted runner")
            if not set(gpu) <= ancestors(wf, b):
                problems.append(f"{name}:{b}: builds the site without waiting for the GPU job")
            if not any(action(s) == "actions/download-artifact"
                       and str((s.get("with") or {}).get("path", "")).rstrip("/") == "results"
                       for s in steps(bjob)):
                problems.append(f"{name}:{b}: builds the site without the GPU job's results/ artifact")
            script = runs(bjob)
            gate = next((i for i, r in enumerate(script) if "make publish-check" in r), None)
            build = next((i for i, r in enumerate(script) if "make build" in r), None)
            if gate is None or build is None or gate > build:
                problems.append(f"{name}:{b}: must run `make publish-check` before `make build` (runs {script})")
    return problems


def check_permissions(texts: dict[str, str]) -> list[str]:
    """Top-level permissions are read-only; a job writes only pages and id-token, and only to deploy."""
    problems = []
    for name, wf in parse(texts).items():
        top = wf.get("permissions")
        if top is None:
            problems.append(f"{name}: no top-level permissions (the default token may be read-write)")
        elif isinstance(top, str):
            if top != "read-all":
                problems.append(f"{name}: top-level permissions {top!r} is not read-only")
        elif any(v not in ("read", "none") for v in top.values()):
            problems.append(f"{name}: top-level permissions {top} are not read-only")
        for jid, job in jobs(wf).items():
            perms = job.get("permissions")
            if isinstance(perms, str) and perms != "read-all":
                problems.append(f"{name}:{jid}: permissions {perms!r}")
                continue
            writes = {k for k, v in (perms or {}).items() if v == "write"}
            deploys = any(action(s) == "actions/deploy-pages" for s in steps(job))
            if writes and (not deploys or writes - {"pages", "id-token"}):
                problems.append(f"{name}:{jid}: writes {sorted(writes)}; only the deploy job writes, "
                                "and only pages and id-token")
    return problems


def check_checkout_credentials(texts: dict[str, str]) -> list[str]:
    """Every actions/checkout sets persist-credentials: false (no token left in .git/config for later steps)."""
    return [f"{name}:{jid}: actions/checkout without persist-credentials: false"
            for name, wf in parse(texts).items() for jid, job in jobs(wf).items() for s in steps(job)
            if action(s) == "actions/checkout" and (s.get("with") or {}).get("persist-credentials") is not False]


def check_no_expressions_in_scripts(texts: dict[str, str]) -> list[str]:
    """No `${{ }}` inside a run: script (inputs and event fields reach scripts through env:, never as code)."""
    return [f"{name}:{jid}: run: script interpolates ${{{{ }}}}: {r.strip()[:60]!r}"
            for name, wf in parse(texts).items() for jid, job in jobs(wf).items() for r in runs(job)
            if "${{" in r]


def check_dependabot(text: str | None) -> list[str]:
    """.github/dependabot.yml keeps the github-actions ecosystem (the pinned SHAs) current, at least weekly."""
    if text is None:
        return ["no .github/dependabot.yml"]
    cfg = yaml.safe_load(text) or {}
    if cfg.get("version") != 2:
        return ["dependabot.yml: version is not 2"]
    for u in cfg.get("updates") or []:
        if (u.get("package-ecosystem") == "github-actions" and u.get("directory") in ("/", "/.github/workflows")
                and (u.get("schedule") or {}).get("interval") in ("daily", "weekly")):
            return []
    return ["dependabot.yml: no daily or weekly update for package-ecosystem github-actions in directory /"]


WORKFLOW_CHECKS = [check_pinned, check_no_self_hosted_for_pull_requests, check_gpu_job, check_deploy_order,
                   check_permissions, check_checkout_credentials, check_no_expressions_in_scripts]


# The real files.

def test_there_are_workflows():
    assert {"ci.yml", "publish.yml"} <= set(real_workflows())


@pytest.mark.parametrize("check", WORKFLOW_CHECKS, ids=lambda c: c.__name__)
def test_real_workflows(check):
    assert check(real_workflows()) == []


def test_real_dependabot():
    assert check_dependabot(DEPENDABOT.read_text(encoding="utf-8") if DEPENDABOT.exists() else None) == []


def test_fork_lab_run_is_maintainer_dispatched():
    """The fork path: workflow_dispatch inputs `pr` and `sha`; the GPU job checks out the resolved commit."""
    wf = parse(real_workflows())["publish.yml"]
    assert {"pr", "sha"} <= set((triggers(wf)["workflow_dispatch"] or {}).get("inputs") or {})
    (_, _, gpu), = self_hosted_jobs({"publish.yml": wf})
    checkout = next(s for s in steps(gpu) if action(s) == "actions/checkout")
    assert "needs.target.outputs.sha" in str(checkout["with"].get("ref"))
    assert gpu.get("permissions") == {"contents": "read"}


# Each check fails on a small broken workflow: GOOD passes every check; each case breaks one property.

SHA = "0123456789abcdef0123456789abcdef01234567"
GOOD = {
    "ci.yml": """
on: pull_request
permissions: {contents: read}
jobs:
  test:
    uses: ./.github/workflows/test.yml
""",
    "test.yml": f"""
on: {{workflow_call: {{}}}}
permissions: {{contents: read}}
jobs:
  test:
    runs-on: ubuntu-24.04
    steps:
      - uses: actions/checkout@{SHA} # v4.2.2
        with: {{persist-credentials: false}}
      - run: make test
""",
    "publish.yml": f"""
on:
  push: {{branches: [main]}}
  workflow_dispatch:
permissions:
  contents: read
jobs:
  test:
    uses: ./.github/workflows/test.yml
  gpu:
    needs: test
    runs-on: [self-hosted, gpu]
    environment: gpu
    steps:
      - uses: actions/checkout@{SHA} # v4.2.2
        with: {{persist-credentials: false}}
      - run: make gpu-run
      - run: .venv/bin/pytest -m gpu
      - run: .venv/bin/pytest tests/test_results.py tests/test_labs.py
      - uses: actions/upload-artifact@{SHA} # v4.6.2
        with: {{name: results, path: results/}}
  build:
    needs: gpu
    runs-on: ubuntu-24.04
    steps:
      - uses: actions/download-artifact@{SHA} # v4.3.0
        with: {{name: results, path: results/}}
      - run: make publish-check
      - run: make build
      - uses: actions/upload-pages-artifact@{SHA} # v3.0.1
  deploy:
    needs: build
    runs-on: ubuntu-24.04
    permissions: {{pages: write, id-token: write}}
    environment: github-pages
    steps:
      - uses: actions/deploy-pages@{SHA} # v4.0.5
""",
}

# (the check that must fail, file, text to replace, replacement)
BROKEN = [
    (check_pinned, "test.yml", f"actions/checkout@{SHA} # v4.2.2", "actions/checkout@v4"),
    (check_pinned, "test.yml", f"actions/checkout@{SHA} # v4.2.2", f"actions/checkout@{SHA[:7]} # v4.2.2"),
    (check_pinned, "publish.yml", f"deploy-pages@{SHA} # v4.0.5", f"deploy-pages@{SHA}"),
    # a pull request reaches the self-hosted runner: directly, through the reusable workflow, by pull_request_target
    (check_no_self_hosted_for_pull_requests, "ci.yml", "    uses: ./.github/workflows/test.yml",
     "    runs-on: [self-hosted, gpu]\n    steps: [{run: make gpu-run}]"),
    (check_no_self_hosted_for_pull_requests, "test.yml", "runs-on: ubuntu-24.04", "runs-on: [self-hosted, linux]"),
    (check_no_self_hosted_for_pull_requests, "publish.yml", "  workflow_dispatch:", "  pull_request_target:"),
    (check_no_self_hosted_for_pull_requests, "ci.yml", "./.github/workflows/test.yml",
     f"octo/ci/.github/workflows/t.yml@{SHA} # v1"),
    # the GPU workflow: triggers, branch, environment, steps, upload
    (check_gpu_job, "publish.yml", "  workflow_dispatch:", "  workflow_dispatch:\n  pull_request:"),
    (check_gpu_job, "publish.yml", "branches: [main]", "branches: ['**']"),
    (check_gpu_job, "publish.yml", "    environment: gpu\n", ""),
    (check_gpu_job, "publish.yml", "      - run: .venv/bin/pytest -m gpu\n", ""),
    (check_gpu_job, "publish.yml", "      - run: make gpu-run\n", ""),
    (check_gpu_job, "publish.yml", "name: results, path: results/}\n  build", "name: results, path: site/}\n  build"),
    (check_gpu_job, "test.yml", "runs-on: ubuntu-24.04", "runs-on: [self-hosted, linux]"),
    # the order test -> gpu -> build -> deploy, all but the GPU job on GitHub-hosted runners
    (check_deploy_order, "publish.yml", "    needs: build\n", ""),
    (check_deploy_order, "publish.yml", "    needs: test\n", ""),
    (check_deploy_order, "publish.yml", "    needs: gpu\n", ""),
    (check_deploy_order, "publish.yml", "    needs: build\n    runs-on: ubuntu-24.04",
     "    needs: build\n    runs-on: [self-hosted, gpu]"),
    (check_deploy_order, "publish.yml", "    needs: gpu\n    runs-on: ubuntu-24.04",
     "    needs: gpu\n    runs-on: [self-hosted, gpu]"),
    (check_deploy_order, "publish.yml", "with: {name: results, path: results/}\n      - run: make publish-check",
     "with: {name: screenshots, path: shots/}\n      - run: make publish-check"),
    # the publishing gate: no stale number is built into the site
    (check_deploy_order, "publish.yml", "      - run: make publish-check\n", ""),
    (check_deploy_order, "publish.yml", "      - run: make publish-check\n      - run: make build\n",
     "      - run: make build\n      - run: make publish-check\n"),
    # permissions
    (check_permissions, "publish.yml", "permissions:\n  contents: read\n", ""),
    (check_permissions, "publish.yml", "permissions:\n  contents: read\n", "permissions:\n  contents: write\n"),
    (check_permissions, "ci.yml", "permissions: {contents: read}", "permissions: write-all"),
    (check_permissions, "publish.yml", "    environment: gpu\n",
     "    environment: gpu\n    permissions: {contents: read, id-token: write}\n"),
    (check_permissions, "publish.yml", "{pages: write, id-token: write}", "{pages: write, id-token: write, contents: write}"),
    # credentials and injection
    (check_checkout_credentials, "test.yml", "        with: {persist-credentials: false}\n", ""),
    (check_no_expressions_in_scripts, "test.yml", "run: make test", "run: make test REF=${{ github.head_ref }}"),
]


def break_(name: str, old: str, new: str) -> dict[str, str]:
    assert GOOD[name].count(old) == 1, f"the case must change exactly one place in {name}: {old!r}"
    return {**GOOD, name: GOOD[name].replace(old, new)}


@pytest.mark.parametrize("check", WORKFLOW_CHECKS, ids=lambda c: c.__name__)
def test_good_sample_passes(check):
    assert check(GOOD) == []


@pytest.mark.parametrize("check,name,old,new", BROKEN,
                         ids=[f"{c.__name__}-{i}" for i, (c, *_rest) in enumerate(BROKEN)])
def test_broken_sample_fails(check, name, old, new):
    problems = check(break_(name, old, new))
    assert problems, f"{check.__name__} passed a broken {name}"


def test_on_is_read_as_true():
    """The trap: yaml.safe_load turns the key `on` into True; triggers() must still find the events."""
    wf = yaml.safe_load("on:\n  pull_request:\njobs: {}\n")
    assert True in wf and "on" not in wf
    assert set(triggers(wf)) == {"pull_request"}


GOOD_DEPENDABOT = "version: 2\nupdates:\n  - package-ecosystem: github-actions\n    directory: /\n" \
                  "    schedule: {interval: weekly}\n"


@pytest.mark.parametrize("text", [
    None,
    GOOD_DEPENDABOT.replace("github-actions", "pip"),
    GOOD_DEPENDABOT.replace("weekly", "monthly"),
    GOOD_DEPENDABOT.replace("version: 2", "version: 1"),
], ids=["missing", "other-ecosystem", "monthly", "version-1"])
def test_dependabot_check_fails(text):
    assert check_dependabot(GOOD_DEPENDABOT) == []
    assert check_dependabot(text)
