"""Training an EAGLE head (:mod:`selfjudge.models.eagle`) on the target's own features.

Job (CLI ``selfjudge train-eagle``), resumable at every stage:

1. **text**: token sequences (prompt + response, with the response start). The
   default data is the target's *own* greedy responses to training prompts of the
   shipped tasks (:func:`self_generated_sequences`, cached in ``text.jsonl`` one
   batch at a time), so the head learns the distribution it will draft from;
   teacher-forced reference text (``selfjudge.tasks`` reference chats) is the
   alternative the job can measure against.
2. **features**: one target forward per batch gives the final (post-norm) hidden
   states of every position; they are cached in fp16 safetensors shards
   (``features-*.safetensors``) so the target never runs twice on a sequence.
3. **training**: entry j reads ``(f_j, x_{j+1})`` and predicts ``f_{j+1}``; loss =
   smooth-L1 on the feature + ``token_weight`` x cross-entropy of the head's token
   distribution against the target's (both through the target's LM head, on the
   draft sub-vocabulary when one is given), on response entries only; features get
   uniform noise (EAGLE's trick against its own drift). AdamW with a linear warm-up
   and a cosine decay. Held-out first-position agreement (the head's top-1 equals the
   target's greedy token) is logged every ``eval_every`` steps.

``state.json`` records seed, data, steps and the held-out agreement curve; rerunning
the same call resumes. :func:`export_eagle` writes the shippable head folder.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from pathlib import Path

import torch

from selfjudge.writes import own_files

from .records import load_records, read_checkpoint, require_checkpoint, save_records, write_checkpoint, write_state
from .eagle import DRAFT_VOCAB_FILE, EagleHead, head_config, save_eagle_head
from .fingerprint import model_fingerprint

_log = logging.getLogger(__name__)

__all__ = ["read_sequences", "self_generated_sequences", "eagle_loss", "train_eagle", "export_eagle", "new_head"]


# ----------------------------------------------------------------------------- text
def read_sequences(path: str | Path) -> list[tuple[list[int], int]]:
    """The ``(ids, response start)`` sequences of a text cache written by
    :func:`self_generated_sequences` (JSON lines ``{"ids": [...], "start": n}``); a torn last line
    (a killed writer) ends the list. Also the data other jobs reuse: ``selfjudge distill-draft --text``."""
    done: list[tuple[list[int], int]] = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            break  # a torn last line: that batch is redone
        done.append((rec["ids"], rec["start"]))
    return done


def self_generated_sequences(target, tokenizer, prompts: list[list[int]], path: str | Path, *,
                             max_new_tokens: int = 256, batch_size: int = 8, progress: bool = True
                             ) -> list[tuple[list[int], int]]:
    """(prompt + the target's greedy response, response start) for every prompt, cached in ``path``
    (JSON lines, appended one batch at a time: a rerun continues where a killed one stopped)."""
    from tqdm.auto import tqdm

    from selfjudge.writes import open_append

    from .generation import greedy_responses

    path = Path(path)
    done = read_sequences(path) if path.exists() else []
    path.parent.mkdir(parents=True, exist_ok=True)
    bar = tqdm(total=len(prompts), initial=min(len(done), len(prompts)), desc="self-text", disable=not progress)
    with open_append(path) as f:
        for b0 in range(len(done), len(prompts), batch_size):
            batch = prompts[b0:b0 + batch_size]
            for p, r in zip(batch, greedy_responses(target, tokenizer, batch, max_new_tokens)):
                done.append((list(p) + r, len(p)))
                f.write(json.dumps({"ids": done[-1][0], "start": len(p)}) + "\n")
            f.flush()
            os.fsync(f.fileno())
            bar.update(len(batch))
    bar.close()
    return done[: len(prompts)]


# ----------------------------------------------------------------------------- features
def _pad(seqs: list[tuple[list[int], int]], pad_id: int):
    """Right-padded ``ids [B, T]``, ``attention [B, T]`` and ``response [B, T]`` (position is a response token)."""
    T = max(len(s) for s, _ in seqs)
    ids = torch.full((len(seqs), T), pad_id, dtype=torch.long)
    attention = torch.zeros(len(seqs), T, dtype=torch.long)
    response = torch.zeros(len(seqs), T, dtype=torch.bool)
    for b, (s, start) in enumerate(seqs):
        ids[b, : len(s)] = torch.tensor(s)
        attention[b, : len(s)] = 1
        response[b, start: len(s)] = True
    return ids, attention, response


@torch.no_grad()
def target_features(target, seqs: list[tuple[list[int], int]], pad_id: int) -> list[dict[str, torch.Tensor]]:
    """One record per sequence: ``ids [T]``, ``features [T, H]`` fp16 (post-norm), ``response [T]`` bool."""
    ids, attention, response = _pad(seqs, pad_id)
    device = next(target.parameters()).device
    hidden = target.get_decoder()(input_ids=ids.to(device), attention_mask=attention.to(device)).last_hidden_state
    hidden = hidden.to("cpu", torch.float16)  # [B, T, H]: records live on the host
    out = []
    for b, (s, _) in enumerate(seqs):
        n = len(s)
        out.append({"ids": ids[b, :n].clone(), "features": hidden[b, :n].contiguous(),
                    "response": response[b, :n].clone()})
    return out


def _collate(records: list[dict[str, torch.Tensor]], pad_id: int):
    """Right-padded ``ids [B, T]``, ``features [B, T, H]`` fp32, ``scored [B, T-1]``: entries j whose
    target x_{j+2}... i.e. predicted feature f_{j+1} is a response position."""
    T = max(int(r["ids"].numel()) for r in records)
    H = records[0]["features"].shape[1]
    ids = torch.full((len(records), T), pad_id, dtype=torch.long)
    feats = torch.zeros(len(records), T, H)
    valid = torch.zeros(len(records), T, dtype=torch.bool)
    response = torch.zeros(len(records), T, dtype=torch.bool)
    for b, r in enumerate(records):
        n = int(r["ids"].numel())
        ids[b, :n], feats[b, :n], valid[b, :n], response[b, :n] = r["ids"], r["features"].float(), True, r["response"]
    return ids, feats, valid, response


# ----------------------------------------------------------------------------- loss
def eagle_loss(head: EagleHead, lm_head_weight: torch.Tensor, records: list[dict], pad_id: int, *,
               vocab_ids: torch.Tensor | None = None, token_weight: float = 0.1, noise: float = 0.0,
               generator: torch.Generator | None = None, full_agreement: bool = True):
    """Loss and first-position agreement of ``head`` on a batch of feature records.

    ``lm_head_weight`` [V, H] is the target's LM head; ``vocab_ids`` [Vd] restricts the
    head's token distribution. The agreement compares the head's top-1 with the target's
    greedy token over the full vocabulary (``full_agreement``, the held-out metric) or, cheaply,
    both on the draft vocabulary (for the progress bar). Returns ``(loss, agree [N] bool)``
    over the scored entries.
    """
    device = lm_head_weight.device
    ids, feats, valid, response = (t.to(device) for t in _collate(records, pad_id))
    entry_valid = valid[:, 1:] & valid[:, :-1]  # entry j: (f_j, x_{j+1}), predicts f_{j+1}
    scored = entry_valid & response[:, 1:]  # [B, T-1]
    f_in = feats[:, :-1]
    if noise > 0:  # drawn on the host: the same noise on every device
        f_in = f_in + ((torch.rand(f_in.shape, generator=generator) - 0.5) * 2 * noise).to(device)
    if vocab_ids is not None:
        vocab_ids = vocab_ids.to(device)
    out = head(ids[:, 1:], f_in, attention_mask=entry_valid.long()).last_hidden_state  # [B, T-1, H]
    pred, true = out[scored], feats[:, 1:][scored]  # [N, H]
    feature_loss = torch.nn.functional.smooth_l1_loss(pred, true)
    W = lm_head_weight if vocab_ids is None else lm_head_weight[vocab_ids]  # [V or Vd, H]
    logq = torch.log_softmax(pred @ W.T, dim=-1)
    with torch.no_grad():
        p = torch.softmax(true @ W.T, dim=-1)
    token_loss = -(p * logq).sum(-1).mean()
    if not full_agreement:  # cheap: the head's top-1 against the target's, both on the draft vocabulary
        return feature_loss + token_weight * token_loss, logq.argmax(-1) == p.argmax(-1)
    with torch.no_grad():
        greedy = (true @ lm_head_weight.T).argmax(-1)  # the target's own next token, full vocabulary
    drafted = logq.argmax(-1) if vocab_ids is None else vocab_ids[logq.argmax(-1)]
    return feature_loss + token_weight * token_loss, drafted == greedy


# ----------------------------------------------------------------------------- job
def new_head(target, *, init_layer: int | None = -1) -> EagleHead:
    """A head for ``target``: ``fc`` initialised to average the embedding and the feature, the decoder
    layer copied from the target's layer ``init_layer`` (None: random)."""
    head = EagleHead(head_config(target.config), target.get_input_embeddings())
    head.to(next(target.parameters()).device)
    H = int(target.config.hidden_size)
    with torch.no_grad():
        head.fc.weight.copy_(torch.cat([torch.eye(H), torch.eye(H)], 1) * 0.5)  # copy_ moves across devices
        head.fc.bias.zero_()
        if init_layer is not None:
            source = target.get_decoder().layers[init_layer].state_dict()
            source.pop("input_layernorm.weight", None)
            head.body.layers[0].load_state_dict(source, strict=False)
    return head


@torch.no_grad()
def evaluate(head, lm_head_weight, records, pad_id, vocab_ids=None, batch_size: int = 8,
             token_weight: float = 0.1) -> dict:
    """Held-out first-position agreement and loss (no noise)."""
    head.eval()
    n = agree = 0
    total = 0.0
    for i in range(0, len(records), batch_size):
        loss, a = eagle_loss(head, lm_head_weight, records[i:i + batch_size], pad_id, vocab_ids=vocab_ids,
                             token_weight=token_weight)
        n += a.numel()
        agree += int(a.sum())
        total += float(loss) * a.numel()
    return {"agreement": agree / max(n, 1), "loss": total / max(n, 1), "tokens": n}


def train_eagle(target, train: list[tuple[list[int], int]], heldout: list[tuple[list[int], int]], out_dir,
                *, pad_id: int, vocab_ids: torch.Tensor | None = None, steps: int = 1000, batch_size: int = 8,
                lr: float = 5e-4, warmup: int = 50, token_weight: float = 0.1, noise: float = 0.2, seed: int = 0,
                eval_every: int = 100, max_minutes: float = 60.0, ckpt_minutes: float = 3.0,
                feature_batch: int = 4, data: dict | None = None, progress: bool = True,
                init_from: str | Path | None = None) -> dict:
    """Train (or resume) a head into ``out_dir``; returns ``state`` (also ``out_dir/state.json``).

    ``train`` / ``heldout``: (token ids, response start) sequences. The data description
    ``data`` is recorded. ``init_from``: an exported head folder to start from (when
    ``out_dir`` holds no checkpoint yet). Stops after ``steps`` steps or ``max_minutes``; rerun to continue.
    """
    from tqdm.auto import tqdm

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    state_path = out / "state.json"
    state = json.loads(state_path.read_text()) if state_path.exists() else {
        "step": 0, "n_cached": 0, "seed": seed, "lr": lr, "warmup": warmup, "batch_size": batch_size,
        "token_weight": token_weight, "noise": noise, "data": data or {}, "n_train": len(train),
        "n_heldout": len(heldout), "vocab_ids": None if vocab_ids is None else vocab_ids.tolist(), "history": []}
    target.eval()
    lm_head = target.get_output_embeddings().weight.detach()  # [V, H]
    head, params, opt = _head_and_optimiser(out, state, target, lr, init_from)
    held = _heldout_features(out / "heldout-features.safetensors", target, heldout, pad_id, feature_batch)
    records = _train_features(out, state, target, train, pad_id, feature_batch, progress)

    def checkpoint() -> None:
        write_checkpoint(out, {
            "head": {k: v for k, v in head.state_dict().items() if not k.startswith("body.embed_tokens")},
            "optim": {f"{i}.{k}": (v if torch.is_tensor(v) else torch.tensor(v))
                      for i, p in enumerate(params) for k, v in opt.state.get(p, {}).items()},
        }, state)

    def held_out() -> dict:
        return {"step": state["step"], **evaluate(head, lm_head, held, pad_id, vocab_ids, token_weight=token_weight)}

    if not state["history"]:
        state["history"].append(held_out())
        _log.info(f"[train-eagle] step 0 held-out {state['history'][-1]}")
    t_start = t_ckpt = time.time()
    bar = tqdm(total=steps, initial=state["step"], desc="train-eagle", disable=not progress)
    while state["step"] < steps and time.time() - t_start < max_minutes * 60:
        head.train()
        g = torch.Generator().manual_seed(seed * 1_000_003 + state["step"])
        pick = torch.randint(len(records), (batch_size,), generator=g).tolist()
        step = state["step"]
        scale = min(1.0, (step + 1) / max(warmup, 1)) * 0.5 * (1 + math.cos(math.pi * min(step / max(steps, 1), 1.0)))
        for group in opt.param_groups:
            group["lr"] = lr * scale
        loss, agree = eagle_loss(head, lm_head, [records[i] for i in pick], pad_id, vocab_ids=vocab_ids,
                                 token_weight=token_weight, noise=noise, generator=g, full_agreement=False)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        state["step"] += 1
        bar.update(1)
        bar.set_postfix(loss=f"{float(loss.detach()):.3f}", agree=f"{float(agree.float().mean()):.3f}")
        if state["step"] % eval_every == 0:
            state["history"].append(held_out())
            _log.info(f"[train-eagle] step {state['step']} held-out {state['history'][-1]}")
        if time.time() - t_ckpt > ckpt_minutes * 60:
            checkpoint()
            t_ckpt = time.time()
    bar.close()
    if state["history"][-1]["step"] != state["step"]:
        state["history"].append(held_out())
    checkpoint()
    return state


def _head_and_optimiser(out: Path, state: dict, target, lr: float, init_from):
    """``(head, trained parameters, AdamW)``: from the folder's checkpoint, else warm-started from
    ``init_from`` (an exported head folder), else new."""
    head = new_head(target)
    saved_head = read_checkpoint(out, state, "head")
    if saved_head is not None:
        head.load_state_dict(saved_head, strict=False)
    elif init_from is not None:  # warm start from an exported head folder (published layout)
        from .eagle import load_eagle_head

        warm = load_eagle_head(init_from, target)
        head.fc.load_state_dict(warm.fc.state_dict())
        head.body.layers[0].load_state_dict(warm.body.layers[0].state_dict())
        state.setdefault("init_from", str(init_from))
    params = [p for n, p in head.named_parameters() if not n.startswith("body.embed_tokens")]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0, betas=(0.9, 0.95))
    moments = read_checkpoint(out, state, "optim")
    if moments is not None:
        for i, p in enumerate(params):
            st = {k.split(".", 1)[1]: v.to(p.device) for k, v in moments.items() if k.split(".", 1)[0] == str(i)}
            if st:
                opt.state[p] = st
    return head, params, opt


