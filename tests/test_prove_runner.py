"""`verikv prove` and the pytest plugin: selection, names, listing, statuses, exit codes, CPU-budget timeouts,
reports (table, JSON, JUnit XML), mutants, isolation, collection counts, the missing-extra hint."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import get_args
from xml.etree import ElementTree

import pytest

from verikv.proofs import pytest_plugin
from verikv.proofs.runner import isolation, prove as runner
from verikv.proofs.runner.registry import SUCCESS, Check, Mutant, Outcome, Status, matches, select
from verikv.proofs.runner.selection import current_patterns, select as select_entries


def _check(name: str, run, kind: str = "fake", invariant: str = "INV-FAKE") -> Check:  # type: ignore[no-untyped-def]
    return Check(name, kind, invariant, "fake.step", "unbounded", run)


def _raise() -> Outcome:
    raise RuntimeError("boom")


def _spin() -> Outcome:
    while True:  # burns CPU until the CPU budget stops it
        pass


FAKE_CHECKS = {c.name: c for c in [
    _check("fake/proved", lambda: Outcome("proved", vacuity_checked=True)),
    _check("fake/failed", lambda: Outcome("failed", "pre : free=[1]\npost: free=[1, 1]")),
    _check("fake/unknown", lambda: Outcome("unknown", "timeout")),
    _check("fake/error", _raise),
    _check("fake/spin", _spin),
    _check("crosshair:about-atomic", lambda: Outcome("passed"), kind="crosshair", invariant="INV-ATOMIC"),
]}
FAKE_MUTANTS = {m.name: m for m in [
    Mutant("m/caught", "spec", "INV-FAKE", "caught one", lambda: ["fake/proved"]),
    Mutant("m/survivor", "spec", "INV-FAKE", "survives", lambda: []),
]}


@pytest.fixture
def fake_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fakes replace the registry; checks fork from this process so the children see them too."""
    monkeypatch.setattr(isolation, "catalogue", lambda mutants: FAKE_MUTANTS if mutants else FAKE_CHECKS)
    monkeypatch.setattr(pytest_plugin, "START_METHOD", "fork")
    monkeypatch.setenv("CI", "true")


def _prove(*argv: str) -> int:
    return runner.main(["--jobs", "1", *argv])  # xdist workers would not see the fakes


def test_select_by_glob_substring_or_invariant() -> None:
    checks = list(FAKE_CHECKS.values())
    assert select(checks, []) == checks
    assert [c.name for c in select(checks, ["fake/p*"])] == ["fake/proved"]
    assert [c.name for c in select(checks, ["spin"])] == ["fake/spin"]
    assert [c.name for c in select(checks, ["INV-ATOMIC"])] == ["crosshair:about-atomic"]  # by invariant
    assert [c.name for c in select(checks, ["INV-AT*"])] == ["crosshair:about-atomic"]
    assert not matches(FAKE_CHECKS["fake/proved"], "INV-FAK")  # an invariant must be whole


