"""`verikv prove`: selection, listing, statuses, exit codes, CPU-budget timeouts, reports, mutants, isolation."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest

from verikv.proofs import isolation, pytest_plugin, runner
from verikv.proofs.registry import Check, Mutant, Outcome, matches, select


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
    done = subprocess.run([sys.executable, "-m", "verikv", "prove", "--jobs", "2", "--only", "pool.cache/INV-NULL"],
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
