"""The README a new user reads first: the two commands that work on a fresh machine, a path to a
first Clore run in a few minutes, basics before scale-out, reference moved to docs/ and linked."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")


def _section(title: str) -> str:
    start = README.index(f"\n## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start : end if end != -1 else len(README)]


def test_the_quick_start_keeps_its_two_fresh_machine_commands() -> None:
    quick = _section("Quick start")
    assert "pip install . && clore-run run examples/hello.yml --backend local" in quick
    assert "pip install '.[test]' && python -m pytest" in quick  # what .ci/run runs
    assert 'python -m pytest -m "not slow"' in quick  # the fast lane
    for need in ("sshd", "PostgreSQL", "chromium", "CI=true", "tests.fakes.walkthrough"):
        assert need in README, need


def test_a_first_clore_run_is_a_path_of_commands_in_order() -> None:
    path = _section("Run on Clore in five minutes")
    steps = [
        "CLORE_API_KEY",
        "CLORE-Blockchain",
        "clore-run doctor",
        "clore-run offers",
        "clore-run plan examples/first-clore.yml --backend clore",
        "clore-run run examples/first-clore.yml --backend clore",
        "total_cost_usd",
        "clore-run cleanup",
    ]
    where = [path.index(step) for step in steps]
    assert where == sorted(where), "the steps are out of order"
    assert (REPO / "examples" / "first-clore.yml").is_file()


def test_basics_come_before_scale_out_and_reference_lives_in_docs() -> None:
    titles = re.findall(r"^## (.+)$", README, re.M)
    assert titles.index("Queue server: `clore-run serve`") < titles.index("Scaling out")
    assert len(README.splitlines()) < 450  # was 919: the tables moved to docs/
    links = set(re.findall(r"\]\((docs/[a-z-]+\.md)[#)]", README))
    assert {"docs/pipeline.md", "docs/cli.md", "docs/scale-out.md", "docs/serve.md"} <= links
    for link in links:
        assert (REPO / link).is_file(), link
    for page in (REPO / "docs").glob("*.md"):
        for target in re.findall(r"\]\(([a-z-]+\.md)[#)]", page.read_text(encoding="utf-8")):
            assert (REPO / "docs" / target).is_file(), f"{page.name} links {target}"


def test_the_readme_says_what_to_put_in_uses() -> None:
    actions = _section("Use it in GitHub Actions")
    assert "placeholder" in actions and "OWNER/REPO" in actions and "commit SHA" in actions
    workflow = (REPO / "workflows" / "gpu-tests.yml").read_text(encoding="utf-8")
    lines = workflow.splitlines()
    uses = next(i for i, line in enumerate(lines) if "uses: org/clore-gpu-action@" in line)
    assert "# CHANGE:" in lines[uses - 2] or "# CHANGE:" in lines[uses - 1]
    assert "# CHANGE:" in next(line for line in lines if "pipeline:" in line)


def test_no_example_pip_installs_into_the_callers_environment() -> None:
    """Run with --backend local, a job's `pip install` lands in the user's active venv unless
    it installs into the job's own folder."""
    for path in sorted((REPO / "examples").glob("*.yml")):
        jobs = yaml.safe_load(path.read_text(encoding="utf-8"))["jobs"]
        for job_id, job in jobs.items():
            for line in str(job.get("run", "")).splitlines():
                if "pip install" in line:
                    assert "--target" in line, f"{path.name}: {job_id}: {line.strip()}"
