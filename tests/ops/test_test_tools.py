"""The test-loop tools: the folders a change touches (make test-changed) and the kept durations."""

from ops.test_changed import folders_for
from ops.test_durations import folder_of, lines, summarize


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
