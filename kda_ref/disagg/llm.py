"""The in-process mode of :class:`~kda_ref.disagg.base.DisaggregatedLLM` (``transfer="local"``):
:class:`LocalDisaggregation`, every prefill and decode engine in this process.

Article concepts ``pd.state_transfer`` (``docs/article.md#s4-4``, ``#s5-6``). Every engine shares the
model's weights and :meth:`LocalDisaggregation.step` advances them all; the bytes move through the
in-process :class:`~kda_ref.disagg.transfer.LocalTransferEngine`. SGLang splits the same way with the
prefill pushing (``disaggregation/prefill.py``, ``disaggregation/decode.py``, Mooncake), as vLLM 0.32.0's
``MooncakeConnector`` and ``NixlPushConnector`` do; its default ``NixlConnector`` has the decode pull.
Design notes: ``docs/disaggregation.md#what-is-built-2026-12-01`` (``base.py``, ``llm.py``) and
``docs/disaggregation.md#the-entry-point-disaggregatedllm``.
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from ..engine import LLM, RequestOutput, SamplingParams
from ..trace import Tracer
from .base import DisaggregatedLLM, first_token_reason, prefill_params
from .handoff import layout
from .install import checked, handoff_info, install_or_recompute
from .stream import Outbound, pack
from .transfer import LocalTransferEngine, Region, TransferStatus

__all__ = ["DisaggregatedLLM", "LocalDisaggregation"]  # DisaggregatedLLM re-exported: its long-standing path

HANDOFF_RECORDS = 4096  # handoffs kept in LocalDisaggregation.handoffs, newest last (as send_log)


@dataclass
class _Flow:
    """One request between its prefill engine and its decode engine (local mode)."""

    prefill: int
    decode: int
    out: Outbound
    recv: torch.Tensor | None  # the decode side's receive buffer, registered as recv{ours} (until checked)
    failed: str | None = None  # a transfer of this handoff did not complete


class LocalDisaggregation(DisaggregatedLLM):
    """Every prefill and decode engine in this process, sharing the model's weights; the arguments are
    :class:`~kda_ref.disagg.base.DisaggregatedLLM`'s. The first prefill engine checks every request
    (``LLM.check_request``, the peak memory included)."""

    transfer = "local"

    def _tracer_of(self, name: str):
        """The tracer engine ``name`` emits to (:meth:`kda_ref.trace.Tracer.part`: with a
        :class:`~kda_ref.trace.TraceRecorder`, its part of it, one engine's trace)."""
        return self.tracer.part(name) if isinstance(self.tracer, Tracer) else self.tracer  # LLM checks the rest

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        num_prefill, num_decode = self.num_prefill, self.num_decode
        # every engine argument checked here, before the other engines are built
        first = LLM(self.model, config=self.engine_config, tracer=self._tracer_of("prefill0"),
                    tokenizer=self.tokenizer)
        self.checker = first
        if not isinstance(self.model, (str, Path)):
            self.model = first.model  # the built model the engines share (a folder is kept as its path)
        rest = replace(self.engine_config, seed=0)  # the other engines share the weights; sampling seeds from 0
        more = lambda name: LLM(first.model, config=rest, tracer=self._tracer_of(name),  # noqa: E731
                                tokenizer=self.tokenizer)
        self.prefills = [first] + [more(f"prefill{i}") for i in range(1, num_prefill)]
        self.decodes = [more(f"decode{j}") for j in range(num_decode)]
        self.prefill, self.decode = self.prefills[0], self.decodes[0]  # the first of each
        peers: dict[str, LocalTransferEngine] = {}
        self.prefill_tes = [LocalTransferEngine(f"prefill{i}", peers) for i in range(num_prefill)]
        self.decode_tes = [LocalTransferEngine(f"decode{j}", peers) for j in range(num_decode)]
        self.prefill_te, self.decode_te = self.prefill_tes[0], self.decode_tes[0]
        for i, llm in enumerate(self.prefills):
            llm.add_finish_listener(self._finished_on(i))
        self._ready: list[tuple] = []  # (prefill engine, request, ours, last pieces, manifest) of finished prefills
        self._waiting_install: list[tuple] = []  # received handoffs whose decode engine has no room yet
        self._flows: dict[int, _Flow] = {}  # ours -> its handoff in flight
        self._params: dict[int, SamplingParams] = {}  # ours -> the caller's sampling parameters
        self._ours_of_prefill: dict[tuple[int, int], int] = {}  # (prefill engine, its request id) -> ours
        self._decode_id: dict[tuple[int, int], int] = {}  # (decode engine, its request id) -> ours
        # every send, newest last: request, KV rows, bytes by kind, whether it was the last one (the page's table)
        self.send_log: collections.deque[dict] = collections.deque(maxlen=4096)
        # request -> its handoff: the manifest and, on each side, the slot and pages that held it (the
        # latest HANDOFF_RECORDS requests)
        self.handoffs: collections.OrderedDict[int, dict] = collections.OrderedDict()

    def _submit(self, ours, prompt, ids, sp, i, j) -> None:
        if i is None:
            self._decode_id[(j, self.decodes[j].add_request(prompt, sp))] = ours
        else:
            pid = self.prefills[i].add_request(prompt, prefill_params(sp))
            self._ours_of_prefill[(i, pid)] = ours
            recv = torch.zeros(sum(n for *_, n in layout(self.decodes[j].pool, len(ids))), dtype=torch.uint8)
            self.decode_tes[j].register(f"recv{ours}", recv)  # sized now, filled as the prefill runs
            self._flows[ours] = _Flow(i, j, Outbound(len(ids)), recv)
        self._params[ours] = sp

    def has_unfinished(self) -> bool:
        return bool(self._waiting_install) or any(e.has_unfinished() for e in (*self.prefills, *self.decodes))

    def step(self) -> list[RequestOutput]:
        """One step of every prefill engine with work, the KV its chunks finished sent, the handoffs of
        the prefills that finished, one step of every decode engine with work; the requests that finished."""
        done = []
        for i, llm in enumerate(self.prefills):
            if llm.has_unfinished():
                done += self._settled_on_prefill(i, llm.step())
                self._stream_chunks(i)
        while self._ready:
            i, req, ours, pieces, man = self._ready.pop(0)
            self.router.handed_off(i)
            self._handoff(ours, req, pieces, man)
        self._install_waiting()
        for j, llm in enumerate(self.decodes):
            if not llm.has_unfinished():
                continue
            for out in llm.step():
                out.req_id = self._decode_id.pop((j, out.req_id))
                self._params.pop(out.req_id, None)
                ok = out.finish_reason != "error"  # a failed request donated no end state
                self.router.finished(j, out.prompt_token_ids + out.token_ids if ok else None)
                done.append(out)
        return done

    # ---- local mode: prefill side --------------------------------------------------------------------
    def _finished_on(self, i: int):
        def on_finish(req) -> None:  # called while the request still holds its slot and pages
            ours = self._ours_of_prefill[(i, req.req_id)]
            eos = self.prefills[i].config.eos_token_ids
            sp = self._params[ours]
            if first_token_reason(sp, req.finish_reason, req.output_token_ids[-1], eos) is None:  # hand off
                del self._ours_of_prefill[(i, req.req_id)]
                ready = (i, req, ours, *self._flows[ours].out.final(self.prefills[i].pool, req))
                self._ready.append(ready)
                self.handoffs[ours] = {"manifest": ready[-1], "prefill_slot": req.slot, "prefill_pages": list(req.pages)}
                while len(self.handoffs) > HANDOFF_RECORDS:
                    self.handoffs.popitem(last=False)
        return on_finish

    def _settled_on_prefill(self, i: int, outs: list[RequestOutput]) -> list[RequestOutput]:
        """Requests finished by prefill engine ``i`` without a handoff: the first token ends them under
        the caller's parameters (a stop token, ``max_tokens=1``), or their prefill failed."""
        done = []
        eos = self.prefills[i].config.eos_token_ids
        for out in outs:
            ours = self._ours_of_prefill.pop((i, out.req_id), None)
            if ours is None:
                continue  # handed off: its finish already queued the handoff
            flow = self._flows.pop(ours)
            self.decode_tes[flow.decode].unregister(f"recv{ours}")
            self.router.handed_off(i)
            self.router.finished(flow.decode, None)
            sp = self._params.pop(ours)
            if out.finish_reason != "error":
                out.finish_reason = first_token_reason(sp, out.finish_reason, out.token_ids[-1], eos)
            out.req_id = ours
            done.append(out)
        return done

    def _send(self, ours: int, flow: _Flow, pieces) -> float:
        """Write ``pieces`` into request ``ours``'s receive buffer on its decode engine; the seconds it took."""
        t0 = time.perf_counter()
        staging, spans = pack(pieces)
        src_te, dst_te = self.prefill_tes[flow.prefill], self.decode_tes[flow.decode]
        src_te.register(f"req{ours}", staging)
        bid = src_te.batch_write(dst_te.name, [Region(f"req{ours}", a, f"recv{ours}", b, n) for a, b, n in spans])
        status = src_te.free_batch(bid)  # a local write is done or failed when it returns
        src_te.unregister(f"req{ours}")
        if status is not TransferStatus.DONE and flow.failed is None:
            flow.failed = f"transfer: status {status.name}"
        return time.perf_counter() - t0

    def _stream_chunks(self, i: int) -> None:
        """After a step of prefill engine ``i``: every unfinished prefill sends the KV rows it finished."""
        llm = self.prefills[i]
        for (pi, pid), ours in self._ours_of_prefill.items():
            req = llm.request(pid) if pi == i else None
            if req is None or req.finish_reason is not None:
                continue
            flow = self._flows[ours]
            pieces = flow.out.chunk(llm.pool, req)
            if pieces:
                self.counters["transfer_s"] += self._send(ours, flow, pieces)
                self.send_log.append({"req": ours, "rows": flow.out.last_rows, "last": False,
                                      "kv": sum(b.numel() for _, b in pieces), "state": 0, "conv": 0})

    # ---- local mode: the handoff ---------------------------------------------------------------------
    def _handoff(self, ours: int, req, pieces, man) -> None:
        """The last send of request ``ours`` (states, conv windows, the rows left), then the decode side's
        checks and install (or, when its engine is full, a wait for room: :meth:`_install_waiting`)."""
        flow = self._flows.pop(ours)
        secs = self._send(ours, flow, pieces)
        by_kind = man.bytes_by_kind()
        self.send_log.append({"req": ours, "rows": (flow.out.sent_upto, man.boundary), "last": True,
                              "kv": sum(b.numel() for _, b in pieces) - by_kind["state"] - by_kind["conv"],
                              "state": by_kind["state"], "conv": by_kind["conv"]})
        self.decode_tes[flow.decode].unregister(f"recv{ours}")
        status = TransferStatus.DONE if flow.failed is None else TransferStatus.FAILED
        prompt = list(req.prompt_token_ids)
        regions = checked(flow.recv, man, self.decodes[flow.decode].pool, prompt, status)  # once, on arrival
        flow.recv = None
        self._waiting_install.append((ours, flow, prompt, req.prompt_text, man, secs, regions))

    def _install_waiting(self) -> None:
        """Install every received handoff its decode engine has room for, in arrival order."""
        still = []
        for entry in self._waiting_install:
            ours, flow, prompt, text, man, secs, regions = entry
            res = install_or_recompute(self.decodes[flow.decode], prompt, self._params[ours], man, regions, text=text)
            if res is None:
                still.append(entry)
                continue
            self._decode_id[(flow.decode, res.rid)] = ours
            if res.ok and ours in self.handoffs:
                dreq = self.decodes[flow.decode].request(res.rid)
                self.handoffs[ours].update(decode_slot=dreq.slot, decode_pages=list(dreq.pages))
            self.record_handoff(ours, res.ok, handoff_info(man, secs, flow.out.early_sends, flow.out.early_bytes,
                                                           res.error or flow.failed))
            if res.kept_state:
                self.router.hold(flow.decode, prompt)  # its prefix cache holds the boundary state
        self._waiting_install = still