def _heldout_features(path: Path, target, heldout, pad_id: int, feature_batch: int) -> list[dict]:
    """The target's features of the held-out sequences, computed once and kept in ``path``."""
    if path.exists():
        return load_records(path)
    held = [r for i in range(0, len(heldout), feature_batch)
            for r in target_features(target, heldout[i:i + feature_batch], pad_id)]
    save_records(path, held)
    return held


def _train_features(out: Path, state: dict, target, train, pad_id: int, feature_batch: int, progress: bool):
    """The training sequences' features: the shards already cached (the target runs once per
    sequence), then the rest, 64 sequences per shard, the state written after each."""
    from tqdm.auto import tqdm

    shards = own_files(out, "features-*.safetensors")
    records = [r for p in shards for r in load_records(p)][: state["n_cached"]] if state["n_cached"] else []
    state["n_cached"] = len(records)  # shards deleted (or never copied with the run): recompute those features
    bar = tqdm(total=len(train), initial=state["n_cached"], desc="features", disable=not progress)
    while state["n_cached"] < len(train):
        chunk = train[state["n_cached"]: state["n_cached"] + 64]
        new = [r for i in range(0, len(chunk), feature_batch)
               for r in target_features(target, chunk[i:i + feature_batch], pad_id)]
        save_records(out / f"features-{state['n_cached']:06d}.safetensors", new)
        records += new
        state["n_cached"] += len(chunk)
        write_state(out, state)
        bar.update(len(chunk))
    bar.close()
    return records


