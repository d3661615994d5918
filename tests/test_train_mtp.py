"""Training K3's MTP layer: what it is asked to predict (the token after next), that its loss reaches its
weights only, and the recipe's checks. The shipped K3 demo itself is tested in ``test_trained_k3.py``."""

from __future__ import annotations

import pytest
import torch

from kda_ref.model import HybridModel
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
