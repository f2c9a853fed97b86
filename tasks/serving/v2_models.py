"""The Open Inference Protocol v2 (KServe's and Triton's REST protocol) as pydantic models: the routes
(v2_routes.py) declare them, so FastAPI validates requests with them and writes them into the
OpenAPI document, from one declaration.

Structure is checked here (types, required fields); what depends on the served model (the input's
name, FP32, its shape against the model's features, the row limit, the data's length, finite
values) is checked when the tensor is decoded (tensors.py), with messages that name the model's
own input. `data` is a list of any JSON values, as the protocol has it (its element type follows
`datatype`); the model's FP32 is checked on decoding.
"""

from __future__ import annotations

from typing import Any, Optional

from pydantic import BaseModel, Field, StrictInt

Parameters = dict[str, Any]


class RequestInput(BaseModel):
    name: str
    shape: list[StrictInt]
    datatype: str
    parameters: Optional[Parameters] = Field(None, description="binary_data_size: the tensor's bytes after the JSON")
    data: Optional[list[Any]] = Field(None, description="row-major values (flat or nested); absent with binary data")


class RequestOutput(BaseModel):
    name: str
    parameters: Optional[Parameters] = Field(None, description="binary_data: answer this output in binary")


class InferenceRequest(BaseModel):
    """POST /v2/models/{name}/infer: the JSON part of the body (Triton's binary tensor extension puts
    `Inference-Header-Content-Length` bytes of it first, then the raw tensors)."""

    id: Optional[str] = None
    parameters: Optional[Parameters] = Field(None, description="binary_data_output: every output in binary")
    inputs: list[RequestInput] = Field(description="one tensor: the model's input, FP32 [n, n_features]")
    outputs: Optional[list[RequestOutput]] = None


class ResponseOutput(BaseModel):
    name: str
    datatype: str
    shape: list[int]
    parameters: Optional[Parameters] = None
    data: Optional[list[float]] = None


class InferenceResponse(BaseModel):
    model_name: str
    model_version: Optional[str] = None
    id: str
    parameters: Optional[Parameters] = Field(None, description="variant and request_id (for /v1/feedback)")
    outputs: list[ResponseOutput]


class TensorMetadata(BaseModel):
    name: str
    datatype: str
    shape: list[int]


class ModelMetadata(BaseModel):
    name: str
    versions: list[str]
    platform: str
    inputs: list[TensorMetadata]
    outputs: list[TensorMetadata]


class ServerMetadata(BaseModel):
    name: str
    version: str
    extensions: list[str]


class ServerLive(BaseModel):
    live: bool


class ServerReady(BaseModel):
    ready: bool
    serving: str = Field(description="what is served now, e.g. 'champion model-v2, challenger model-v3, split 10%'")
    pending: bool = Field(description="a serving state seen but not (yet) loaded")
    last_error: Optional[str] = None
    self_test: Optional[str] = Field(
        None, description="why the served-path self-test cannot run on this server (None: it ran on every swap)"
    )


class ModelReady(BaseModel):
    name: str
    ready: bool
    versions: list[str]
