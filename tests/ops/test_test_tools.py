"""The test-loop tools: the folders a change touches (make test-changed) and the kept durations."""

from ops.test_changed import folders_for
from ops.test_durations import folder_of, lines, merge, summarize, table
from ops.test_run import pytest_command


def test_a_change_maps_to_the_tests_of_its_packages():
    assert folders_for(["tasks/serving/variants.py", "tasks/canary_analysis.py", "ops/services.py"]) == [
        "tests/ops",
        "tests/serving",
        "tests/steps",
    ]
    assert folders_for(["docs/serving.md", "README.md", "tests/e2e/test_text_canary_e2e.py"]) == [
        "tests/docs",
        "tests/e2e",
    ]
    assert folders_for(["tasks/core/params.py", "tasks/serving/app.py"]) == ["tests"]  # the core: everything
    assert folders_for(["tests/helpers/server.py"]) == ["tests"]  # helpers shared by many folders
    assert folders_for(["tasks/nowhere/x.py"]) == []  # no such test folder: nothing invented


def test_durations_sum_per_folder_and_list_the_slowest():
    cases = [
        {"id": "tests/serving/test_a.py::t1", "seconds": 3.0, "outcome": "passed"},
        {"id": "tests/serving/test_b.py::t2", "seconds": 1.5, "outcome": "failed"},
        {"id": "tests/core/test_c.py::t3[x]", "seconds": 0.25, "outcome": "skipped"},
    ]
    s = summarize([c | {"folder": folder_of(c["id"])} for c in cases])
    assert s["folders"] == {
        "tests/serving": {"tests": 2, "seconds": 4.5, "failed": 1},
        "tests/core": {"tests": 1, "seconds": 0.2, "failed": 0},
    }
    assert (s["tests"], s["failed"], s["skipped"], s["seconds"]) == (3, 1, 1, 4.8)
    assert [t["id"] for t in s["slowest"]] == [c["id"] for c in cases]
    assert lines(s)[0] == "3 tests, 5 s of tests (1 failed, 1 skipped)"


def test_two_parts_merge_into_one_summary_with_each_parts_wall_time():
    def part(cases):
        return summarize([c | {"folder": folder_of(c["id"])} for c in cases])

    parallel = part([{"id": "tests/core/test_a.py::t1", "seconds": 1.0, "outcome": "passed"}])
    serial = part(
        [
            {"id": "tests/core/test_b.py::t2", "seconds": 9.0, "outcome": "failed"},
            {"id": "tests/e2e/test_c.py::t3", "seconds": 20.0, "outcome": "passed"},
        ]
    )
    m = merge({"parallel": parallel, "serial": serial}, {"parallel": 0.7, "serial": 31.0})
    assert (m["tests"], m["failed"], m["seconds"]) == (3, 1, 30.0)
    assert m["folders"] == {
        "tests/e2e": {"tests": 1, "seconds": 20.0, "failed": 0},
        "tests/core": {"tests": 2, "seconds": 10.0, "failed": 1},
    }
    assert [t["seconds"] for t in m["slowest"]] == [20.0, 9.0, 1.0]
    assert m["parts"]["serial"] == {"tests": 2, "seconds": 29.0, "wall_s": 31.0}
    assert lines(m)[-2:] == [
        "part parallel: 1 tests, 1 s of tests, 1 s wall",
        "part serial: 2 tests, 29 s of tests, 31 s wall",
    ]
    page = table({"summary": m, "commit": "abc1234", "wall_s": 40.0, "command": "make test", "machine": "here"})
    assert "Its parallel part: 1 tests, 1 s of tests in 1 s of wall time." in page
    assert "| `tests/core` | 2 | 10.0 |" in page


def test_the_parallel_part_runs_on_workers_and_the_serial_part_in_one_process():
    parallel = pytest_command("parallel", None, True, ["-m", "not extended", "tests/core"])
    assert parallel[1:5] == ["-m", "pytest", "--part", "parallel"]
    assert parallel[5:7] == ["-n", "auto"] and parallel[-3:] == ["-m", "not extended", "tests/core"]
    assert parallel[7].endswith(".test-results/junit-parallel.xml")
    serial = pytest_command("serial", 3, False, ["-x"])
    assert serial[1:] == ["-m", "pytest", "--part", "serial", "-x"]
    assert pytest_command("parallel", 3, False, [])[5:] == ["-n", "3"]