def export_eagle(ckpt_dir, target, folder, extra: dict | None = None, dtype: torch.dtype | None = None) -> Path:
    """Write the shippable head (published layout + ``eagle.json`` with seed, data, steps, curve);
    ``dtype`` (e.g. ``torch.float16``) halves the file; loading casts back to the target's dtype."""
    ckpt_dir = Path(ckpt_dir)
    state = json.loads((ckpt_dir / "state.json").read_text())
    head = new_head(target, init_layer=None)
    head.load_state_dict(require_checkpoint(ckpt_dir, state, "head"), strict=False)
    meta = {k: v for k, v in state.items() if k != "vocab_ids"}
    meta["vocab_size_of_draft_head"] = None if state.get("vocab_ids") is None else len(state["vocab_ids"])
    meta["target_fingerprint"] = model_fingerprint(target)  # a head reads this target's hidden states only
    meta.update(extra or {})
    if dtype is not None:
        head.fc.to(dtype)
        head.body.layers.to(dtype)
    folder = save_eagle_head(head, folder, meta)
    if state.get("vocab_ids") is not None:
        from selfjudge.writes import save_safetensors

        save_safetensors({"vocab_ids": torch.tensor(state["vocab_ids"], dtype=torch.int64)},
                         Path(folder) / DRAFT_VOCAB_FILE)
    return folder
