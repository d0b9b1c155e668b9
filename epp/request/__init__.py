"""Request parsing: OpenAI-compatible and passthrough parsers, and the LLMRequest builder."""

from epp.request.build import MODEL_REWRITE_HEADER, build_request
from epp.request.config import PARSERS, ParserConfigError, parser_by_name, validate_parser_section
from epp.request.errors import BodyTooLargeError, InvalidRequestError, RequestError
from epp.request.openai import OpenAIParser, canonical_json
from epp.request.parser import ParsedBody, RequestParser, api_kind_of
from epp.request.passthrough import PassthroughParser

__all__ = [
    "MODEL_REWRITE_HEADER",
    "PARSERS",
    "BodyTooLargeError",
    "InvalidRequestError",
    "OpenAIParser",
    "ParsedBody",
    "ParserConfigError",
    "PassthroughParser",
    "RequestError",
    "RequestParser",
    "api_kind_of",
    "build_request",
    "canonical_json",
    "parser_by_name",
    "validate_parser_section",
]
