"""Chat templates: a conversation (``[{"role", "content"}]``) as the one prompt text the model continues.

Two templates, one interface (:meth:`render`): :class:`ByteChatTemplate`, this project's ChatML-style
template for the byte-level tokenizer (the built-in models and the trained demos), and
:class:`JinjaChatTemplate`, a checkpoint folder's own ``chat_template`` rendered in Jinja's sandbox as
``transformers``' ``apply_chat_template`` renders it (vLLM: ``vllm/entrypoints/chat_utils.py``; SGLang:
``TokenizerManager``).

Design notes (the template, rendered): ``docs/serving.md#2-the-endpoints``.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from pathlib import Path

from ..tokenizer import BYTE_MARKER, MAX_TOKENIZER_CONFIG_BYTES, TOKENIZER_CONFIG, TokenizerFileError
from ..utils.files import read_regular


class ChatTemplate(ABC):
    """Turns messages into prompt text; ``name`` says which template it is (``/v1/models`` reports it)."""

    name = "chat"

    @abstractmethod
    def render(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        """The prompt text for ``messages``, with the assistant's turn opened unless ``add_generation_prompt``
        is False (``/tokenize`` may ask for the conversation alone, as ``apply_chat_template`` renders it)."""


class ByteChatTemplate(ChatTemplate):
    """The byte tokenizer's template (module docstring)."""

    name = "kda-viz-chatml"

    def render(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        turns = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
        return turns + ("<|im_start|>assistant\n" if add_generation_prompt else "")


class JinjaChatTemplate(ChatTemplate):
    """A checkpoint's own Jinja template (module docstring). A template that fails to render is a
    ``ValueError`` with Jinja's message (the server answers 400: the conversation does not fit it)."""

    name = "checkpoint"

    def __init__(self, source: str, bos_token: str = "", eos_token: str = ""):
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals.update(raise_exception=_raise, strftime_now=_strftime_now)  # as apply_chat_template offers
        self._template = env.from_string(source)
        self.bos_token, self.eos_token = bos_token, eos_token

    def render(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        try:
            return self._template.render(messages=messages, add_generation_prompt=add_generation_prompt,
                                         bos_token=self.bos_token, eos_token=self.eos_token)
        except Exception as e:  # noqa: BLE001 -- a template is the checkpoint's code: any failure is the request's 400
            raise ValueError(f"messages: the checkpoint's chat template refused them ({type(e).__name__}: "
                             f"{str(e)[:200]!r})") from None


def _raise(message: str):
    """``raise_exception(msg)`` inside a template: the template's own refusal, with its words."""
    from jinja2 import TemplateError

    raise TemplateError(message)


def _strftime_now(fmt: str) -> str:
    import time

    return time.strftime(fmt)


def _token_text(v) -> str:
    """``bos_token`` / ``eos_token`` as ``tokenizer_config.json`` stores them (a string or ``{"content"}``)."""
    if isinstance(v, dict):
        v = v.get("content")
    return v if isinstance(v, str) else ""


def load_chat_template(folder: str | Path | None) -> ChatTemplate:
    """The template for a model: its folder's ``chat_template`` where it has one (a string, or
    Hugging Face's list of ``{"name", "template"}`` -- the one named ``default``), else
    :class:`ByteChatTemplate`."""
    if folder is None:
        return ByteChatTemplate()
    path = Path(folder) / TOKENIZER_CONFIG
    if not path.is_file():
        return ByteChatTemplate()
    cfg = json.loads(read_regular(path, MAX_TOKENIZER_CONFIG_BYTES, TokenizerFileError, TOKENIZER_CONFIG))
    if isinstance(cfg, dict) and cfg.get(BYTE_MARKER) == "byte":  # this project's byte tokenizer: its template
        return ByteChatTemplate()  # in Python (the folder's copy, for transformers, renders the same)
    source = cfg.get("chat_template") if isinstance(cfg, dict) else None
    if isinstance(source, list):  # [{"name": "default", "template": ...}, {"name": "tool_use", ...}]
        source = next((t.get("template") for t in source if isinstance(t, dict) and t.get("name") == "default"), None)
    if not isinstance(source, str) or not source:
        return ByteChatTemplate()
    return JinjaChatTemplate(source, _token_text(cfg.get("bos_token")), _token_text(cfg.get("eos_token")))
