"""The `verikv prove` runner: selection, listing, statuses, exit codes, timeouts, reports, mutants."""

from __future__ import annotations

import json
import time
from pathlib import Path
from xml.etree import ElementTree

import pytest

from verikv.proofs import runner
from verikv.proofs.registry import Check, Mutant, Outcome


def _check(name: str, run) -> Check:  # type: ignore[no-untyped-def]
    return Check(name, "fake", "INV-FAKE", "fake.step", "unbounded", run)


def _raise() -> Outcome:
    raise RuntimeError("boom")


def _sleep() -> Outcome:
    time.sleep(60)
    return Outcome("proved")


FAKE_CHECKS = {
    "fake/proved": _check("fake/proved", lambda: Outcome("proved", vacuity_checked=True)),
    "fake/failed": _check("fake/failed", lambda: Outcome("failed", "pre : free=[1]\npost: free=[1, 1]")),
    "fake/unknown": _check("fake/unknown", lambda: Outcome("unknown", "timeout")),
    "fake/error": _check("fake/error", _raise),
    "fake/slow": _check("fake/slow", _sleep),
}
FAKE_MUTANTS = {
    "m/caught": Mutant("m/caught", "spec", "INV-FAKE", "caught one", lambda: ["fake/proved"]),
    "m/survivor": Mutant("m/survivor", "spec", "INV-FAKE", "survives", lambda: []),
}


@pytest.fixture
def fake_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "_CATALOGUE", {False: FAKE_CHECKS, True: FAKE_MUTANTS})
    monkeypatch.setenv("CI", "true")


def test_select_by_glob_or_substring() -> None:
    names = ["pool.free/INV-NULL", "pool.free/INV-NULL:N=3..5", "pool.touch/INV-NULL"]
    assert runner.select(names, []) == names
    assert runner.select(names, ["pool.free"]) == names[:2]
    assert runner.select(names, ["*/INV-NULL"]) == [names[0], names[2]]
    assert runner.select(names, ["nothing"]) == []


def test_list_prints_selected_and_exits_zero(fake_registry: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert runner.main(["--list", "--only", "fake/pro*"]) == 0
    out = capsys.readouterr().out
    assert "fake/proved" in out and "fake/failed" not in out and "1 checks" in out


def test_nothing_selected_is_an_error(fake_registry: None) -> None:
    assert runner.main(["--only", "no-such-check"]) == 2


def test_all_proved_exits_zero_and_writes_reports(fake_registry: None, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    report, junit = tmp_path / "r.json", tmp_path / "r.xml"
    assert runner.main(["--only", "fake/proved", "--json", str(report), "--junit", str(junit)]) == 0
    data = json.loads(report.read_text())
    assert data["summary"]["ok"] == 1 and data["results"][0]["status"] == "proved"
    assert data["results"][0]["vacuity_checked"] is True
    suite = ElementTree.parse(junit).getroot()
    assert suite.get("tests") == "1" and suite.get("failures") == "0"
    assert "[1/1] proved" in capsys.readouterr().out  # plain progress lines under CI


@pytest.mark.parametrize("name,status", [("fake/failed", "failed"), ("fake/unknown", "unknown"),
                                         ("fake/error", "error")])
def test_any_non_success_fails_the_run(fake_registry: None, tmp_path: Path, name: str, status: str) -> None:
    report = tmp_path / "r.json"
    assert runner.main(["--only", "fake/proved", "--only", name, "--json", str(report)]) == 1
    results = {r["name"]: r for r in json.loads(report.read_text())["results"]}
    assert results[name]["status"] == status and results["fake/proved"]["status"] == "proved"


def test_counterexample_is_printed(fake_registry: None, capsys: pytest.CaptureFixture[str]) -> None:
    runner.main(["--only", "fake/failed"])
    assert "post: free=[1, 1]" in capsys.readouterr().out


def test_slow_check_is_killed_as_timeout(fake_registry: None, tmp_path: Path) -> None:
    report, junit = tmp_path / "r.json", tmp_path / "r.xml"
    assert runner.main(["--only", "fake/slow", "--timeout", "1", "--json", str(report), "--junit", str(junit)]) == 1
    assert json.loads(report.read_text())["results"][0]["status"] == "timeout"
    failure = ElementTree.parse(junit).getroot().find("testcase/failure")
    assert failure is not None and failure.get("message") == "timeout"


def test_mutants_pass_only_when_every_mutant_is_caught(fake_registry: None, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "m.json"
    assert runner.main(["--mutants", "--only", "m/caught", "--json", str(report)]) == 0
    assert json.loads(report.read_text())["results"][0]["caught_by"] == ["fake/proved"]
    assert runner.main(["--mutants"]) == 1
    assert "survived" in capsys.readouterr().out


def test_bad_options_are_rejected(fake_registry: None) -> None:
    assert runner.main(["--jobs", "0"]) == 2


def test_real_registry_runs_one_theorem(capsys: pytest.CaptureFixture[str]) -> None:
    assert runner.main(["--only", "pool.cache/INV-NULL"]) == 0
    assert "pool.cache/INV-NULL:N=3..5" in capsys.readouterr().out
