"""Chat prompt rendering shared by ``epp-sim`` (pyepp's simulated vLLM) and the picker.

:func:`render_chat` is ``epp-sim``'s fixed template. :class:`ChatTemplate` is a model's own Jinja chat
template (``chat_template.jinja`` or ``tokenizer_config.json``'s ``chat_template`` beside a
``tokenizer.json``), rendered as transformers' ``apply_chat_template`` renders it for vLLM: a sandboxed
Jinja environment with ``trim_blocks`` and ``lstrip_blocks``, the ``loopcontrols`` extension, a ``tojson``
filter (``json.dumps``, non-ASCII kept), ``raise_exception`` and ``strftime_now``; variables
``messages``, ``add_generation_prompt=True`` and the special tokens named in ``tokenizer_config.json``
(``bos_token``, ``eos_token``, ...), and the request's own template inputs as vLLM passes them
(:func:`chat_args`): ``tools`` (each as vLLM's ``ChatCompletionToolsParam.model_dump()`` gives it:
``type``, then ``function`` with ``name``, ``description`` and ``parameters``, null when absent, then any
other keys), ``documents``, ``add_generation_prompt`` (default true), ``continue_final_message`` (the
prompt then ends with the last message's text, as transformers cuts it) and ``chat_template_kwargs``
(extra template variables; they cannot replace the ones above). A message whose ``content`` is a list of
parts gets its text parts
joined by newlines (vLLM's "string" content format; templates that iterate over content parts, which
vLLM detects and feeds the list, are not told apart). ``epp-sim --tokenizer DIR`` renders chat requests
with the directory's template when it has one, and so does the picker's in-process tokenizer
(``precise-prefix-cache-*`` with ``indexerConfig.tokenizersPoolConfig``), so both compute the same ids.
``jinja2`` (in ``pyepp[tokenizer]``) is imported only when a template is loaded.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_ARGS",
    "ChatArgs",
    "ChatTemplate",
    "ChatTemplateError",
    "chat_args",
    "content_text",
    "load_chat_template",
    "render_chat",
]

_RESERVED = frozenset({"messages", "tools", "documents", "add_generation_prompt", "continue_final_message"})
_SPECIAL = ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token")


class ChatTemplateError(ValueError):
    """A chat template could not be loaded or rendered (the message says why)."""


@dataclass(frozen=True, slots=True)
class ChatArgs:
    """A chat request's inputs to its chat template besides the messages (see :func:`chat_args`)."""

    tools: list[dict[str, Any]] | None = None
    documents: list[Any] | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    kwargs: Mapping[str, Any] = field(default_factory=dict)


DEFAULT_ARGS = ChatArgs()


def _tool(tool: Any, i: int) -> dict[str, Any]:
    """One ``tools`` entry as vLLM hands it to the template (``ChatCompletionToolsParam.model_dump()``)."""
    if not isinstance(tool, Mapping) or tool.get("type", "function") != "function":
        raise ChatTemplateError(f"tools[{i}]: expected an object with type 'function'")
    function = tool.get("function")
    if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
        raise ChatTemplateError(f"tools[{i}].function: expected an object with a string 'name'")
    description, parameters = function.get("description"), function.get("parameters")
    if description is not None and not isinstance(description, str):
        raise ChatTemplateError(f"tools[{i}].function.description: expected a string")
    if parameters is not None and not isinstance(parameters, Mapping):
        raise ChatTemplateError(f"tools[{i}].function.parameters: expected an object")
    named = ("name", "description", "parameters")
    dumped: dict[str, Any] = {"name": function["name"], "description": description, "parameters": parameters}
    dumped.update((k, v) for k, v in function.items() if k not in named)
    out: dict[str, Any] = {"type": "function", "function": dumped}
    out.update((k, v) for k, v in tool.items() if k not in ("type", "function"))
    return out


def chat_args(body: Mapping[str, Any]) -> ChatArgs:
    """The template inputs of a parsed chat request body, checked as vLLM checks them (ChatTemplateError
    names the field: vLLM answers such a request 400)."""
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise ChatTemplateError("tools: expected a list")
    documents = body.get("documents")
    if documents is not None and not isinstance(documents, list):
        raise ChatTemplateError("documents: expected a list")
    generation, cont = body.get("add_generation_prompt", True), body.get("continue_final_message", False)
    if not isinstance(generation, bool) or not isinstance(cont, bool):
        raise ChatTemplateError("add_generation_prompt / continue_final_message: expected booleans")
    if generation and cont:
        raise ChatTemplateError("continue_final_message and add_generation_prompt cannot both be true")
    kwargs = body.get("chat_template_kwargs") or {}
    if not isinstance(kwargs, Mapping):
        raise ChatTemplateError("chat_template_kwargs: expected an object")
    if tools is None and documents is None and generation and not cont and not kwargs:
        return DEFAULT_ARGS
    return ChatArgs(
        tools=None if tools is None else [_tool(t, i) for i, t in enumerate(tools)],
        documents=documents,
        add_generation_prompt=generation,
        continue_final_message=cont,
        kwargs={k: v for k, v in kwargs.items() if isinstance(k, str) and k not in _RESERVED},
    )