def test_list_prints_selected_and_exits_zero(fake_registry: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert _prove("--list", "--only", "fake/pro*") == 0
    out = capsys.readouterr().out
    assert "fake/proved" in out and "fake/failed" not in out and "1 checks" in out


def test_nothing_selected_is_an_error(fake_registry: None) -> None:
    assert _prove("--only", "no-such-check") == 2


def test_all_proved_exits_zero_and_writes_reports(fake_registry: None, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    report, junit = tmp_path / "r.json", tmp_path / "r.xml"
    assert _prove("--only", "fake/proved", "--json", str(report), "--junit", str(junit)) == 0
    data = json.loads(report.read_text())
    assert data["summary"]["ok"] == 1 and data["results"][0]["status"] == "proved"
    assert data["results"][0]["vacuity_checked"] is True
    suite = ElementTree.parse(junit).getroot().find("testsuite")
    assert suite is not None and suite.get("name") == "verikv-prove"
    assert suite.get("tests") == "1" and suite.get("failures") == "0"
    case = suite.find("testcase")
    assert case is not None and case.get("name") == "fake/proved"  # the check's own name
    assert "[1/1] proved" in capsys.readouterr().out  # plain progress lines under CI


def test_json_to_stdout_keeps_stdout_pure(fake_registry: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert _prove("--only", "fake/proved", "--json", "-") == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["summary"]["total"] == 1
    assert "fake/proved" in captured.err  # the table went to stderr
    assert not Path("-").exists()


@pytest.mark.parametrize("name,status", [("fake/failed", "failed"), ("fake/unknown", "unknown"),
                                         ("fake/error", "error")])
def test_any_non_success_fails_the_run(fake_registry: None, tmp_path: Path, name: str, status: str) -> None:
    report = tmp_path / "r.json"
    assert _prove("--only", "fake/proved", "--only", name, "--json", str(report)) == 1
    results = {r["name"]: r for r in json.loads(report.read_text())["results"]}
    assert results[name]["status"] == status and results["fake/proved"]["status"] == "proved"


def test_counterexample_is_printed(fake_registry: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert _prove("--only", "fake/failed") == 1
    assert "post: free=[1, 1]" in capsys.readouterr().out


def test_check_over_its_cpu_budget_is_a_timeout(fake_registry: None, tmp_path: Path) -> None:
    report, junit = tmp_path / "r.json", tmp_path / "r.xml"
    assert _prove("--only", "fake/spin", "--timeout", "1", "--json", str(report), "--junit", str(junit)) == 1
    result = json.loads(report.read_text())["results"][0]
    assert result["status"] == "timeout" and "1 CPU seconds" in result["detail"]
    assert ElementTree.parse(junit).getroot().find("testsuite/testcase/failure") is not None


def test_cpu_budget_counts_cpu_not_waiting() -> None:
    """A child that waits (as on a loaded machine) uses no CPU, so a 1 s CPU budget does not end it."""
    verdict = isolation.run_isolated(_sleep_then_prove, cpu_budget=1, method="fork")
    assert verdict.outcome.status == "proved" and verdict.seconds >= 1.5 and verdict.cpu_seconds < 1


def _sleep_then_prove() -> tuple[Outcome, tuple[str, ...]]:
    import time

    time.sleep(1.5)
    return Outcome("proved"), ()


def test_z3_success_without_vacuity_check_is_an_error() -> None:
    no_vacuity = _check("z3/none", lambda: Outcome("proved"), kind="z3")
    assert isolation.evaluate(no_vacuity)[0].status == "error"
    with_vacuity = _check("z3/some", lambda: Outcome("proved", vacuity_checked=True), kind="z3")
    assert isolation.evaluate(with_vacuity)[0].status == "proved"


def test_mutants_pass_only_when_every_mutant_is_caught(fake_registry: None, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "m.json"
    assert _prove("--mutants", "--only", "m/caught", "--json", str(report)) == 0
    assert json.loads(report.read_text())["results"][0]["caught_by"] == ["fake/proved"]
    assert _prove("--mutants") == 1
    assert "survived" in capsys.readouterr().out


def test_bad_options_are_rejected(fake_registry: None) -> None:
    assert _prove("--jobs", "0") == 2 and _prove("--timeout", "0") == 2


def test_table_keeps_whole_names_at_80_columns(fake_registry: None, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    long_name = "manager.reset_prefix_cache/INV-FREE-IFF-ZERO:N=3..5"  # the longest real name (51)
    monkeypatch.setitem(FAKE_CHECKS, long_name, _check(long_name, lambda: Outcome("passed")))
    assert _prove("--only", long_name) == 0
    table = [line for line in capsys.readouterr().out.splitlines() if line[:1] in set("┏┃┡│└")]
    assert any(long_name in line and "passed" in line for line in table)
    assert table and max(len(line) for line in table) <= 80


def test_real_registry_runs_in_parallel_from_a_clean_process() -> None:
    """The installed command on real checks: two pytest-xdist workers, fork-server children."""
    done = subprocess.run([sys.executable, "-m", "verikv", "prove", "--jobs", "2", "--only", "pool.cache/INV-NULL*"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "pool.cache/INV-NULL:N=3..5" in done.stdout and "2/2 checks ok" in done.stdout


def test_piped_table_is_not_hard_wrapped(fake_registry: None, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    bound = "N=3..5, " + ", ".join(f"parameter{i}<=2^{i}" for i in range(20)) + ", end-of-bound"
    monkeypatch.setitem(FAKE_CHECKS, "fake/wide", Check("fake/wide", "fake", "INV-FAKE", "fake.step", bound,
                                                         lambda: Outcome("passed")))
    assert _prove("--only", "fake/wide") == 0
    row = [line for line in capsys.readouterr().out.splitlines() if "fake/wide" in line and "│" in line]
    assert len(row) == 1 and "end-of-bound" in row[0] and len(row[0]) > 200


def _new_term_id() -> tuple[Outcome, tuple[str, ...]]:
    import z3

    return Outcome("passed", str(z3.Int("probe").get_id())), ()


def test_checks_start_from_a_clean_z3_context() -> None:
    """Z3 numbers terms in creation order: a fork-server child sees none of the parent's terms."""
    import z3

    polluted = [z3.Int(f"x{i}") + i for i in range(20_000)]
    parent_id = z3.Int("probe").get_id()
    clean_id = int(isolation.run_isolated(_new_term_id).outcome.detail)
    assert len(polluted) == 20_000 and parent_id > 40_000 and clean_id < 1_000


# --- names, selection, escaping -------------------------------------------------------------------

def test_real_names_hold_no_glob_or_markup_characters() -> None:
    """A name is pasted into --only (a glob), printed by rich (markup) and split by pytest's
    JUnit writer (``::``, ``[``): none of their special characters may occur in one."""
    names = [*isolation.catalogue(False), *isolation.catalogue(True)]
    assert len(names) > 279
    bad = [name for name in names if any(ch in name for ch in "[]*?") or "::" in name]
    assert not bad, bad


def test_an_exact_name_selects_only_itself() -> None:
    checks = [_check("a/b", lambda: Outcome("passed")), _check("a/b:N=3..5", lambda: Outcome("passed"))]
    assert [c.name for c in select_entries(checks, ["a/b"])] == ["a/b"]  # not its longer neighbour
    assert [c.name for c in select_entries(checks, ["a/b*"])] == ["a/b", "a/b:N=3..5"]
    assert [c.name for c in select_entries(checks, ["N=3"])] == ["a/b:N=3..5"]  # a substring still selects


def test_old_bracketed_names_still_select_with_a_notice(capsys: pytest.CaptureFixture[str]) -> None:
    assert runner.main(["--list", "--only", "lookup.rule[full]/*"]) == 0
    captured = capsys.readouterr()
    assert "lookup.rule.full/LONGEST-COMMON-HIT" in captured.out and "1 checks" in captured.out
    assert "deprecated" in captured.err and "'lookup.rule.full/*'" in captured.err
    notices: list[str] = []
    assert current_patterns(["pool.free/*", "manager.allocate_slots[dp]/DP-SHARD-CONFINED"], notices.append) == [
        "pool.free/*", "manager.allocate_slots.dp/DP-SHARD-CONFINED"]
    assert len(notices) == 1 and "manager.allocate_slots.dp/DP-SHARD-CONFINED" in notices[0]


def test_plugin_warns_about_an_old_name(fake_registry: None, tmp_path: Path) -> None:
    with pytest.warns(DeprecationWarning, match="lookup.rule.full/LONGEST-COMMON-HIT"):  # (the inner run
        _run_plugin(tmp_path, "-p", "no:warnings", "--co", "--verikv-proofs",  # keeps no warnings of its own)
                    "--verikv-only", "lookup.rule[full]/LONGEST-COMMON-HIT")


MARKUP = "[bold]x[/bold] [red]"
"""Text rich would read as markup (and drop) if it were not escaped."""


def test_user_text_is_never_read_as_markup(fake_registry: None, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    name = f"fake/markup {MARKUP}"
    monkeypatch.setitem(FAKE_CHECKS, name, Check(name, "fake", "INV-FAKE", f"step {MARKUP}", f"bound {MARKUP}",
                                                 lambda: Outcome("failed", f"counterexample {MARKUP}")))
    monkeypatch.setenv("COLUMNS", "80")  # the narrow (stacked) table
    assert _prove("--only", name) == 1
    narrow = capsys.readouterr().out
    monkeypatch.delenv("COLUMNS")
    assert _prove("--only", name) == 1
    wide = capsys.readouterr().out
    for out in (narrow, wide):
        table = "\n".join(line for line in out.splitlines() if line[:1] in set("┃│"))
        assert f"fake/markup {MARKUP}" in table and f"step {MARKUP}" in table, table
        assert f"counterexample {MARKUP}" in out and f"--- fake/markup {MARKUP}: failed" in out


# --- JUnit XML from both entry points --------------------------------------------------------------

ODD_NAMES = ["fake/odd <=(2) & 'quoted', with spaces", "fake/odd.dotted/INV-FAKE:N=3..5"]


@pytest.fixture
def odd_checks(fake_registry: None, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Checks named with the characters real names use (and XML must escape); one fails."""
    for name in ODD_NAMES:
        monkeypatch.setitem(FAKE_CHECKS, name, _check(name, lambda: Outcome("passed")))
    return [*ODD_NAMES, "fake/failed"]


def _junit_names(path: Path) -> dict[str, bool]:
    """Check testcase name -> whether it failed, read with an XML parser."""
    cases = ElementTree.parse(path).getroot().iter("testcase")
    return {case.get("name", ""): case.find("failure") is not None for case in cases
            if case.get("classname") == "verikv-proofs"}


def test_prove_junit_names_are_the_exact_check_names(odd_checks: list[str], tmp_path: Path) -> None:
    junit = tmp_path / "prove.xml"
    assert _prove(*(f"--only={name}" for name in odd_checks), "--junit", str(junit)) == 1
    assert _junit_names(junit) == {ODD_NAMES[0]: False, ODD_NAMES[1]: False, "fake/failed": True}


def test_pytest_junitxml_names_are_the_exact_check_names(odd_checks: list[str], tmp_path: Path) -> None:
    junit = tmp_path / "pytest.xml"
    code = _run_plugin(tmp_path, "--verikv-proofs", *(f"--verikv-only={name}" for name in odd_checks),
                       "--junitxml", str(junit))
    assert code == pytest.ExitCode.TESTS_FAILED
    assert _junit_names(junit) == {ODD_NAMES[0]: False, ODD_NAMES[1]: False, "fake/failed": True}


# --- the plugin on a small fake registry -----------------------------------------------------------

def _run_plugin(root: Path, *options: str) -> int | pytest.ExitCode:
    """pytest in this process (so the fake registry applies) over ``root``, which holds one test."""
    (root / "test_one.py").write_text("def test_one():\n    pass\n")
    return pytest.main(["-p", "no:cacheprovider", "--noconftest", "--import-mode=importlib", "--rootdir", str(root),
                        "-q", *options, str(root)])


def test_plugin_runs_each_selected_check_once(fake_registry: None, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    code = _run_plugin(tmp_path, "--verikv-proofs", "--verikv-only", "fake/proved", "--verikv-only", "fake/failed",
                       "-rA")
    out = capsys.readouterr().out
    assert code == pytest.ExitCode.TESTS_FAILED
    summary = [line.split()[0] + " " + line.split("verikv-proofs::")[1].split()[0] for line in out.splitlines()
               if line.startswith(("PASSED", "FAILED")) and "verikv-proofs::" in line]
    assert summary == ["PASSED fake/proved", "FAILED fake/failed"], out
    assert "1 failed, 2 passed" in out


def test_plugin_counts_its_items_as_collected(fake_registry: None, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    _run_plugin(tmp_path, "--co", "--verikv-proofs", "--verikv-only", "fake/*")
    assert "6 tests collected" in capsys.readouterr().out  # 5 fake checks and the test file's test
    _run_plugin(tmp_path, "--co", "--verikv-proofs", "--verikv-only", "fake/*", "-k", "proved or one")
    assert "2/6 tests collected (4 deselected)" in capsys.readouterr().out
    _run_plugin(tmp_path, "--verikv-proofs", "--verikv-only", "fake/proved", "-k", "proved")
    assert "1 passed, 1 deselected" in capsys.readouterr().out


def test_plugin_failure_is_reported_once(fake_registry: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """On CI pytest prints a failure's whole message in the short summary too: for a check it is
    the first line only, so the counterexample appears once."""
    monkeypatch.setenv("CI", "true")
    _run_plugin(tmp_path, "--verikv-proofs", "--verikv-only", "fake/failed")
    out = capsys.readouterr().out
    assert out.count("post: free=[1, 1]") == 1, out
    assert "verikv-proofs::fake/failed - fake/failed: failed\n" in out


def test_plugin_without_the_proofs_extra_is_a_one_line_hint(tmp_path: Path) -> None:
    """z3 made unimportable (not uninstalled): asking for the checks is a usage error, no traceback."""
    shim = "import sys; sys.modules['z3'] = None; import pytest; sys.exit(pytest.main(sys.argv[1:]))"
    (tmp_path / "test_one.py").write_text("def test_one():\n    pass\n")
    done = subprocess.run([sys.executable, "-c", shim, "-p", "no:cacheprovider", "--noconftest", "--verikv-proofs",
                           str(tmp_path)], capture_output=True, text=True, cwd=tmp_path, check=False)
    output = (done.stdout + done.stderr).strip()
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, output
    assert output.splitlines() == ["ERROR: --verikv-proofs and --verikv-mutants need the proofs extra "
                                   "(z3 is missing): pip install 'verikv[proofs]'"], output
    plain = subprocess.run([sys.executable, "-c", shim, "-p", "no:cacheprovider", "--noconftest", "-q",
                            str(tmp_path)], capture_output=True, text=True, cwd=tmp_path, check=False)
    assert plain.returncode == 0, plain.stdout + plain.stderr  # without the option the plugin stays quiet


# --- statuses: the documentation, the code and the JSON agree --------------------------------------

DOCS_CI = Path(__file__).resolve().parents[1] / "docs" / "ci.md"


def documented_statuses() -> dict[str, bool]:
    """docs/ci.md's results table: status -> whether it counts as ok."""
    text = DOCS_CI.read_text()
    lines = text[text.index("| result | meaning | exit status |"):].splitlines()[2:]
    rows = lines[:next(i for i, line in enumerate(lines) if not line.startswith("|"))]
    assert all(row.startswith("| `") for row in rows), rows
    return {row.split("`")[1]: row.rstrip(" |").endswith("| ok") for row in rows}


def test_every_status_is_documented_with_whether_it_counts_as_ok() -> None:
    assert documented_statuses() == {status: status in SUCCESS for status in get_args(Status)}


def test_json_ok_is_what_the_docs_say(fake_registry: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for status in get_args(Status):
        monkeypatch.setitem(FAKE_CHECKS, f"status/{status}",
                            _check(f"status/{status}", lambda s=status: Outcome(s, vacuity_checked=True)))
    report = tmp_path / "r.json"
    _prove("--only", "status/*", "--json", str(report))
    seen = {r["status"]: r["ok"] for r in json.loads(report.read_text())["results"]}
    assert seen == documented_statuses()
