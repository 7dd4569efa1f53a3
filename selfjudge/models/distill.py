"""Distil a small draft from the target: KL(target || draft) on target-style chat text.

Job (:func:`distill`; CLI ``selfjudge distill-draft``):
  1. build chat-formatted training sequences (user prompt + assistant response, the
     target's chat template) from data kept out of every evaluation split: GSM8K
     test rows >= 500 (the "train" split of selfjudge.tasks) and ShareGPT
     conversations at decoded index >= 4000 (tasks holds out the first 2000);
  2. choose the draft head's sub-vocabulary: the most frequent tokens of the
     assistant parts of the training text, plus all special tokens;
  3. loop: run the teacher once on a new batch and cache its top-k log-probs on the
     assistant positions (so teacher compute is never repeated), then take a few
     optimiser steps on batches drawn from the cache. Loss: cross-entropy of the
     draft's sub-vocabulary distribution against the teacher's top-k probabilities
     (= KL up to the teacher's entropy, restricted to the teacher's top-k).
Checkpoints (trainable tensors, optimiser state, teacher cache, a JSON with seed /
data / steps / metrics) are written every few minutes; rerunning the same command
resumes. ``--export`` writes the shippable draft (fp16 layers + norm + vocab ids, JSON).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import torch

from selfjudge.writes import own_files

from .records import load_records, require_checkpoint, save_records, write_checkpoint

_log = logging.getLogger(__name__)

SHAREGPT_TRAIN_START = 4000
GSM8K_TRAIN_START = 500
EVAL_GSM8K_ROWS = range(300, 324)   # tasks "val" rows: never trained on
EVAL_SHAREGPT_ROWS = range(2000, 2100)  # held out from tasks' eval/val (first 2000) and from training


# ----------------------------------------------------------------------------- data
def encode_chat(tokenizer, messages: list[dict], max_len: int) -> tuple[list[int], int] | None:
    """Token ids of the chat (truncated to max_len) and the index where the assistant
    response starts; None if no response token survives truncation."""
    prompt = tokenizer.apply_chat_template(messages[:-1], tokenize=False, add_generation_prompt=True)
    full = prompt + messages[-1]["content"] + "<|im_end|>\n"
    p_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    ids = tokenizer(full, add_special_tokens=False)["input_ids"]
    if len(p_ids) >= max_len - 8:
        return None
    return ids[:max_len], len(p_ids)


def build_sequences(tokenizer, which: str, max_len: int, seed: int, n_sharegpt: int) -> list[tuple[list[int], int]]:
    """'train' or 'heldout' sequences (see module docstring for the splits), read through
    :mod:`selfjudge.tasks` (:meth:`~selfjudge.tasks.Task.reference_chats`)."""
    from selfjudge.tasks import load_task

    gsm8k, sharegpt = load_task("gsm8k"), load_task("sharegpt")
    if which == "train":
        msgs = gsm8k.reference_chats(GSM8K_TRAIN_START)
        msgs += sharegpt.reference_chats(SHAREGPT_TRAIN_START, SHAREGPT_TRAIN_START + n_sharegpt)
    elif which == "heldout":
        msgs = gsm8k.reference_chats(EVAL_GSM8K_ROWS.start, EVAL_GSM8K_ROWS.stop)
        msgs += sharegpt.reference_chats(EVAL_SHAREGPT_ROWS.start, EVAL_SHAREGPT_ROWS.stop)
    else:
        raise ValueError(f"which: expected 'train' or 'heldout', got {which!r}")
    seqs = [s for s in (encode_chat(tokenizer, m, max_len) for m in msgs) if s]
    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(seqs), generator=g).tolist()
    return [seqs[i] for i in order]


def choose_head_vocab(tokenizer, seqs, size: int) -> torch.Tensor:
    """The ``size`` most frequent response tokens (plus special tokens), sorted [Vs]."""
    counts = torch.zeros(len(tokenizer), dtype=torch.int64)
    for ids, start in seqs:
        counts += torch.bincount(torch.tensor(ids[start:]), minlength=len(tokenizer))[: len(tokenizer)]
    special = set(tokenizer.all_special_ids)
    for i in special:
        counts[i] = counts.max() + 1
    top = torch.topk(counts, min(size, len(tokenizer))).indices
    return torch.sort(top).values


# ----------------------------------------------------------------------------- teacher cache
def pad_batch(seqs, pad_id: int):
    """-> input_ids [B, T], attention_mask [B, T], loss_mask [B, T-1] (response positions
    whose next token is predicted)."""
    T = max(len(s) for s, _ in seqs)
    ids = torch.full((len(seqs), T), pad_id, dtype=torch.int64)
    att = torch.zeros((len(seqs), T), dtype=torch.int64)
    mask = torch.zeros((len(seqs), T), dtype=torch.bool)
    for b, (s, start) in enumerate(seqs):
        ids[b, : len(s)] = torch.tensor(s)
        att[b, : len(s)] = 1
        mask[b, max(start - 1, 0) : len(s) - 1] = True  # position t predicts token t+1
    return ids, att, mask


@torch.no_grad()
def teacher_topk(target, seqs, pad_id: int, k: int) -> dict[str, torch.Tensor]:
    """Teacher top-k log-probs at the response positions of a batch (right padded)."""
    ids, att, mask = pad_batch(seqs, pad_id)
    device = next(target.parameters()).device
    logits = target(input_ids=ids.to(device), attention_mask=att.to(device)).logits.float()  # [B, T, V]
    logp = torch.log_softmax(logits[mask.to(device)], dim=-1)  # [N, V]
    top = torch.topk(logp, k, dim=-1)
    return {"input_ids": ids, "attention_mask": att, "mask": mask,  # records live on the host
            "top_ids": top.indices.to("cpu", torch.int32), "top_logp": top.values.to("cpu", torch.float16)}


# ----------------------------------------------------------------------------- loss / metrics
def draft_sub_logits(draft, batch) -> torch.Tensor:
    """Draft logits over its sub-vocabulary at the batch's masked positions [N, Vs]."""
    device = next(draft.parameters()).device
    h = draft.model(input_ids=batch["input_ids"].to(device),
                    attention_mask=batch["attention_mask"].to(device)).last_hidden_state
    return draft.lm_head.sub_logits(h[batch["mask"].to(device)])


