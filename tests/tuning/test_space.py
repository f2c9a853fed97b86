"""The search space and the first task's refusals: each a clear error naming what is wrong."""

import pytest

from tasks.core.context import StepContext
from tasks.core.params import ParamsError, parse_params
from tasks.core.tuning_config import ChoiceSpec, RangeSpec, check_space, tunable
from tasks.tuning.space import decode, suggest
from tests.conftest import params_dict
from tests.tuning.conftest import tiny_overrides


def test_an_unknown_name_is_refused_by_the_study_not_when_params_are_read(params):
    """A name neither train nor the model plug-in knows may be another plug-in's parameter (the default
    space names the MLP's `hidden`): reading params.yaml lets it through, tune_plan's check refuses it."""
    raw = params_dict()
    raw["tuning"]["space"] = {"learning_rate": {"low": 0.001, "high": 0.01}}
    space = parse_params(raw).tuning.space
    with pytest.raises(
        ValueError, match=r"unknown parameter 'learning_rate'; tunable: \['batch_size', 'epochs', 'hidden'"
    ):
        check_space(space, params.train)


@pytest.mark.parametrize(
    "space, says",
    [
        ({"lr": {"low": 0.01, "high": 0.001}}, "tuning.space.lr.range: Value error, empty or inverted range"),
        ({"lr": {"low": 0.01, "high": 0.01}}, "empty or inverted range: low 0.01 must be below high 0.01"),
        ({"lr": {"low": 0.0, "high": 0.01, "log": True}}, "a log range must stay above 0"),
        ({"hidden": {"choices": []}}, "tuning.space.hidden.choices.choices"),
        ({}, "tuning.space: Dictionary should have at least 1 item"),
    ],
)
def test_bad_space_is_refused_naming_the_key(space, says):
    raw = params_dict()
    raw["tuning"]["space"] = space  # the whole space, not merged into the file's
    with pytest.raises(ParamsError) as err:
        parse_params(raw)
    assert says in str(err.value)
    assert len(str(err.value).splitlines()) == 1  # one error, not one per union member


@pytest.mark.parametrize(
    "space, says",
    [
        ({"lr": RangeSpec(low=0.01, high=2.0)}, "lr: 2.0 is not a valid train.lr"),
        ({"epochs": RangeSpec(low=1.5, high=4)}, "epochs: an integer range"),
        ({"hidden": RangeSpec(low=1, high=4)}, "hidden: give `choices`"),
        ({"batch_size": ChoiceSpec(choices=(0, 64))}, "batch_size: 0 is not a valid train.batch_size"),
    ],
)
def test_values_train_would_refuse_are_caught(space, says, params):
    with pytest.raises(ValueError, match=None) as err:
        check_space(space, params.train)
    assert says in str(err.value)


def test_suggest_and_decode_round_trip(params):
    import optuna

    space = params.tuning.space
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    trial = study.ask()
    values = suggest(trial, space, tunable(params.train))
    assert set(values) == set(space) and isinstance(values["hidden"], list)
    assert decode(trial.params, space) == values
    assert params.train.replace(**values)  # a valid train section


def test_parallelism_above_the_dag_bound_is_refused():
    with pytest.raises(ParamsError, match="tuning.parallelism: Value error, must be at most tuning.max_parallelism=4"):
        parse_params(params_dict({"tuning": {"parallelism": 5}}))


def test_ceiling_below_one_trial_is_refused_in_the_first_task(tuning_home):
    from tasks.tune_plan import tune_plan

    ctx = StepContext.create("plan-low", tuning_home, tiny_overrides(cost_ceiling=1e-9))
    with pytest.raises(ParamsError, match=r"tuning cost_ceiling 1e-09 USD is below one trial's cost \(0\.0000"):
        tune_plan(ctx, data_version="data-v1", study_name="low")
    ctx = StepContext.create("plan-bad", tuning_home, tiny_overrides())
    with pytest.raises(ParamsError, match="study name 'bad name!'"):
        tune_plan(ctx, data_version="data-v1", study_name="bad name!")
    with pytest.raises(Exception, match="data-v9"):
        tune_plan(ctx, data_version="data-v9", study_name="ok")
