"""The /v1 API's pydantic models: /v1/predict's request generated from the dataset plug-in and its raw
contract, /v1/feedback's request, and the answers of /v1/predict, /v1/feedback and /v1/serving.

The plug-in lists its raw columns (RAW_COLUMNS); its landing-batch contract (RAW_CONTRACT, the
same Great Expectations suite that gates every nightly batch) says what each column holds:
`..._in_type_list` (integer or float), `..._in_set` (the allowed values), `..._match_regex`,
`..._between` (a range, so a number). Serving accepts exactly what training accepted, so a
row the pipeline would have quarantined is refused at the door rather than scored on a guess.
A column the contract says nothing about takes any finite JSON scalar. Every column is
required and non-null, unknown columns are refused, floats must be finite.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, create_model

FiniteFloat = Annotated[float, Field(allow_inf_nan=False, strict=False)]
AnyScalar = Union[StrictInt, FiniteFloat, StrictStr, StrictBool]
INT_TYPES = {
    "int8",
    "int16",
    "int32",
    "int64",
    "Int8",
    "Int16",
    "Int32",
    "Int64",
    "int",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
}


def column_specs(raw_columns: list[str], suite: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per column what the contract says: kind (int | float | str | any), values, pattern, range. Pure.

    Expectations that compare with a previous version or tolerate a fraction (`mostly`) describe
    distributions, not single rows, and are left out."""
    specs: dict[str, dict[str, Any]] = {c: {"kind": "any"} for c in raw_columns}
    for e in suite.get("expectations", []):
        kw, etype = e.get("kwargs", {}), e.get("type", "")
        col = kw.get("column")
        if col not in specs or e.get("meta", {}).get("relative_to_previous") or kw.get("mostly", 1) < 1:
            continue
        spec = specs[col]
        if etype == "expect_column_values_to_be_in_type_list":
            types = set(kw.get("type_list") or [])
            spec["kind"] = "int" if types and types <= INT_TYPES else "float" if types else spec["kind"]
        elif etype == "expect_column_values_to_be_of_type":
            spec["kind"] = "int" if kw.get("type_") in INT_TYPES or kw.get("type") in INT_TYPES else "float"
        elif etype == "expect_column_values_to_be_in_set":
            spec["values"] = list(kw["value_set"])
        elif etype == "expect_column_values_to_match_regex":
            spec["pattern"], spec["kind"] = kw["regex"], "str"
        elif etype == "expect_column_value_lengths_to_be_between":  # a text column's bounds
            spec["min_length"], spec["max_length"], spec["kind"] = kw.get("min_value"), kw.get("max_value"), "str"
        elif etype == "expect_column_values_to_be_between":
            spec["ge"], spec["le"] = kw.get("min_value"), kw.get("max_value")
            if spec["kind"] == "any":
                spec["kind"] = "float"
    return specs


def field_type(spec: dict[str, Any]) -> Any:
    """The pydantic type of one column from its spec. Pure."""
    if "values" in spec:
        values = tuple(spec["values"])
        return Literal[values]  # type: ignore[valid-type]
    bounds = {k: spec[k] for k in ("ge", "le") if spec.get(k) is not None}
    if spec["kind"] == "int":
        return Annotated[StrictInt, Field(**bounds)]
    if spec["kind"] == "float":
        return Annotated[float, Field(allow_inf_nan=False, strict=False, **bounds)]
    if spec["kind"] == "str":  # at most what the contract allows (1,024 characters where it says nothing)
        lengths = {"min_length": spec.get("min_length"), "max_length": spec.get("max_length") or 1024}
        lengths = {k: v for k, v in lengths.items() if v is not None}
        return (
            Annotated[StrictStr, Field(pattern=spec["pattern"], **lengths)]
            if "pattern" in spec
            else Annotated[StrictStr, Field(**lengths)]
        )
    return AnyScalar


def row_model(dataset: Any, suite: dict[str, Any]) -> type[BaseModel]:
    """A pydantic model of one raw row of `dataset` (strict: no coercion from strings)."""
    specs = column_specs(list(dataset.RAW_COLUMNS), suite)
    fields = {c: (field_type(s), ...) for c, s in specs.items()}
    return create_model(
        f"{dataset.NAME.capitalize()}Row",
        __config__=ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, protected_namespaces=()),
        **fields,
    )


def predict_request_model(row: type[BaseModel], max_rows: int) -> type[BaseModel]:
    """The /v1/predict body: 1..max_rows rows and an optional sticky key."""
    return create_model(
        "PredictRequest",
        __config__=ConfigDict(extra="forbid", strict=True),
        rows=(
            list[row],
            Field(
                ...,
                min_length=1,
                max_length=max_rows,  # type: ignore[valid-type]
                description=f"raw rows, 1 to {max_rows}",
            ),
        ),
        key=(
            Union[Annotated[StrictStr, Field(min_length=1, max_length=256)], None],
            Field(None, description="sticky split key (the X-Sluice-Key header wins)"),
        ),
    )


class FeedbackRequest(BaseModel):
    """A delayed label for a served request: one label, or one per row of the request."""

    model_config = ConfigDict(extra="forbid", strict=True)
    request_id: Annotated[StrictStr, Field(min_length=1, max_length=128)]
    label: Union[StrictInt, StrictStr, Annotated[list[Union[StrictInt, StrictStr]], Field(min_length=1)]] = Field(
        description="the class of each row, by its index (0..K-1; binary: 0 or 1) or its name (the dataset's "
        "CLASS_NAMES), one label or one per row"
    )
    who: Union[Annotated[StrictStr, Field(min_length=1, max_length=128)], None] = Field(
        None, description="who sends the label (recorded with the gold label it becomes)"
    )


def load_row_model(dataset: Any) -> type[BaseModel]:
    from tasks.contracts.suite import load_suite_spec

    return row_model(dataset, load_suite_spec(dataset.RAW_CONTRACT))


class Prediction(BaseModel):
    score: float = Field(description="binary: P(class 1); K classes: the probability of `label`")
    label: Annotated[int, Field(ge=0)] = Field(description="binary: score >= 0.5; K classes: the most probable class")
    probabilities: Optional[list[float]] = Field(None, description="K > 2 classes: each class's probability")
    model_version: str
    variant: str
    request_id: str


class PredictResponse(BaseModel):
    request_id: str = Field(description="what /v1/feedback takes")
    model_name: str
    model_version: str
    variant: str
    predictions: list[Prediction]


class FeedbackResponse(BaseModel):
    request_id: str
    labels: int


class ServedVariant(BaseModel):
    model_version: str
    sha256: str
    loaded_at: float


class ServingResponse(BaseModel):
    """What is served now (read-only: only the registry's serving state changes it)."""

    model_name: str
    mode: str
    challenger_weight: Union[int, float]
    variants: dict[str, ServedVariant]
    pending: bool
    last_error: Union[str, None] = None