def distill_loss(sub_logits, batch, full_to_sub) -> tuple[torch.Tensor, torch.Tensor]:
    """sub_logits [N, Vs]; full_to_sub [V] int64 (-1 outside). Returns (loss, top-1 agree [N] bool)."""
    device = sub_logits.device
    logq = torch.log_softmax(sub_logits.float(), dim=-1)  # [N, Vs]
    tid = batch["top_ids"].to(device).long()  # [N, k]
    p = batch["top_logp"].to(device).float().exp()  # [N, k]
    sub = full_to_sub.to(device)[tid]  # [N, k]
    valid = sub >= 0
    lq = torch.gather(logq, 1, sub.clamp(min=0))  # [N, k]
    loss = -(p * lq * valid).sum(-1).mean()
    draft_top = sub_logits.argmax(-1)  # [N] sub index
    agree = (sub[:, 0] == draft_top) & valid[:, 0]
    return loss, agree


def collate(items: list[dict], pad_id: int) -> dict[str, torch.Tensor]:
    """Merge cached single-sequence records into one right-padded batch."""
    T = max(it["input_ids"].shape[-1] for it in items)
    out = {"input_ids": [], "attention_mask": [], "mask": [], "top_ids": [], "top_logp": []}
    for it in items:
        pad = T - it["input_ids"].shape[-1]
        out["input_ids"].append(torch.nn.functional.pad(it["input_ids"], (0, pad), value=pad_id))
        out["attention_mask"].append(torch.nn.functional.pad(it["attention_mask"], (0, pad)))
        out["mask"].append(torch.nn.functional.pad(it["mask"], (0, pad)))
        out["top_ids"].append(it["top_ids"])
        out["top_logp"].append(it["top_logp"])
    return {k: torch.cat(v) if k.startswith("top") else torch.stack(v) for k, v in out.items()}


def split_records(batch: dict) -> list[dict]:
    """Split a teacher batch into per-sequence records (trimmed to their length)."""
    recs, off = [], 0
    for b in range(batch["input_ids"].shape[0]):
        L = int(batch["attention_mask"][b].sum())
        n = int(batch["mask"][b].sum())
        recs.append({"input_ids": batch["input_ids"][b, :L], "attention_mask": batch["attention_mask"][b, :L],
                     "mask": batch["mask"][b, :L], "top_ids": batch["top_ids"][off:off + n],
                     "top_logp": batch["top_logp"][off:off + n]})
        off += n
    return recs


@torch.no_grad()
def evaluate(draft, records, pad_id, full_to_sub, bs: int = 8) -> dict:
    """Top-1 agreement and loss of the draft against cached teacher records."""
    n = agree = 0
    tot = 0.0
    for i in range(0, len(records), bs):
        batch = collate(records[i:i + bs], pad_id)
        loss, a = distill_loss(draft_sub_logits(draft, batch), batch, full_to_sub)
        n += a.numel(); agree += int(a.sum()); tot += float(loss) * a.numel()
    return {"agreement": agree / max(n, 1), "loss": tot / max(n, 1), "tokens": n}


