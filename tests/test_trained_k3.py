"""The trained K3 demo that ships with the package (``kda_ref/assets/trained_k3``): Kimi K3's layout at
the shipped model's widths, with one MTP layer trained on the token after next.

Floors were measured on the shipped weights (``docs/training.md`` "The K3 demo") and sit well under the
measurement and well above an untrained model, which each check also runs to show it can fail."""

from __future__ import annotations

import json

import pytest
import torch

from kda_ref import LLM, SamplingParams
from kda_ref.model import HybridModel
from kda_ref.train import load_trained, recall_accuracy, trained_corpus, trained_info, trained_path, trained_recipe
from kda_ref.train.data import lm_labels, pack, recall_stream, text_chunks
from kda_ref.train.loop import mtp_accuracy
from kda_ref.train.probe import probe_pairs

RECALL_FLOOR = 0.90  # measured 1.000 on the 96 fresh prompts; chance 1/26
MTP_FLOOR = 0.30  # top-1 on the token after next, held-out text (measured 0.48; untrained 0.004)
CHAIN_FLOOR = 0.35  # top-1 of the chained drafts (depths 2, 3) on held-out text (measured 0.48-0.49; 0.13-0.14
# before the MTP layer was fine-tuned for chaining, docs/training.md)
PROBE_GAIN_FLOOR = 0.15  # |cos| at the query minus before the pair, best head (measured 0.28; untrained 0.04)


@pytest.fixture(scope="module")
def k3():
    return load_trained(kind="k3")


@pytest.fixture(scope="module")
def untrained():
    return HybridModel(trained_recipe("k3").model_config(), seed=0).eval()


def fresh_prompts(n=96):
    r = trained_recipe("k3")
    return [recall_stream(r.seed + 7_777_777, i, r.min_pairs, r.max_pairs) for i in range(n)]


def test_the_k3_demo_is_a_k3_release_beside_the_kimi_linear_model(k3):
    folder = trained_path("k3")
    assert folder != trained_path() and trained_path().name == "trained_tiny"
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "kimi_k3" and "text_config" in config
    index = json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"]
    assert all(k.startswith("language_model.") for k in index)
    assert any(k.endswith(".weight_packed") for k in index)  # MXFP4 experts
    c = k3.config
    assert c.is_k3 and c.num_nextn_predict_layers == 1 and c.gate_lower_bound == -5.0 and c.attn_res_block_size
    info = trained_info("k3")
    assert info["recipe"]["mtp_loss_weight"] == 0.3 and info["num_parameters"] == k3.num_parameters()
    with pytest.raises(ValueError, match="^kind:"):
        trained_path("k2")


def test_the_k3_demo_recalls(k3, untrained):
    assert recall_accuracy(k3, fresh_prompts()) >= RECALL_FLOOR
    assert recall_accuracy(untrained, fresh_prompts()) < 0.1


def test_the_mtp_layer_predicts_the_token_after_next(k3, untrained):
    chunks = text_chunks(trained_corpus("k3").held_out, 256)[16:32]
    batch = pack([(c, lm_labels(c), "text") for c in chunks])
    assert mtp_accuracy(k3, batch) >= MTP_FLOOR
    assert mtp_accuracy(untrained, batch) < 0.05


def test_the_mtp_layer_chains_its_own_drafts(k3):
    """Served with k > 1, the MTP layer reads its own output: the shipped layer was fine-tuned for it
    (``kda_ref/train/mtp_chain.py``), and its chained drafts stay near the first one's accuracy."""
    from kda_ref.train.mtp_chain import chained_mtp_accuracy

    accs = chained_mtp_accuracy(k3, trained_corpus("k3").held_out, 256, depths=3)
    assert accs[0] >= MTP_FLOOR and min(accs[1:]) >= CHAIN_FLOOR, accs
    chain = trained_info("k3")["mtp_chain"]
    assert chain["depths"] == 3 and chain["held_out_accuracy_by_depth_after"] == pytest.approx(accs, abs=0.02)


@pytest.mark.slow  # the probe's machinery runs by default on the Kimi-Linear model (tests/test_trained_model.py)
def test_the_state_probe_finds_the_pairs_in_k3(k3, untrained):
    probe = trained_info("k3")["probe"]
    layer, head = probe["layer"], probe["head"]

    def gain(model):
        rows = [probe_pairs(model, s, layer) for s in fresh_prompts(24)]
        before = torch.cat([r.alignment("read_before") for r in rows])[:, head]
        at_query = torch.cat([r.alignment("read_at_query") for r in rows])[:, head]
        return float((at_query - before).mean()), float((at_query > before).float().mean())

    rise, share = gain(k3)
    assert rise > PROBE_GAIN_FLOOR and share > 0.8
    assert gain(untrained)[0] < PROBE_GAIN_FLOOR


def test_the_engine_gives_the_k3_demos_answers_with_its_prefix_cache(k3):
    system = list(b"# KDA in this repository\n\nThe recurrent state of a KDA layer is one fixed matrix per head; "
                  b"the cache keeps it at chunk boundaries. ")  # past one 64-token chunk
    prompts = [[256, *system, *list(b"is")], [256, *system, *list(b"of a layer")]]
    params = SamplingParams(max_tokens=16, ignore_eos=True)
    plain = LLM(k3).generate(prompts, params)
    cached = LLM(k3, prefix_cache="radix")
    cached.generate(prompts[:1], params)
    again = cached.generate(prompts, params)
    assert [o.token_ids for o in again] == [o.token_ids for o in plain]
    assert cached.stats()["cached_prompt_tokens"] > 0
    assert bytes(plain[0].token_ids).isascii()  # it writes text, not noise


@pytest.mark.parametrize("spec", [dict(speculative="ngram", num_speculative_tokens=3, spec_tree_width=2),
                                  dict(speculative="draft", num_speculative_tokens=3, spec_state="replay")],
                         ids=["ngram-tree", "draft-model"])
def test_tree_and_draft_model_speculation_keep_the_k3_demos_answers(k3, spec):
    prompts = [[256, *list(b"The recurrent state of a KDA layer")], [256, *list(b"# KDA in this repository\n\n")]]
    params = SamplingParams(max_tokens=24, ignore_eos=True, return_logits=True)
    want = LLM(k3).generate(prompts, params)
    kw = dict(spec, draft_model=k3) if spec["speculative"] == "draft" else spec
    llm = LLM(k3, prefix_cache="radix", **kw)
    for a, b in zip(want, llm.generate(prompts, params)):
        assert a.token_ids == b.token_ids
        torch.testing.assert_close(b.logits, a.logits, atol=1e-4, rtol=0)
    assert llm.stats()["spec_accepted_tokens"] > 0
