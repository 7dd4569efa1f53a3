"""Naive swap scoring: re-encode each swapped sequence on its own (the reference and baseline).

For each mismatch j it runs one plain causal forward of the full model over
``x + y_<i + z_j + y_{i+1} .. y_{i+N_j-1}`` (the swapped sequence cut right after the
last token the window needs -- the cheapest correct re-encoding), takes
``log_softmax`` of the model's own logits at the n+1 positions the score needs
(``logits_to_keep``), and one forward of ``x + y`` for the original terms. It shares no code with the one-pass path (no block mask, no scorer op),
so agreement between the two is a real test of both.
"""

from __future__ import annotations

import torch

from selfjudge.kernels.judge_features import NUM_FEATURES, position_features

from .swap_scoring import SwapScores


@torch.no_grad()
def naive_score_swaps(
    model,
    prompt_ids: torch.Tensor,  # [Lx] int
    response_ids: torch.Tensor,  # [Ly] int
    positions: torch.Tensor,  # [M] int
    draft_ids: torch.Tensor,  # [M] int
    window: int = 20,
) -> SwapScores:
    device = next(model.parameters()).device
    x = prompt_ids.to(device=device, dtype=torch.long)
    y = response_ids.to(device=device, dtype=torch.long)
    Lx, Ly = x.shape[0], y.shape[0]
    M = positions.shape[0]
    H = model.config.hidden_size
    scores = torch.zeros(M, dtype=torch.float32)
    confidence = torch.zeros(M, dtype=torch.float32)
    prefix_terms = torch.zeros(M, dtype=torch.float32)
    features = torch.zeros(M, H, dtype=torch.float32)
    orig_features = torch.zeros(M, H, dtype=torch.float32)
    phi = torch.zeros(M, NUM_FEATURES, dtype=torch.float32)
    orig_phi = torch.zeros(M, NUM_FEATURES, dtype=torch.float32)
    if M:
        seq = torch.cat([x, y])[None]
        full = model(input_ids=seq, output_hidden_states=True)
        logp = torch.log_softmax(full.logits[0].double(), dim=-1)  # [Lx+Ly, V]
        orig = logp[Lx - 1 : Lx + Ly - 1].gather(1, y[:, None])[:, 0]  # [Ly] log T(y_t | y_<t)
        orig_top = logp[Lx - 1 : Lx + Ly - 1].max(-1).values  # [Ly] top-1 log-probability before y_t
    for j in range(M):
        i, zj = int(positions[j]), int(draft_ids[j])
        n = min(window, Ly - 1 - i)
        swapped = torch.cat([x, y[:i], torch.tensor([zj], device=device), y[i + 1 : i + n]])[None]
        # logits only from position Lx+i-1 (predicts z) on: the positions the score needs
        keep = swapped.shape[1] - (Lx + i - 1)  # n+1 (2 when n = 0: z itself predicts nothing)
        out = model(input_ids=swapped, output_hidden_states=True, logits_to_keep=keep)
        lp = torch.log_softmax(out.logits[0].double(), dim=-1)  # [keep, V]; row k = position Lx+i-1+k
        s_swap = lp[0, zj] + sum(lp[1 + k, int(y[i + 1 + k])] for k in range(n))
        s_orig = orig[i : i + n + 1].sum()
        scores[j] = float(s_swap - s_orig)
        prefix_terms[j] = float(lp[0, zj] - orig[i])
        c_swap = lp[0, zj] + sum(lp[1 + k].max() for k in range(n))
        confidence[j] = float((c_swap - orig_top[i : i + n + 1].sum()) / (n + 1))
        features[j] = out.hidden_states[-1][0, Lx + i].float().cpu()
        row = full.logits[0, Lx + i - 1][None]  # [1, V] the model's own logits predicting y_i / z_j
        phi[j] = position_features(row, torch.tensor([zj], device=device))[0].cpu()
        orig_phi[j] = position_features(row, y[i : i + 1])[0].cpu()
        orig_features[j] = full.hidden_states[-1][0, Lx + i].float().cpu()
    return SwapScores(positions.long(), draft_ids.long(), scores, prefix_terms, features, confidence, phi,
                      orig_features, orig_phi)