# ----------------------------------------------------------------------------- checkpoint io
def _save_ckpt(out: Path, draft, opt, state: dict, records: list[dict], n_saved_records: int) -> int:
    """Commit trainable tensors, optimiser moments and the JSON in one step (:func:`write_checkpoint`);
    new teacher records go first to a shard named by its first record, so a rewrite after a
    kill replaces the uncommitted shard instead of adding a second copy."""
    from .draft_model import trainable_state

    opt_t = {}
    for i, p in enumerate(opt.param_groups[0]["params"]):
        st = opt.state.get(p, {})
        for k, v in st.items():
            opt_t[f"{i}.{k}"] = v if torch.is_tensor(v) else torch.tensor(v)
    if len(records) > n_saved_records:
        save_records(out / f"teacher-{n_saved_records:08d}.safetensors", records[n_saved_records:])
        n_saved_records = len(records)
    state["n_records"] = n_saved_records
    write_checkpoint(out, {"draft": trainable_state(draft), "optim": opt_t}, state)
    return n_saved_records


def _load_teacher_records(out: Path, n_records: int) -> list[dict]:
    """The first ``n_records`` committed teacher records (shards named by their first record;
    older runs numbered them 0, 1, ... in order, which sorts the same way)."""
    records: list[dict] = []
    for shard in own_files(out, "teacher-*.safetensors"):
        if len(records) >= n_records:
            break
        start = int(shard.stem.split("-")[1])
        if len(shard.stem.split("-")[1]) == 8:  # named by first record: drop an overlap with what is loaded
            records = records[:start]
        records += load_records(shard)
    return records[:n_records]


# ----------------------------------------------------------------------------- job
def distill(target_dir, out_dir, *, layers=(0, 29), head_vocab: int = 8192, seed: int = 0, max_len: int = 256,
            teacher_bs: int = 4, train_bs: int = 8, steps_per_teacher: int = 2, topk: int = 32, lr: float = 5e-4,
            warmup: int = 20, max_steps: int = 100000, max_minutes: float = 60.0, ckpt_minutes: float = 3.0,
            eval_every: int = 50, n_sharegpt: int = 6000, sequences=None, heldout=None, data: dict | None = None,
            vocab_ids: torch.Tensor | None = None,
            threads: int | None = None, verbose: bool = True, device: str | torch.device = "cpu") -> dict:
    """Run (or resume) distillation into ``out_dir``; returns the final state dict.

    ``sequences`` / ``heldout`` (lists of (token ids, response start)) override the
    built-in data: the target's own responses (``selfjudge train-eagle``'s text cache, for
    the comparison with the EAGLE head on the same data), or tiny sets in tests; ``data``
    says what they are and is recorded in ``state.json`` (a resume with other data is
    refused). ``vocab_ids`` [Vs] fixes the draft head's sub-vocabulary (e.g. the shipped
    draft's, which the EAGLE head also drafts from) instead of the training text's most
    frequent tokens. ``device``: where the teacher and the draft run (training stays float32;
    teacher records are kept on the host)."""
    from tqdm import tqdm
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from selfjudge.devices import resolve_device
    from selfjudge.folders import lock_folder

    if threads:
        torch.set_num_threads(threads)
    out = Path(out_dir)
    lock = lock_folder(out)  # one job per checkpoint folder, held until this call returns
    torch.manual_seed(seed)
    tok = AutoTokenizer.from_pretrained(target_dir)
    target = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32).eval().to(resolve_device(device))
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    sequences, heldout, data_desc = _distill_data(tok, max_len, seed, n_sharegpt, sequences, heldout, data)
    state, vocab_ids = _distill_state(out, data_desc, sequences, tok, head_vocab, vocab_ids, dict(
        step=0, next_seq=0, seed=seed, layers=list(layers), topk=topk, lr=lr, warmup=warmup, teacher_bs=teacher_bs,
        train_bs=train_bs, steps_per_teacher=steps_per_teacher, history=[], target=str(target_dir)))
    full_to_sub = torch.full((target.config.vocab_size,), -1, dtype=torch.int64)  # [V] -> sub-vocabulary index
    full_to_sub[vocab_ids] = torch.arange(vocab_ids.numel())
    draft, params = _trainable_draft(target, state["layers"], vocab_ids)
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0, betas=(0.9, 0.98))
    records = _resume(out, state, draft, opt, params)
    n_saved = len(records)
    held = _heldout_records(out / "heldout-teacher.safetensors", target, heldout, pad_id, teacher_bs, topk)
    if not state["history"]:
        draft.eval()
        state["history"].append({"step": 0, **evaluate(draft, held, pad_id, full_to_sub)})
        if verbose:
            _log.info(f"[distill] init held-out {state['history'][-1]}")

    hp = {"seed": seed, "lr": lr, "warmup": warmup, "teacher_bs": teacher_bs, "train_bs": train_bs}  # this call's
    t_start = t_ckpt = time.time()
    bar = tqdm(total=max_steps, initial=state["step"], desc="distill", disable=not verbose, mininterval=10)
    run_agree: list[float] = []
    while state["step"] < max_steps and (time.time() - t_start) < max_minutes * 60:
        if state["next_seq"] < len(sequences):
            batch_seqs = sequences[state["next_seq"]: state["next_seq"] + teacher_bs]
            records += split_records(teacher_topk(target, batch_seqs, pad_id, topk))
            state["next_seq"] += len(batch_seqs)
        draft.train()
        for _ in range(steps_per_teacher):
            loss = _train_step(draft, opt, params, records, state, hp, full_to_sub, pad_id, run_agree)
            bar.update(1)
            bar.set_postfix(loss=f"{loss:.3f}", agree=f"{sum(run_agree) / len(run_agree):.3f}", cached=len(records))
            if state["step"] % eval_every == 0:
                draft.eval()
                state["history"].append({"step": state["step"], "train_agree_50": sum(run_agree) / len(run_agree),
                                         **evaluate(draft, held, pad_id, full_to_sub)})
                draft.train()
                if verbose:
                    tqdm.write(f"[distill] step {state['step']} held-out {state['history'][-1]}")
            if state["step"] >= max_steps:
                break
        if time.time() - t_ckpt > ckpt_minutes * 60:
            n_saved = _save_ckpt(out, draft, opt, state, records, n_saved)
            t_ckpt = time.time()
    bar.close()
    draft.eval()
    if state["history"][-1]["step"] != state["step"]:
        state["history"].append({"step": state["step"], **evaluate(draft, held, pad_id, full_to_sub)})
    _save_ckpt(out, draft, opt, state, records, n_saved)
    if verbose:
        _log.info(f"[distill] stopped at step {state['step']}: held-out {state['history'][-1]}")
    lock.release()
    return state