def content_text(content: Any) -> str:
    """A message's ``content``: a string as is; a list of parts: their ``text`` parts joined by newlines."""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        texts = [p["text"] for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str)]
        return "\n".join(texts)
    return ""


def render_chat(messages: Iterable[Mapping[str, Any]]) -> str:
    """Render chat messages with a fixed template ``<|role|>\\ncontent\\n`` ending ``<|assistant|>``."""
    out = [f"<|{m.get('role', 'user')}|>\n{content_text(m.get('content'))}\n" for m in messages]
    out.append("<|assistant|>\n")
    return "".join(out)


def _tojson(value: Any, indent: int | None = None, separators: Any = None, sort_keys: bool = False) -> str:
    return json.dumps(value, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise(message: str) -> None:
    raise ChatTemplateError(f"the chat template refused the messages: {message}")


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


class ChatTemplate:
    """A model's Jinja chat template (see the module docstring)."""

    def __init__(self, source: str, special: Mapping[str, str] | None = None) -> None:
        try:
            from jinja2 import TemplateError
            from jinja2.ext import loopcontrols
            from jinja2.sandbox import ImmutableSandboxedEnvironment
        except ImportError as exc:
            raise ChatTemplateError(
                "rendering the model's chat template needs the 'jinja2' package (pip install "
                "'pyepp[tokenizer]'; the container image: build it with --build-arg EPP_EXTRAS=tokenizer)"
            ) from exc
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise
        env.globals["strftime_now"] = _strftime_now
        self._errors: tuple[type[Exception], ...] = (TemplateError, TypeError, ValueError)
        try:
            self._template = env.from_string(source)
        except TemplateError as exc:
            raise ChatTemplateError(f"the chat template does not parse: {exc}") from None
        self.special = dict(special or {})

    def render(self, messages: Iterable[Mapping[str, Any]], args: ChatArgs = DEFAULT_ARGS) -> str:
        """The prompt text of ``messages`` (ChatTemplateError: refused)."""
        msgs = [{**m, "content": content_text(m.get("content"))} for m in messages]
        variables = {**self.special, **args.kwargs}
        try:
            text = str(
                self._template.render(
                    messages=msgs,
                    tools=args.tools,
                    documents=args.documents,
                    add_generation_prompt=args.add_generation_prompt,
                    **variables,
                )
            )
        except ChatTemplateError:
            raise
        except self._errors as exc:
            raise ChatTemplateError(f"the chat template failed: {exc}") from None
        if args.continue_final_message:  # transformers: cut after the last message's (stripped) text
            final = msgs[-1]["content"].strip() if msgs else ""
            if final not in text:
                raise ChatTemplateError("continue_final_message: the final message is not in the prompt")
            text = text[: text.rindex(final) + len(final)]
        return text


def _token_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        return str(value["content"])  # an AddedToken serialised as {"content": ...}
    return None


def load_chat_template(directory: Path) -> ChatTemplate | None:
    """The chat template beside a ``tokenizer.json`` (None: the directory has none).

    ``chat_template.jinja`` wins over ``tokenizer_config.json``'s ``chat_template`` (a string, or a list
    of ``{name, template}`` of which ``default`` is used), as in transformers."""
    try:
        config = json.loads((directory / "tokenizer_config.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        config = {}
    except (OSError, ValueError) as exc:
        raise ChatTemplateError(f"cannot read {directory / 'tokenizer_config.json'}: {exc}") from None
    if not isinstance(config, Mapping):
        config = {}
    special = {k: t for k in _SPECIAL if (t := _token_text(config.get(k))) is not None}
    jinja = directory / "chat_template.jinja"
    if jinja.is_file():
        return ChatTemplate(jinja.read_text(encoding="utf-8"), special)
    source = config.get("chat_template")
    if isinstance(source, list):
        named = {t.get("name"): t.get("template") for t in source if isinstance(t, Mapping)}
        source = named.get("default")
    if not isinstance(source, str) or not source:
        return None
    return ChatTemplate(source, special)
