"""The same context-parallel prefill under ``torchrun`` (each rank started by it, not by us):

    torchrun --standalone --nproc-per-node 2 -m kda_ref.context_parallel.torchrun --prompt-file docs/kda.md [--model random-tiny]

Every rank joins the process group ``torchrun`` describes (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``,
``MASTER_PORT``; gloo on CPUs, nccl when CUDA is available), runs
:func:`~kda_ref.context_parallel.forward.rank_forward`, and the rank holding the prompt's last token
(:meth:`~kda_ref.context_parallel.forward.CPLayout.last_rank`) prints the next token's id and the bytes
each rank sent. ``--prompt-file`` is read while the arguments are parsed: a regular file of at most
:data:`~kda_ref.utils.limits.MAX_PROMPT_FILE_BYTES` bytes of UTF-8, else an argument error naming the
flag. Design notes: ``docs/context_parallel.md#not-run-here``.
"""

from __future__ import annotations

import argparse
import os
from datetime import timedelta

import torch
import torch.distributed as dist

from ..utils.files import read_regular
from ..utils.limits import MAX_PROMPT_FILE_BYTES
from .comm import DistGroup
from .forward import rank_forward


def read_prompt_text(path: str) -> str:
    """``type=`` of ``--prompt-file``: the UTF-8 text of the regular file ``path``, of at most
    :data:`MAX_PROMPT_FILE_BYTES` bytes (checked, opened non-blocking, read bounded:
    :func:`~kda_ref.utils.files.read_regular`). Anything else is an ``argparse.ArgumentTypeError``
    starting ``path:``, which argparse reports as ``argument --prompt-file: path: ...``."""
    try:
        data = read_regular(path, MAX_PROMPT_FILE_BYTES, argparse.ArgumentTypeError, "a prompt file")
        return data.decode("utf-8")
    except OSError as e:  # missing, no permission
        raise argparse.ArgumentTypeError(f"path: cannot read {path} ({e.strerror or type(e).__name__})") from None
    except UnicodeDecodeError as e:
        raise argparse.ArgumentTypeError(f"path: {path} is not UTF-8 text (byte {e.start})") from None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="context-parallel prefill of one prompt, one process per rank (torchrun)")
    p.add_argument("--prompt-file", required=True, type=read_prompt_text, dest="prompt", metavar="PATH",
                   help=f"UTF-8 text, a regular file of at most {MAX_PROMPT_FILE_BYTES:,} bytes")
    p.add_argument("--model", default="random-tiny", help="'random-tiny' (default), 'trained', or a checkpoint folder")
    p.add_argument("--timeout", type=float, default=120.0)
    a = p.parse_args(argv)
    if "RANK" not in os.environ:
        p.error("run under torchrun (RANK / WORLD_SIZE are not set)")
    from ..model import HybridModel, ModelConfig, load_pretrained
    from ..tokenizer import ByteTokenizer

    if a.model == "random-tiny":
        model = HybridModel(ModelConfig.tiny(), seed=0)
    elif a.model == "trained":
        from ..train import load_trained

        model = load_trained()
    else:
        model = load_pretrained(a.model)
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend, timeout=timedelta(seconds=a.timeout))
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
            model = model.to(f"cuda:{torch.cuda.current_device()}")
        torch.set_num_threads(1)
        ids = [model.config.bos_token_id, *ByteTokenizer().encode(a.prompt)]
        group = DistGroup(timedelta(seconds=a.timeout))
        out = rank_forward(model.eval(), [ids], rank, group)
        sent = group.all_gather(torch.tensor([out.sent_bytes], device=model.lm_head.weight.device))
        if 0 in out.logits:  # this rank holds the prompt's last token
            print(f"{len(ids)} tokens over {world} ranks ({backend}); next token {int(out.logits[0].argmax())}; "
                  f"sent bytes per rank {[int(x) for x in sent]}")
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
