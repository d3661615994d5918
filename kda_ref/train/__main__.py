"""``python -m kda_ref.train``: train (or resume, or reproduce) the shipped hybrid model."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..utils.limits import MAX_THREADS, SEED_RANGE
from ..utils.outputs import OutputError, claim_output, claim_output_dir


def _parser() -> argparse.ArgumentParser:
    """The command line of ``python -m kda_ref.train``."""
    p = argparse.ArgumentParser(
        prog="python -m kda_ref.train",
        description="Train the small KDA + MLA hybrid on MQAR + the repo's docs (byte level), on the CPU.")
    p.add_argument("--out", type=Path, default=Path("artifacts/trained_tiny"),
                   help="folder for config.json, model.safetensors, recipe.json, corpus.txt and the tokenizer files "
                        "(default: %(default)s)")
    p.add_argument("--checkpoint", type=Path, default=None,
                   help="resumable checkpoint file (default: OUT/checkpoint.pt); an existing one is resumed")
    p.add_argument("--recipe", type=Path, default=None, help="recipe JSON (a recipe.json from a release works)")
    p.add_argument("--model", choices=["kimi_linear", "k3"], default="kimi_linear",
                   help="which shipped model's recipe (and, with --reproduce, corpus snapshot): the Kimi-Linear "
                        "one (kda_ref/assets/trained_tiny) or the K3 demo with its MTP layer "
                        "(kda_ref/assets/trained_k3) (default: %(default)s)")
    p.add_argument("--reproduce", action="store_true",
                   help="re-run the shipped recipe on the shipped corpus snapshot of --model")
    p.add_argument("--corpus", choices=["repo", "snapshot"], default=None,
                   help="text: the repo's README.md + docs/**/*.md now ('repo', default) or the shipped snapshot")
    p.add_argument("--steps", type=int, default=None, help="override the recipe's step count")
    p.add_argument("--seed", type=int, default=None, help="override the recipe's seed")
    p.add_argument("--stop-after", type=int, default=None, help="stop after this many steps (resume later)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default: %(default)s)")
    p.add_argument("--no-progress", action="store_true", help="no tqdm progress bar")
    p.add_argument("--print-recipe", action="store_true", help="print the recipe as JSON and exit")
    p.add_argument("--mtp-chain", type=int, default=None, metavar="DEPTHS",
                   help="instead of training: fine-tune the shipped K3 demo's MTP layer alone for DEPTHS chained "
                        "drafts (every other weight frozen; kda_ref/train/mtp_chain.py) and write it to --out")
    p.add_argument("--mtp-chain-steps", type=int, default=400, help="steps of --mtp-chain (default: %(default)s)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Parse (torch-free, so ``--help`` and argument errors answer at once), check the output folder, then
    import the trainer and run it."""
    p = _parser()
    a = p.parse_args(argv)
    _check_args(p, a)
    from . import TRAINED_DIRS

    if any(a.out.resolve() == d.resolve() for d in TRAINED_DIRS.values()):
        print("error: --out: refusing to overwrite the shipped model in place; copy the result there by hand",
              file=sys.stderr)
        return 2
    if a.mtp_chain is None:  # the recipe before --out is made: one that cannot be read leaves no folder
        recipe = _read_recipe(a)
        if recipe is None:
            return 2
        if a.print_recipe:
            print(json.dumps(recipe.to_dict(), indent=2))
            return 0
    try:  # before the corpus is read and the training runs
        out, ckpt = _claim_outputs(a)
    except OutputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if a.mtp_chain is not None:
        return _mtp_chain(a, out)
    from . import build_corpus, trained_corpus
    from .loop import CheckpointFileError, train

    use_snapshot = a.corpus == "snapshot" or (a.corpus is None and a.reproduce)
    corpus = trained_corpus(a.model) if use_snapshot else build_corpus()
    print(f"corpus: {len(corpus.train)} training bytes, {len(corpus.held_out)} held out, "
          f"sha256 {corpus.sha256[:16]}…", file=sys.stderr)
    try:
        res = train(recipe, out_dir=out, checkpoint=ckpt, corpus=corpus, stop_after=a.stop_after,
                    progress=not a.no_progress, threads=a.threads)
    except (CheckpointFileError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    _report_result(res, recipe, out, ckpt)
    return 0


def _read_recipe(a: argparse.Namespace):
    """The recipe the flags ask for (``--recipe``, ``--reproduce`` or the default, with ``--steps`` / ``--seed``),
    or ``None`` after printing why it cannot be read."""
    from . import Recipe, trained_recipe

    try:
        default = Recipe.k3() if a.model == "k3" else Recipe()
        recipe = trained_recipe(a.model) if a.reproduce else Recipe.from_json(a.recipe) if a.recipe else default
        over = {k: v for k, v in (("steps", a.steps), ("seed", a.seed)) if v is not None}
        return recipe.replace(**over) if over else recipe
    except ValueError as e:
        print(f"error: --recipe: {e}" if a.recipe else f"error: {e}", file=sys.stderr)
        return None


def _check_args(p: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    """Refuse (``p.error``: the usage, exit 2) values that parse but the trainer cannot use."""
    if a.mtp_chain is not None and (a.model != "k3" or not 1 <= a.mtp_chain <= 8 or a.mtp_chain_steps < 1):
        p.error("--mtp-chain: needs --model k3, DEPTHS in [1, 8] and --mtp-chain-steps >= 1")
    if not 1 <= a.threads <= MAX_THREADS:
        p.error(f"--threads: must be in [1, {MAX_THREADS}], got {a.threads}")
    if a.seed is not None and not SEED_RANGE[0] <= a.seed <= SEED_RANGE[1]:
        p.error(f"--seed: must be in [{SEED_RANGE[0]}, {SEED_RANGE[1]}], got {a.seed}")
    for flag, v in (("--steps", a.steps), ("--stop-after", a.stop_after)):
        if v is not None and v < 1:
            p.error(f"{flag}: must be >= 1, got {v}")


def _claim_outputs(a: argparse.Namespace) -> tuple[Path, Path]:
    """``(out, checkpoint)``, both checked writable unless ``--print-recipe`` (raises :class:`OutputError`)."""
    out = a.out if a.print_recipe else claim_output_dir(a.out, "--out")
    ckpt = a.checkpoint or out / "checkpoint.pt"
    if not a.print_recipe:
        claim_output(ckpt, "--checkpoint").release()  # writable (an existing one is resumed, not truncated)
    return out, ckpt


def _report_result(res: dict, recipe, out: Path, ckpt: Path) -> None:
    """Print the final metrics and where they went, or where a stopped run can resume."""
    if res["done"]:
        print(json.dumps({k: v for k, v in (res["metrics"] or {}).items()}, indent=2))
        print(f"wrote {out}/ (config.json, model.safetensors, recipe.json, corpus.txt, tokenizer.json, "
              "tokenizer_config.json)", file=sys.stderr)
    else:
        print(f"stopped at step {res['step']}/{recipe.steps}; resume with the same --checkpoint {ckpt}", file=sys.stderr)


def _mtp_chain(a, out: Path) -> int:
    """``--mtp-chain``: the shipped K3 demo, its MTP layer fine-tuned for chained drafts, written to ``out``."""
    import torch

    from . import load_trained, trained_corpus, trained_path, trained_recipe
    from .mtp_chain import finetune_mtp_chain, write_mtp_chain_release

    torch.set_num_threads(a.threads)
    model = load_trained(kind="k3")
    res = finetune_mtp_chain(model, trained_recipe("k3"), trained_corpus("k3"), depths=a.mtp_chain,
                             steps=a.mtp_chain_steps, progress=not a.no_progress)
    write_mtp_chain_release(model, trained_path("k3"), res, out)
    print(json.dumps(res, indent=2))
    print(f"wrote {out}/ (the K3 release with its MTP layer fine-tuned)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