def _distill_data(tok, max_len: int, seed: int, n_sharegpt: int, sequences, heldout, data: dict | None):
    """``(train sequences, held-out sequences, what they are)``: the built-in data unless given."""
    data_desc = {"gsm8k_rows": f"{GSM8K_TRAIN_START}..end",
                 "sharegpt_index": f"{SHAREGPT_TRAIN_START}..{SHAREGPT_TRAIN_START + n_sharegpt}",
                 "heldout": f"gsm8k rows {EVAL_GSM8K_ROWS.start}..{EVAL_GSM8K_ROWS.stop - 1}, sharegpt index "
                            f"{EVAL_SHAREGPT_ROWS.start}..{EVAL_SHAREGPT_ROWS.stop - 1}",
                 "max_len": max_len, "format": "chat template, user prompt + assistant response; loss on response tokens"}
    if sequences is None:
        sequences = build_sequences(tok, "train", max_len, seed, n_sharegpt)
        data_desc["source"] = "builtin"
    else:
        data_desc = {"source": "given", "n": len(sequences)}
    if heldout is None:
        heldout = build_sequences(tok, "heldout", max_len, seed, 0)
    else:
        data_desc["heldout"] = f"given: {len(heldout)} sequences"
    data_desc.update(data or {})
    return sequences, heldout, data_desc


def _distill_state(out: Path, data_desc: dict, sequences, tok, head_vocab: int, vocab_ids, settings: dict):
    """``(state, head vocabulary ids [Vs])``: the folder's state (refused when it was made on other
    data), else a new one with ``settings`` and the given or most frequent sub-vocabulary."""
    state_path = out / "state.json"
    if state_path.exists():
        state = json.loads(state_path.read_text())
        if state["data"] != data_desc:
            raise ValueError(f"out: {out} holds a distillation on other data ({state['data']}, not {data_desc}); "
                             "use another --out or delete it")
        return state, torch.tensor(state["head_vocab_ids"], dtype=torch.int64)
    vocab_ids = choose_head_vocab(tok, sequences, head_vocab) if vocab_ids is None else torch.sort(vocab_ids.long()).values
    state = {**settings, "head_vocab": int(vocab_ids.numel()), "data": data_desc,
             "n_train_sequences": len(sequences), "head_vocab_ids": vocab_ids.tolist()}
    return state, vocab_ids


