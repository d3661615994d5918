"""The two generation endpoints: a request's prompts submitted to the engine loop, their tokens turned into
OpenAI's response objects -- whole, or as server-sent events.

A :class:`Flavor` says an endpoint's input and response shapes; :class:`Generation` does the rest for both:
submission (every prompt or none), the answers' text as the engine's detokenizer settles it, and
cancelling every request of a client that went away (vLLM's ``OpenAIServingCompletion``; SGLang's
``TokenizerManager`` the same). Design notes: ``docs/serving.md#2-the-endpoints``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from abc import ABC, abstractmethod
import time
import uuid
from dataclasses import replace
from typing import Callable

from ..engine import RequestError, SamplingParams
from .loop import EngineLoop, LoopStopped, Overloaded, Stream
from .protocol import APIError, ChatRequest, CompletionRequest, Sampling, engine_error, render_chat
from .logprobs import chat_logprobs, completion_logprobs, shown_text
from .tokens_api import version

DISCONNECT_POLL_S = 0.25  # how often a non-streaming request checks that its client is still there

FINGERPRINT = f"kda-viz-{version()}"  # OpenAI's system_fingerprint: which build answered


class Flavor(ABC):
    """What one endpoint's responses look like (module docstring). ``prompt_ids_on_choice``: where
    ``return_token_ids`` puts the prompt's ids -- on each choice (vLLM's completions) or once on the
    response (vLLM's chat completions, whose choices all share one prompt)."""

    object_name = chunk_object = id_prefix = input_field = ""
    prompt_ids_on_choice = True

    @abstractmethod
    def choice(self, index: int, text: str, reason: str | None, logprobs: dict | None = None) -> dict:
        """One choice of the whole response."""

    @abstractmethod
    def logprobs(self, tokenizer, prompt_ids: list[int], out, echo: bool) -> dict:
        """The choice's logprobs in this endpoint's shape (:mod:`.logprobs`), from the engine's output."""

    @abstractmethod
    def delta(self, index: int, text: str | None, reason: str | None, first: bool) -> dict:
        """One choice of a streamed chunk (``first``: the choice's first chunk)."""


class CompletionFlavor(Flavor):
    object_name = chunk_object = "text_completion"
    id_prefix, input_field = "cmpl-", "prompt"

    def choice(self, index, text, reason, logprobs=None):
        return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": reason}

    def logprobs(self, tokenizer, prompt_ids, out, echo):
        ids, entries = list(out.token_ids), list(out.logprobs or [])
        if echo:  # the prompt's tokens first, each with the logprob the model gave it in context
            ids, entries = list(prompt_ids) + ids, list(out.prompt_logprobs or [None] * len(prompt_ids)) + entries
        return completion_logprobs(tokenizer, ids, entries)

    def delta(self, index, text, reason, first):
        return {"index": index, "text": text or "", "logprobs": None, "finish_reason": reason}


class ChatFlavor(Flavor):
    object_name, chunk_object = "chat.completion", "chat.completion.chunk"
    id_prefix, input_field = "chatcmpl-", "messages"
    prompt_ids_on_choice = False

    def choice(self, index, text, reason, logprobs=None):
        return {"index": index, "message": {"role": "assistant", "content": text}, "logprobs": logprobs,
                "finish_reason": reason}

    def logprobs(self, tokenizer, prompt_ids, out, echo):
        return chat_logprobs(tokenizer, list(out.logprobs or []))

    def delta(self, index, text, reason, first):
        d = {"role": "assistant", "content": text or ""} if first else ({"content": text} if text else {})
        return {"index": index, "delta": d, "logprobs": None, "finish_reason": reason}


class Answer:
    """One choice's answer as it arrives: its token ids and its text so far (the engine's, settled)."""

    def __init__(self):
        self.token_ids: list[int] = []
        self.text = ""


class Generation:
    """One HTTP request's prompts on the engine loop; read it with :meth:`events` (streaming or not)."""

    def __init__(self, loop: EngineLoop, flavor: Flavor, model_name: str, prompts: list, sampling: Sampling,
                 aio: asyncio.AbstractEventLoop | None = None):
        """Checks and submits every prompt (tokenising them: :meth:`start` does it off the event loop);
        ``aio``: the event loop that reads the events (the running one when None)."""
        self.loop, self.flavor, self.model_name, self.sampling = loop, flavor, model_name, sampling
        self._aio = aio or asyncio.get_running_loop()
        self.id = flavor.id_prefix + uuid.uuid4().hex[:24]
        self.created = int(time.time())
        self._queue: asyncio.Queue = asyncio.Queue()
        choices = [p for p in prompts for _ in range(sampling.n)]  # choice i: prompt i // n, its copy i % n
        self.answers = [Answer() for _ in choices]
        self.reasons: list[str | None] = [None] * len(choices)
        self.outputs: list = [None] * len(choices)  # each choice's RequestOutput, once done
        self.streams: list[Stream] = []
        self._submit(choices)

    @property
    def wants_tokens(self) -> bool:
        """Whether each step's tokens must cross to the event loop: a stream sends them. A non-streaming
        request waits for its end only (stop strings are the engine's): the engine's thread does not wake
        the event loop (and take the GIL from the next step) for every token."""
        return bool(self.sampling.stream)

    @classmethod
    async def start(cls, loop: EngineLoop, flavor: Flavor, model_name: str, render: Callable[[], list],
                    sampling: Sampling) -> "Generation":
        """A Generation built on a worker thread: rendering a chat template (``render()`` returns the
        prompts), tokenising and checking a long prompt (the engine's :meth:`~kda_ref.LLM.check_request`,
        which reads only the configuration) never hold up the event loop and the other clients."""
        aio = asyncio.get_running_loop()
        return await asyncio.to_thread(lambda: cls(loop, flavor, model_name, render(), sampling, aio))

    def _submit(self, prompts: list) -> None:
        aio = self._aio
        try:
            params = [self.sampling.params(j) for j in range(self.sampling.n)]
        except RequestError as e:  # the engine's own bounds on a sampling field the parser let through
            raise engine_error(e, self.flavor.input_field, self.sampling.max_tokens_field) from None
        if len(prompts) > self.loop.max_waiting:  # a 503 would tell the client to retry what never fits
            n = self.sampling.n  # the prompts come n times each: name n when it is what multiplies them
            field, what = (("n", f"{len(prompts) // n} prompt(s) x n={n} = {len(prompts)} choices") if n > 1
                           else (self.flavor.input_field, f"{len(prompts)} prompts"))
            raise APIError(f"{field}: {what} in one request, but this server admits at most "
                           f"{self.loop.max_waiting} waiting requests (--max-waiting): it can never be admitted",
                           param=field)
        every = self.wants_tokens
        try:
            # every prompt checked, and room for all, before any runs: a refused request leaves no trace
            checked = [self._check(p, params[i % self.sampling.n]) for i, p in enumerate(prompts)]
            room = self.loop.max_waiting - self.loop.waiting
            if len(prompts) > max(room, 1):  # one prompt: the admission's own check says it
                raise Overloaded(f"max_waiting: {len(prompts)} prompts in one request, room for {max(room, 0)} "
                                 f"more of the {self.loop.max_waiting} waiting requests the server admits")
            for i, (ids, text, sp) in enumerate(checked):
                def put(kind, value, i=i):
                    if every or kind != "tokens":
                        aio.call_soon_threadsafe(self._queue.put_nowait, (i, kind, value))
                self.streams.append(self.loop.admit(ids, text, sp, on_event=put, live_text=every))
        except RequestError as e:
            raise engine_error(e, self.flavor.input_field, self.sampling.max_tokens_field) from None
        except Overloaded as e:
            self.cancel()
            raise APIError(str(e), status=503, type="server_error", code="overloaded") from None
        except LoopStopped as e:  # frozen (worth a retry: it may answer again), stopping, or its engine died
            self.cancel()
            raise self._failure(str(e), stopping=True) from None

    def _check(self, prompt, params: SamplingParams):
        """The loop's check of one prompt; a chat that set no ``max_tokens`` gets the rest of the context its
        prompt leaves (:meth:`~kda_ref.engine.request_check.RequestChecker.longest_output`)."""
        if self.sampling.max_tokens is not None:
            return self.loop.check(prompt, params)
        ids, text, _ = self.loop.check(prompt, params)  # params carries max_tokens 1: the prompt alone checked
        filled = replace(params, max_tokens=self.loop.checker.longest_output(len(ids)))
        return ids, text, self.loop.check(ids, filled)[2]

    def cancel(self) -> None:
        """Abort every request still running (the client went away)."""
        for s, reason in zip(self.streams, self.reasons):
            if reason is None:
                s.cancel()

    async def events(self, disconnected=None):
        """``(index, text delta, finish reason or None)`` per change, until every choice ended. A failed
        request raises :class:`APIError` (500). ``disconnected``: an async callable polled while waiting
        (a non-streaming client that left: every request is cancelled and the iteration ends)."""
        open_, next_check = len(self.streams), time.monotonic() + DISCONNECT_POLL_S
        while open_:
            if disconnected is None:  # a stream: a client that left fails the next send (no polling, no timer)
                i, kind, value = await self._queue.get()
            else:
                try:
                    i, kind, value = await asyncio.wait_for(self._queue.get(), DISCONNECT_POLL_S)
                except asyncio.TimeoutError:
                    kind = None
            if disconnected is not None and time.monotonic() >= next_check:  # by the clock: tokens may arrive
                next_check = time.monotonic() + DISCONNECT_POLL_S  # every few ms and never let a wait time out
                if await disconnected():
                    self.cancel()
                    return
            if kind is None:
                continue
            out = self._apply(i, kind, value)
            if out is not None:
                yield out
            open_ -= kind != "tokens"

    def _apply(self, i: int, kind: str, value):
        a = self.answers[i]
        if kind == "tokens":  # a TokenDelta: the step's ids and the text they settled
            a.token_ids += value
            a.text += value.text
            return (i, value.text, None) if value.text else None
        if kind == "error":
            self.cancel()
            raise self._failure(value)
        final = value.text or ""  # done: what did not cross one step at a time (wants_tokens) comes now
        rest, a.text, a.token_ids = final[len(a.text):], final, list(value.token_ids)
        self.reasons[i], self.outputs[i] = value.finish_reason, value
        return i, rest, value.finish_reason

    def _failure(self, why: str, stopping: bool = False) -> APIError:
        """A request refused or ended by an error, answered by what happened to the engine: unresponsive
        (frozen, 503 with Retry-After), exited or died (503), stopping (SIGTERM past its timeout, 503), or
        the request alone failed (500). ``stopping``: the loop refused it (``LoopStopped``)."""
        loop = self.loop
        if not loop.responsive:
            return APIError(why, status=503, type="server_error", code="engine_unresponsive")
        if loop.error is not None:
            return APIError(why, status=503, type="server_error", code="engine_dead")
        if stopping or not loop.accepting:
            return APIError(why if stopping else f"the server is shutting down: {why}", status=503,
                            type="server_error", code="shutting_down")
        return APIError(f"the request failed in the engine: {why}", status=500, type="server_error")

    def usage(self) -> dict:
        prompt = sum(s.prompt_tokens for s in self.streams[::self.sampling.n])  # each prompt once, as vLLM counts
        completion = sum(len(a.token_ids) for a in self.answers)
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    def _head(self, obj: str) -> dict:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model_name,
                "system_fingerprint": FINGERPRINT}

    def _token_ids(self, choice: dict, i: int) -> dict:
        """vLLM's ``return_token_ids`` extension: the output's ids on the choice (on a stream's last chunk
        of that choice: vLLM sends each chunk's own ids instead), the prompt's where the flavor says."""
        if self.sampling.return_token_ids:
            if self.flavor.prompt_ids_on_choice:
                choice["prompt_token_ids"] = list(self.streams[i].prompt_ids)
            choice["token_ids"] = list(self.answers[i].token_ids)
        return choice

    def _prompt_ids(self, obj: dict) -> dict:
        if self.sampling.return_token_ids and not self.flavor.prompt_ids_on_choice:
            obj["prompt_token_ids"] = list(self.streams[0].prompt_ids)
        return obj

    async def response(self, disconnected) -> dict | None:
        """The whole response object (None if the client left first)."""
        async for _ in self.events(disconnected):
            pass
        if any(r is None for r in self.reasons):
            return None
        choices = [self._token_ids(self._choice(i), i) for i in range(len(self.answers))]
        return self._prompt_ids({**self._head(self.flavor.object_name), "choices": choices, "usage": self.usage()})

    def _choice(self, i: int) -> dict:
        """Choice ``i`` of the whole response: its text (after the prompt's with ``echo``) and logprobs."""
        s, out, tok = self.sampling, self.outputs[i], self.loop.checker.tokenizer
        prompt_ids = list(self.streams[i].prompt_ids)
        text = self.answers[i].text
        if s.echo:  # the prompt as its tokens show it (logprobs' tokens and offsets agree with it)
            text = (shown_text(tok, prompt_ids) if tok is not None else "") + text
        logprobs = None
        if s.logprobs is not None and out is not None and tok is not None:
            logprobs = self.flavor.logprobs(tok, prompt_ids, out, s.echo)
        return self.flavor.choice(i, text, self.reasons[i], logprobs)

    async def sse(self):
        """The response as server-sent events (``data: {chunk}``, then ``data: [DONE]``); a client that
        disconnects cancels the iteration, and with it every request still running."""
        first = [True] * len(self.streams)
        try:
            async for i, delta, reason in self.events():
                chunk = self.flavor.delta(i, delta, reason, first[i])
                obj = {**self._head(self.flavor.chunk_object), "choices": [chunk]}
                if first[i]:
                    self._prompt_ids(obj)
                first[i] = False
                if reason is not None:
                    self._token_ids(chunk, i)
                if self.sampling.continuous_usage:  # vLLM's continuous_usage_stats: the usage so far, every chunk
                    obj["usage"] = self.usage()
                yield _sse(obj)
            if self.sampling.include_usage:
                yield _sse({**self._head(self.flavor.chunk_object), "choices": [], "usage": self.usage()})
        except APIError as e:
            yield _sse(e.body())
        except Exception as err:  # noqa: BLE001 -- a bug mid-stream: logged, and the stream still ends properly
            logging.getLogger("uvicorn.error").exception("internal error in a stream (%s)", self.id)
            yield _sse(APIError(f"internal error: {type(err).__name__}", status=500, type="server_error").body())
        finally:
            self.cancel()
        yield "data: [DONE]\n\n"


def _sse(obj: dict) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False, separators=(',', ':'))}\n\n"


def prompts_of(req: CompletionRequest | ChatRequest, template) -> list:
    """The prompts to submit: a completion's as given, a chat's conversation through the chat template."""
    if isinstance(req, CompletionRequest):
        return req.prompts
    return [render_chat(template, req.messages)]
