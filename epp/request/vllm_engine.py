"""The messages of vLLM's gRPC engine API that ``vllmgrpc-parser`` reads (``vllm.grpc.engine``).

Built at import by :func:`epp.request.proto_subset.build` (no ``protoc`` in the build). It
declares the subset of upstream's ``vllm_engine.proto`` (llm-d-router
``pkg/epp/framework/plugins/requesthandling/parsers/vllmgrpc/api/proto``) with the same package,
message names, field numbers and wire types; fields not declared here are kept as unknown fields
by protobuf, so whole upstream messages parse. Declared fields::

    TokenizedInput      { string original_text = 1; repeated uint32 input_ids = 2; }
    SamplingParams      { optional uint32 max_tokens = 8; }
    PlaceholderRange    { uint32 offset = 1; uint32 length = 2; }
    MultimodalInputs    { repeated PlaceholderRange mm_placeholders = 5;
                          repeated string mm_hashes = 6; }
    GenerateRequest     { string request_id = 1;
                          oneof input { TokenizedInput tokenized = 2; string text = 3; }
                          SamplingParams sampling_params = 4; bool stream = 5;
                          MultimodalInputs mm_inputs = 7; }
    GenerateStreamChunk { repeated uint32 token_ids = 1; uint32 prompt_tokens = 2;
                          uint32 completion_tokens = 3; uint32 cached_tokens = 4; }
    GenerateComplete    { repeated uint32 output_ids = 1; string finish_reason = 2;
                          uint32 prompt_tokens = 3; uint32 completion_tokens = 4;
                          uint32 cached_tokens = 5; }
    GenerateResponse    { oneof response { GenerateStreamChunk chunk = 1; GenerateComplete complete = 2; } }
    EmbedRequest        { string request_id = 1; TokenizedInput tokenized = 2; }
    EmbedResponse       { repeated float embedding = 1; uint32 prompt_tokens = 2;
                          uint32 embedding_dim = 3; }
"""

from __future__ import annotations

from typing import Any

from epp.request.proto_subset import BOOL, FLOAT, MESSAGE, OPTIONAL, REPEATED, STRING, UINT32, build

__all__ = [
    "EmbedRequest",
    "EmbedResponse",
    "GenerateComplete",
    "GenerateRequest",
    "GenerateResponse",
    "GenerateStreamChunk",
    "MultimodalInputs",
    "SamplingParams",
    "TokenizedInput",
]

_P = "vllm.grpc.engine."
_U32 = (OPTIONAL, UINT32, "", None, False)
_STR = (OPTIONAL, STRING, "", None, False)

_CLASSES = build(
    "pyepp/vllm_engine_subset",
    {
        _P + "TokenizedInput": (
            [("original_text", 1, *_STR), ("input_ids", 2, REPEATED, UINT32, "", None, False)],
            [],
        ),
        _P + "SamplingParams": ([("max_tokens", 8, OPTIONAL, UINT32, "", 0, True)], ["_max_tokens"]),
        _P + "PlaceholderRange": ([("offset", 1, *_U32), ("length", 2, *_U32)], []),
        _P + "MultimodalInputs": (
            [
                ("mm_placeholders", 5, REPEATED, MESSAGE, _P + "PlaceholderRange", None, False),
                ("mm_hashes", 6, REPEATED, STRING, "", None, False),
            ],
            [],
        ),
        _P + "GenerateRequest": (
            [
                ("request_id", 1, *_STR),
                ("tokenized", 2, OPTIONAL, MESSAGE, _P + "TokenizedInput", 0, False),
                ("text", 3, OPTIONAL, STRING, "", 0, False),
                ("sampling_params", 4, OPTIONAL, MESSAGE, _P + "SamplingParams", None, False),
                ("stream", 5, OPTIONAL, BOOL, "", None, False),
                ("mm_inputs", 7, OPTIONAL, MESSAGE, _P + "MultimodalInputs", None, False),
            ],
            ["input"],
        ),
        _P + "GenerateStreamChunk": (
            [
                ("token_ids", 1, REPEATED, UINT32, "", None, False),
                ("prompt_tokens", 2, *_U32),
                ("completion_tokens", 3, *_U32),
                ("cached_tokens", 4, *_U32),
            ],
            [],
        ),
        _P + "GenerateComplete": (
            [
                ("output_ids", 1, REPEATED, UINT32, "", None, False),
                ("finish_reason", 2, *_STR),
                ("prompt_tokens", 3, *_U32),
                ("completion_tokens", 4, *_U32),
                ("cached_tokens", 5, *_U32),
            ],
            [],
        ),
        _P + "GenerateResponse": (
            [
                ("chunk", 1, OPTIONAL, MESSAGE, _P + "GenerateStreamChunk", 0, False),
                ("complete", 2, OPTIONAL, MESSAGE, _P + "GenerateComplete", 0, False),
            ],
            ["response"],
        ),
        _P + "EmbedRequest": (
            [
                ("request_id", 1, *_STR),
                ("tokenized", 2, OPTIONAL, MESSAGE, _P + "TokenizedInput", None, False),
            ],
            [],
        ),
        _P + "EmbedResponse": (
            [
                ("embedding", 1, REPEATED, FLOAT, "", None, False),
                ("prompt_tokens", 2, *_U32),
                ("embedding_dim", 3, *_U32),
            ],
            [],
        ),
    },
)

TokenizedInput: Any = _CLASSES[_P + "TokenizedInput"]
SamplingParams: Any = _CLASSES[_P + "SamplingParams"]
MultimodalInputs: Any = _CLASSES[_P + "MultimodalInputs"]
GenerateRequest: Any = _CLASSES[_P + "GenerateRequest"]
GenerateStreamChunk: Any = _CLASSES[_P + "GenerateStreamChunk"]
GenerateComplete: Any = _CLASSES[_P + "GenerateComplete"]
GenerateResponse: Any = _CLASSES[_P + "GenerateResponse"]
EmbedRequest: Any = _CLASSES[_P + "EmbedRequest"]
EmbedResponse: Any = _CLASSES[_P + "EmbedResponse"]