def _trainable_draft(target, layers: list[int], vocab_ids: torch.Tensor):
    """The draft (the target's ``layers``, head restricted to ``vocab_ids``) and its trained
    parameters: the decoder layers and the final norm."""
    from .draft_model import build_draft_from_target, restrict_head

    draft = build_draft_from_target(target, layers)
    restrict_head(draft, vocab_ids)
    for p in draft.parameters():
        p.requires_grad_(False)
    params = []
    for name, p in draft.named_parameters():
        if name.startswith("model.layers.") or name == "model.norm.weight":
            p.requires_grad_(True)
            params.append(p)
    return draft, params


def _resume(out: Path, state: dict, draft, opt, params) -> list[dict]:
    """Load a checkpoint's draft tensors and optimiser moments; returns its teacher records."""
    if state["step"] == 0:
        return []
    draft.load_state_dict(require_checkpoint(out, state, "draft"), strict=False)
    osd = require_checkpoint(out, state, "optim")
    for i, p in enumerate(params):
        st = {k.split(".", 1)[1]: v.to(p.device) for k, v in osd.items() if k.split(".", 1)[0] == str(i)}
        if st:
            opt.state[p] = st
    return _load_teacher_records(out, state["n_records"])


def _heldout_records(path: Path, target, heldout, pad_id: int, teacher_bs: int, topk: int) -> list[dict]:
    """The teacher's top-k on the held-out sequences, computed once and kept in ``path``."""
    if path.exists():
        return load_records(path)
    held: list[dict] = []
    for i in range(0, len(heldout), teacher_bs):
        held += split_records(teacher_topk(target, heldout[i:i + teacher_bs], pad_id, topk))
    save_records(path, held)
    return held


def _train_step(draft, opt, params, records: list[dict], state: dict, hp: dict, full_to_sub, pad_id: int,
                run_agree: list[float]) -> float:
    """One optimiser step on the newest teacher records plus a seeded sample of older ones (``hp``:
    seed, lr, warmup, teacher_bs, train_bs); advances ``state["step"]``, keeps the last 50 top-1
    agreements in ``run_agree``; returns the loss."""
    teacher_bs, train_bs = hp["teacher_bs"], hp["train_bs"]
    g = torch.Generator().manual_seed(hp["seed"] * 1_000_003 + state["step"])
    newest = list(range(max(0, len(records) - teacher_bs), len(records)))
    pick = torch.randint(len(records), (max(train_bs - len(newest), 0),), generator=g).tolist()
    batch = collate([records[i] for i in newest + pick], pad_id)
    for gr in opt.param_groups:
        gr["lr"] = hp["lr"] * min(1.0, (state["step"] + 1) / max(hp["warmup"], 1))
    loss, agree = distill_loss(draft_sub_logits(draft, batch), batch, full_to_sub)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()
    state["step"] += 1
    run_agree.append(float(agree.float().mean()))
    del run_agree[:-50]
    return float(loss.detach())


def export_draft(ckpt_dir, export_dir, dtype=torch.float16, extra: dict | None = None) -> Path:
    """Write the shippable draft: ``draft.safetensors`` (trainable tensors in ``dtype``
    + ``head_vocab_ids``) and ``draft.json`` (config, layers, seed, data, steps, metrics)."""
    from selfjudge.writes import save_safetensors, write_json

    ckpt_dir, export_dir = Path(ckpt_dir), Path(export_dir)
    state = json.loads((ckpt_dir / "state.json").read_text())
    tensors = {k: v.to(dtype) for k, v in require_checkpoint(ckpt_dir, state, "draft").items()}
    tensors["head_vocab_ids"] = torch.tensor(state["head_vocab_ids"], dtype=torch.int32)
    export_dir.mkdir(parents=True, exist_ok=True)
    save_safetensors(tensors, export_dir / "draft.safetensors", metadata={"format": "selfjudge-draft-v1"})
    meta = {k: v for k, v in state.items() if k != "head_vocab_ids"}
    meta.update({"format": "selfjudge-draft-v1", "dtype": str(dtype).replace("torch.", ""),
                 "source_layers": state["layers"], "steps": state["step"]})
    meta.update(extra or {})
    write_json(export_dir / "draft.json", meta)
    return export_dir
