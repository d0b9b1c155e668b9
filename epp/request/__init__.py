"""Request parsing: the parsers (OpenAI, Anthropic, vLLM HTTP/gRPC, SGLang, Vertex AI, passthrough),
the parser chain of ``requestHandler.parsers`` and the LLMRequest builder. The parser plugin types
and the section validators are in :mod:`epp.request.plugins`."""

from epp.request.build import MODEL_REWRITE_HEADER, build_request
from epp.request.chain import ParserChain
from epp.request.config import PARSERS, ParserConfigError, parser_by_name, validate_parser_section
from epp.request.errors import BodyTooLargeError, InvalidRequestError, RequestError
from epp.request.openai import OpenAIParser, canonical_json
from epp.request.parser import ParsedBody, ParserPlugin, RequestParser, UsageReader, api_kind_of
from epp.request.passthrough import PassthroughParser

__all__ = [
    "MODEL_REWRITE_HEADER",
    "PARSERS",
    "BodyTooLargeError",
    "InvalidRequestError",
    "OpenAIParser",
    "ParsedBody",
    "ParserChain",
    "ParserConfigError",
    "ParserPlugin",
    "PassthroughParser",
    "RequestError",
    "RequestParser",
    "UsageReader",
    "api_kind_of",
    "build_request",
    "canonical_json",
    "parser_by_name",
    "validate_parser_section",
]
