"""The read model's pure parts (tasks/reports/pipeline_state.py): serving shares, per-day series with
their gaps, labels per night, and the status text when a part could not be read."""

from tasks.reports.pipeline_state import daily_costs, labels_by_night, serving, state_lines


def test_serving_shares_split_and_shadow():
    split = {"serving": {"champion": {"model_version": "model-v1"}, "challenger": {"model_version": "model-v2"},
                         "challenger_weight": 25, "mode": "split"}}  # fmt: skip
    assert serving(split)["champion_weight"] == 75 and serving(split)["challenger_weight"] == 25
    shadow = {"serving": {**split["serving"], "mode": "shadow"}}
    assert serving(shadow)["champion_weight"] == 100  # the champion answers every request
    assert serving({})["champion"] is None and serving({})["champion_weight"] == 100


def test_labels_per_night_sum_a_nights_runs_and_leave_a_night_without_runs_as_a_gap():
    def summary(run, written_day, gold=None, weak=None, labeled=None, held=None):
        counts = {"gold": {"rows": gold}, "weak": {"rows": weak}} if gold is not None else None
        held_part = {"held": {"rows_tonight": held}} if held is not None else {}
        return {"run_id": run, "written": 0.0, "labeling": {"label_counts": counts} if counts else None,
                "batch": {"rows_labeled": labeled}, **held_part}  # fmt: skip

    store_runs = {"a": {"day": "2026-11-01"}, "b": {"day": "2026-11-01"}, "c": {"day": "2026-11-03"},
                  "old": {"day": "2026-11-04"}}  # fmt: skip
    rows = labels_by_night(
        [
            summary("a", 1, 10, 400, held=0),
            summary("b", 1, 5, 300, held=250),
            summary("c", 3, 7, 90, held=0),
            summary("old", 4, labeled=120),
        ],  # fmt: skip
        store_runs,
    )
    assert rows == [
        {"day": "2026-11-01", "gold": 15, "weak": 700, "held": 250},  # b's model rejected: its batch held
        {"day": "2026-11-02", "gold": None, "weak": None, "held": None},
        {"day": "2026-11-03", "gold": 7, "weak": 90, "held": 0},
        {"day": "2026-11-04", "gold": None, "weak": 120, "held": None},  # before label and held counts: unknown
    ]


def test_daily_costs_newest_first_with_waste_and_avoided_beside_the_billed_total():
    lines = [
        {"day": "2026-11-01", "kind": "compute", "amount": 1.0},
        {"day": "2026-11-01", "kind": "labor", "amount": 0.5},
        {"day": "2026-11-01", "kind": "waste", "amount": 0.25},
        {"day": "2026-11-02", "kind": "avoided", "amount": 4.0},
    ]
    assert daily_costs(lines) == [
        {"day": "2026-11-02", "billed": 0.0, "waste": 0.0, "avoided": 4.0},
        {"day": "2026-11-01", "billed": 1.5, "waste": 0.25, "avoided": 0.0},
    ]


def test_status_names_a_part_it_could_not_read_and_says_shadow():
    state = {
        "current_data": "data-v3", "prod_model": "model-v2", "last_run": None, "store": False,
        "errors": {"model_versions": "RegistryError: git show failed"},
        "serving": {"champion": "model-v2", "champion_weight": 100, "challenger": "model-v3",
                    "challenger_weight": 10, "mode": "shadow"},
    }  # fmt: skip
    lines = state_lines(state)
    assert "  challenger     model-v3 (shadow: scores mirrored traffic, answers none)" in lines
    assert "  could not read model_versions: RegistryError: git show failed" in lines
    assert lines[-1] == "  cost           no cost data yet"
