"""Training K3's MTP layer: what it is asked to predict (the token after next), that its loss reaches its
weights only, and the recipe's checks. The shipped K3 demo itself is tested in ``test_trained_k3.py``."""

from __future__ import annotations

import pytest
import torch

from kda_ref.model import ForwardBatch, HybridModel
from kda_ref.train import Recipe
from kda_ref.train.data import IGNORE, lm_labels, pack
from kda_ref.train.loop import batch_loss, mtp_shift


def test_the_mtp_layer_learns_the_main_label_one_token_further():
    a, b = [256, 10, 11, 12, 13], [256, 20, 21]
    batch = pack([(a, lm_labels(a), "text"), (b, lm_labels(b), "text")])
    rows, lens, labels = mtp_shift(batch)
    assert lens == [4, 2]
    assert rows.tolist() == [0, 1, 2, 3, 5, 6]  # every position but each sequence's last
    # row t (hidden state at t, token t+1 as input) is labelled with the token at t+2; a sequence's
    # last MTP row has nothing two tokens ahead
    assert labels.tolist() == [11, 12, 13, IGNORE, 21, IGNORE]


def test_the_mtp_loss_trains_the_mtp_layer_and_leaves_the_main_head_alone():
    r = Recipe.k3()
    model = HybridModel(r.model_config(), seed=0)
    seq = [256] + list(b"the token after next")
    batch = pack([(seq, lm_labels(seq), "text")])
    _, parts = batch_loss(model, batch, mtp_weight=0.0)
    assert "mtp" not in parts
    loss, parts = batch_loss(model, batch, mtp_weight=1.0)
    main, _ = batch_loss(model, batch)
    torch.testing.assert_close(loss - main, torch.tensor(parts["mtp"]), atol=1e-4, rtol=0)
    model.zero_grad()
    (loss - main).backward()  # the MTP term alone
    grads = {n: p.grad for n, p in model.named_parameters()}
    assert grads["mtp.0.eh_proj.weight"].abs().sum() > 0
    assert grads["mtp.0.shared_head.head.weight"].abs().sum() > 0
    assert grads["lm_head.weight"] is None or grads["lm_head.weight"].abs().sum() == 0
    assert grads["model.layers.0.self_attn.q_proj.weight"].abs().sum() > 0  # the MTP loss shapes the trunk too


def test_a_recipe_refuses_an_mtp_weight_without_an_mtp_layer():
    with pytest.raises(ValueError, match="^mtp_loss_weight: the model has no MTP layers"):
        Recipe(mtp_loss_weight=0.3)
    with pytest.raises(ValueError, match="^mtp_loss_weight: must lie in"):
        Recipe.k3().replace(mtp_loss_weight=-1.0)
    assert Recipe.k3().model_config().is_k3 and Recipe().mtp_loss_weight == 0.0


def test_a_chained_depth_reads_the_depth_before_its_output_one_position_back():
    """Depth ``d + 1``'s row at position ``t`` reads depth ``d``'s output at ``t - 1`` (the served drafter's
    chained input) with the token at ``t + 1`` and the label at ``t + 2``; each depth is one row shorter per
    sequence, and a sequence too short to chain further drops out."""
    from kda_ref.train import mtp_chain

    model = HybridModel(Recipe.k3().model_config(), seed=0).eval()
    a, b = [256, 10, 11, 12, 13, 14], [256, 20, 21]
    batch = pack([(a, lm_labels(a), "text"), (b, lm_labels(b), "text")])
    calls, real = [], model.mtp[0].predict

    def spy(hidden, ids, fb, dispatcher, cache=None):
        logits, x = real(hidden, ids, fb, dispatcher, cache)
        calls.append((hidden, ids.tolist(), fb.seq_lens, x))
        return logits, x

    model.mtp[0].predict = spy
    with torch.no_grad():
        h = model.hidden_states(batch.ids, ForwardBatch.prefill(batch.seq_lens))
        out = mtp_chain.chained_mtp_outputs(model, batch, h, depths=3)
    assert [c[2] for c in calls] == [[5, 2], [4, 1], [3]]  # b (2 MTP rows) cannot chain a third time
    assert calls[0][1] == [10, 11, 12, 13, 14, 20, 21] and calls[1][1] == [11, 12, 13, 14, 21]
    torch.testing.assert_close(calls[0][0], h[[0, 1, 2, 3, 4, 6, 7]])  # depth 1: the target's h_t
    torch.testing.assert_close(calls[1][0], calls[0][3][[0, 1, 2, 3, 5]])  # depth 2: depth 1's x at t - 1
    torch.testing.assert_close(calls[2][0], calls[1][3][[0, 1, 2]])
    assert [lab.tolist() for _, lab in out] == [[11, 12, 13, 14, IGNORE, 21, IGNORE], [12, 13, 14, IGNORE, IGNORE],
                                                [13, 14, IGNORE]]
    with pytest.raises(ValueError, match="^depths: must be an int in"):
        mtp_chain.chained_mtp_outputs(model, batch, h, depths=0)


def test_the_chain_finetune_moves_the_mtp_layer_alone():
    """Every weight but the MTP layer's is bit-identical afterwards (the base model's answers cannot change);
    the MTP layer's moved; the held-out accuracy is reported per depth before and after."""
    from kda_ref.train import trained_corpus
    from kda_ref.train.mtp_chain import finetune_mtp_chain

    recipe = Recipe.k3().replace(tokens_per_step=1024)
    model = HybridModel(recipe.model_config(), seed=0)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    res = finetune_mtp_chain(model, recipe, trained_corpus("k3"), depths=2, steps=2, progress=False)
    changed = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert changed and all(n.startswith("mtp.0.") for n in changed)
    assert "mtp.0.eh_proj.weight" in changed and not any(p.requires_grad for p in model.parameters())
    assert len(res["held_out_accuracy_by_depth_before"]) == len(res["held_out_accuracy_by_depth_after"]) == 2
    with pytest.raises(ValueError, match="^model: it has no MTP layer"):
        finetune_mtp_chain(HybridModel(Recipe().model_config(), seed=0), Recipe(), trained_corpus("k3"), steps=1)
