"""One-pass swap scoring (SPEC section 2): every mismatch of a response in one target forward.

For a prompt x, the target's response y and mismatch positions i_1..i_M with draft tokens
z_1..z_M, the target reads, in a single forward pass,

    [x, y_<=e, window_1, ..., window_M],   window_j = [z_j, y_{i_j+1}, ..., y_{i_j+N_j-1}]

with ``N_j = min(N, len(y) - 1 - i_j)`` (the window is cut at the end of the response;
a window always holds at least z_j, whose hidden state is the feature). A 4-D additive
attention mask lets window j see the shared prefix ``x + y_<i_j`` and its own earlier
tokens only, and window token k gets position id ``len(x) + i_j + k`` -- exactly the
positions it has in the swapped sequence. Its hidden states therefore equal those of
re-encoding ``x + y_<i_j + z_j + y_{i_j+1..}`` on its own (tested against
:mod:`selfjudge.labelling.naive`).

The scorer op (:func:`selfjudge.kernels.scorer.token_logprobs`) then turns hidden states into
log-probabilities without materialising logits:

    s_j = [log T(z_j | y_<i) - log T(y_i | y_<i)]
          + sum_{t=i+1}^{i+N_j} [log T(y_t | y_<i, z_j, y_{i+1..t-1}) - log T(y_t | y_<t)]

The original-sequence terms come from the prefix part of the same forward. The swapped
terms (``log T(z_j|.)`` plus the window's rows) are summed per window by the op's
segment sums; the original terms over each window by a float64 cumulative sum.

Hidden-state definition (shared with verify/engine): the base model's
``last_hidden_state``, i.e. *after the final RMSNorm*. In transformers 5.x this is also
``output_hidden_states[-1]`` of ``LlamaForCausalLM`` (``capture_outputs`` ties the last
entry to ``last_hidden_state``); the logits are ``lm_head(last_hidden_state)``.
The feature of mismatch j is that state at window j's first token, i.e. after the target
has read z_j -- the state the verify step sees for a draft token.

Long responses or many mismatches are split into chunks of at most ``max_tokens``
tokens per forward; each chunk re-reads the prefix it needs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from selfjudge.kernels.scorer import token_logprobs
from selfjudge.kernels.judge_features import NUM_FEATURES, position_features


@dataclass
class SwapScores:
    """Per-mismatch outputs of one response, in the order of the given positions."""

    positions: torch.Tensor  # [M] int64 response positions i_j
    draft_ids: torch.Tensor  # [M] int64 z_j
    scores: torch.Tensor  # [M] float32 s_j
    prefix_terms: torch.Tensor  # [M] float32 log T(z_j|y_<i) - log T(y_i|y_<i) (the N=0 score)
    features: torch.Tensor  # [M, H] float32 final (post-norm) hidden state after reading z_j
    confidence_scores: torch.Tensor | None = None  # [M] float32 c_j (released code's score, see score_swaps)
    phi: torch.Tensor | None = None  # [M, F] float32 probability features of z_j (kernels.judge_features)
    orig_features: torch.Tensor | None = None  # [M, H] float32 hidden state after reading y_i instead
    orig_phi: torch.Tensor | None = None  # [M, F] float32 probability features of y_i


def lm_head_weight(model) -> torch.Tensor:  # [V, H]
    """The LM head of a Llama-family causal LM; refuses heads the scorer cannot express."""
    head = model.get_output_embeddings()
    if getattr(head, "bias", None) is not None:
        raise ValueError("model: LM heads with a bias are not supported by the scorer")
    cfg = model.config
    for attr in ("final_logit_softcapping", "logit_scale"):
        if getattr(cfg, attr, None) not in (None, 1.0):
            raise ValueError(f"model: config.{attr}={getattr(cfg, attr)} is not supported by the scorer")
    return head.weight


def base_model(model):
    """The decoder stack (``model.model`` for Llama) whose ``last_hidden_state`` is post-norm."""
    dec = model.get_decoder() if hasattr(model, "get_decoder") else None
    return dec if dec is not None else model.model


def plan_chunks(positions: list[int], prompt_len: int, response_len: int, window: int, max_tokens: int) -> list[list[int]]:
    """Split mismatch indices (sorted by position) into chunks whose forward fits max_tokens."""
    order = sorted(range(len(positions)), key=lambda j: positions[j])
    chunks: list[list[int]] = []
    cur: list[int] = []
    cur_win = 0
    for j in order:
        i = positions[j]
        w = max(1, min(window, response_len - 1 - i))
        prefix = prompt_len + max(min(i + window, response_len - 1), i + 1)  # sorted: i is the chunk's max
        if cur and prefix + cur_win + w > max_tokens:
            chunks.append(cur)
            cur, cur_win = [], 0
        cur.append(j)
        cur_win += w
    if cur:
        chunks.append(cur)
    return chunks


@torch.no_grad()
def _score_chunk(model, prompt_ids, response_ids, pos, z, window, backend):
    """Score one chunk of mismatches (pos [m] sorted ascending, z [m]) in one forward."""
    device = prompt_ids.device
    Lx, Ly = prompt_ids.shape[0], response_ids.shape[0]
    n_eff = torch.clamp(Ly - 1 - pos, max=window)  # [m] scored window tokens N_j (0 allowed)
    wlen = torch.clamp(n_eff, min=1)  # [m] tokens in each window
    t_end = int((pos + n_eff).max())  # last response position whose original term is needed
    # prefix tokens x + y_<t_end (its last state predicts y_t_end), and at least every y_i (its state
    # after reading y_i is the released code's augmentation example)
    P = Lx + max(t_end, int(pos.max()) + 1)
    m = pos.shape[0]
    offs = P + torch.cumsum(wlen, 0) - wlen  # [m] start of each window in the sequence
    L = P + int(wlen.sum())

    # tokens and position ids
    seq = torch.cat([prompt_ids, response_ids])  # [Lx + Ly]
    win_j = torch.repeat_interleave(torch.arange(m, device=device), wlen)  # [L - P] window of each token
    win_k = torch.arange(L - P, device=device) - offs[win_j] + P  # [L - P] index inside the window
    src = Lx + pos[win_j] + win_k  # position in the swapped sequence
    win_tokens = seq[torch.clamp(src, max=Lx + Ly - 1)].clone()
    win_tokens[win_k == 0] = z  # first window token is the draft's
    input_ids = torch.cat([seq[:P], win_tokens])[None]  # [1, L]
    position_ids = torch.cat([torch.arange(P, device=device), src])[None]  # [1, L]

    # block attention mask: prefix causal; window sees prefix x+y_<i and its own past
    q = torch.arange(L, device=device)
    prefix_limit = torch.cat([torch.zeros(P, dtype=torch.long, device=device), Lx + pos[win_j]])  # [L]
    block_start = torch.cat([torch.zeros(P, dtype=torch.long, device=device), offs[win_j]])  # [L]
    k = q[None, :]
    allowed = (k < prefix_limit[:, None]) | ((k >= block_start[:, None]) & (k <= q[:, None]))  # [L, L]
    dtype = next(model.parameters()).dtype
    mask = torch.zeros(1, 1, L, L, dtype=dtype, device=device)
    mask.masked_fill_(~allowed[None, None], torch.finfo(dtype).min)

    out = base_model(model)(input_ids=input_ids, attention_mask=mask, position_ids=position_ids, use_cache=False)
    hidden = out.last_hidden_state[0]  # [L, H] post-norm

    # scorer rows: original y_t for t in [t0, t_end]; z_j; window rows
    t0 = int(pos.min())
    t_orig = torch.arange(t0, t_end + 1, device=device)
    rows_h = [hidden[Lx + t_orig - 1], hidden[Lx + pos - 1]]
    rows_y = [response_ids[t_orig], z]
    rows_s = [torch.full_like(t_orig, -1), torch.arange(m, device=device)]
    scored = win_k < n_eff[win_j]  # window tokens that predict a response token
    rows_h.append(hidden[P:][scored])
    rows_y.append(seq[(Lx + pos[win_j] + win_k + 1)[scored]])
    rows_s.append(win_j[scored])
    lp, seg_sums, top1 = token_logprobs(
        torch.cat(rows_h), lm_head_weight(model), torch.cat(rows_y), torch.cat(rows_s), m, backend=backend,
        return_max=True,
    )
    n_orig = t_orig.shape[0]
    lp_orig = lp[:n_orig].double()
    lp_z = lp[n_orig : n_orig + m]
    csum = torch.cat([torch.zeros(1, dtype=torch.float64, device=device), torch.cumsum(lp_orig, 0)])
    orig_sum = csum[pos + n_eff - t0 + 1] - csum[pos - t0]  # sum_{t=i}^{i+N_j} log T(y_t|y_<t)
    scores = (seg_sums.double() - orig_sum).float()
    prefix_terms = (lp_z.double() - lp_orig[pos - t0]).float()
    features = hidden[offs].float()
    # probability features of z_j and y_i, from the row that predicts both (temperature 1, fp32)
    pred_logits = hidden[Lx + pos - 1].float() @ lm_head_weight(model).float().T  # [m, V]
    phi = position_features(pred_logits, z)
    orig_phi = position_features(pred_logits, response_ids[pos])
    orig_features = hidden[Lx + pos].float()
    # confidence (the released code's score): mean over the same N_j + 1 distributions of the top-1
    # log-probability, swapped side using log T(z_j | y_<i) for the first
    top_orig = torch.cat([torch.zeros(1, dtype=torch.float64, device=device), torch.cumsum(top1[:n_orig].double(), 0)])
    conf_orig = top_orig[pos + n_eff - t0 + 1] - top_orig[pos - t0]
    conf_swap = lp_z.double().clone()
    conf_swap.index_add_(0, win_j[scored], top1[n_orig + m:].double())
    confidence = ((conf_swap - conf_orig) / (n_eff + 1).double()).float()
    return scores, prefix_terms, features, confidence, phi, orig_features, orig_phi


@torch.no_grad()
def score_swaps(
    model,
    prompt_ids: torch.Tensor,  # [Lx] int, Lx >= 1
    response_ids: torch.Tensor,  # [Ly] int, the target's response
    positions: torch.Tensor,  # [M] int response positions of the mismatches, distinct
    draft_ids: torch.Tensor,  # [M] int draft tokens z at those positions
    window: int = 20,
    *,
    max_tokens: int = 2048,
    backend: str = "auto",
) -> SwapScores:
    """Score every swap of one response with one target forward per chunk (see module doc).

    Besides SPEC section 2's likelihood score ``s_j`` it returns ``confidence_scores``, the
    score of SelfJudge's released code (``compare_important_tokens_gsm8k.py``): over the
    N_j + 1 distributions that predict ``y_i .. y_{i+N_j}``, the mean top-1 log-probability of
    the swapped sequence (its first term ``log T(z_j | y_<i)``) minus that of the original.
    The released code labels a swap important when the *drop* exceeds tau (about 0.056 at
    N = 20 on its GSM8K/Llama pair): acceptable here is ``confidence > -tau``.

    It also returns the judge's probability features ``phi`` of each z_j
    (:func:`selfjudge.kernels.judge_features.position_features` on the row that predicts it), and,
    for the released code's augmentation (the original token as an acceptable example), the
    hidden state after reading y_i instead (``orig_features``) and y_i's features (``orig_phi``).
    """
    if prompt_ids.dim() != 1 or prompt_ids.shape[0] < 1:
        raise ValueError("prompt_ids must be a non-empty 1-D tensor [Lx]")
    if response_ids.dim() != 1:
        raise ValueError("response_ids must be a 1-D tensor [Ly]")
    if positions.dim() != 1 or draft_ids.shape != positions.shape:
        raise ValueError("positions and draft_ids must be 1-D tensors of the same length [M]")
    if not isinstance(window, int) or window < 0:
        raise ValueError(f"window must be an int >= 0, got {window!r}")
    if max_tokens < 1:
        raise ValueError("max_tokens must be >= 1")
    device = next(model.parameters()).device
    Ly = response_ids.shape[0]
    pos = positions.to(device=device, dtype=torch.long)
    z = draft_ids.to(device=device, dtype=torch.long)
    M = pos.shape[0]
    H = model.config.hidden_size
    scores = torch.zeros(M, dtype=torch.float32, device=device)
    confidence = torch.zeros(M, dtype=torch.float32, device=device)
    prefix_terms = torch.zeros(M, dtype=torch.float32, device=device)
    features = torch.zeros(M, H, dtype=torch.float32, device=device)
    orig_features = torch.zeros(M, H, dtype=torch.float32, device=device)
    phi = torch.zeros(M, NUM_FEATURES, dtype=torch.float32, device=device)
    orig_phi = torch.zeros(M, NUM_FEATURES, dtype=torch.float32, device=device)
    if M:
        if int(pos.min()) < 0 or int(pos.max()) >= Ly:
            raise ValueError(f"positions must lie in [0, len(response_ids)={Ly})")
        if torch.unique(pos).shape[0] != M:
            raise ValueError("positions must be distinct")
        x = prompt_ids.to(device=device, dtype=torch.long)
        y = response_ids.to(device=device, dtype=torch.long)
        for chunk in plan_chunks(pos.tolist(), x.shape[0], Ly, window, max_tokens):
            idx = torch.tensor(chunk, dtype=torch.long, device=device)
            s, p, f, c, ph, of, oph = _score_chunk(model, x, y, pos[idx], z[idx], window, backend)
            scores[idx], prefix_terms[idx], features[idx], confidence[idx] = s, p, f, c
            phi[idx], orig_features[idx], orig_phi[idx] = ph, of, oph
    return SwapScores(pos, z, scores, prefix_terms, features, confidence, phi, orig_features, orig_phi)
