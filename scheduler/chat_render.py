"""Chat prompt rendering shared by ``epp-sim`` (pyepp's simulated vLLM) and the picker.

:func:`render_chat` is ``epp-sim``'s fixed template. :class:`ChatTemplate` is a model's own Jinja chat
template (``chat_template.jinja`` or ``tokenizer_config.json``'s ``chat_template`` beside a
``tokenizer.json``), rendered as transformers' ``apply_chat_template`` renders it for vLLM: a sandboxed
Jinja environment with ``trim_blocks`` and ``lstrip_blocks``, the ``loopcontrols`` extension, a ``tojson``
filter (``json.dumps``, non-ASCII kept), ``raise_exception`` and ``strftime_now``; variables
``messages``, ``add_generation_prompt=True`` and the special tokens named in ``tokenizer_config.json``
(``bos_token``, ``eos_token``, ...). A message whose ``content`` is a list of parts gets its text parts
joined by newlines (vLLM's "string" content format; templates that iterate over content parts, which
vLLM detects and feeds the list, are not told apart). ``epp-sim --tokenizer DIR`` renders chat requests
with the directory's template when it has one, and so does the picker's in-process tokenizer
(``precise-prefix-cache-*`` with ``indexerConfig.tokenizersPoolConfig``), so both compute the same ids.
``jinja2`` (in ``pyepp[tokenizer]``) is imported only when a template is loaded.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

__all__ = ["ChatTemplate", "ChatTemplateError", "content_text", "load_chat_template", "render_chat"]

_SPECIAL = ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token")


class ChatTemplateError(ValueError):
    """A chat template could not be loaded or rendered (the message says why)."""


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

    def render(self, messages: Iterable[Mapping[str, Any]]) -> str:
        """The prompt text of ``messages`` with the generation prompt (ChatTemplateError: refused)."""
        msgs = [{**m, "content": content_text(m.get("content"))} for m in messages]
        try:
            return str(self._template.render(messages=msgs, add_generation_prompt=True, **self.special))
        except ChatTemplateError:
            raise
        except self._errors as exc:
            raise ChatTemplateError(f"the chat template failed: {exc}") from None


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
