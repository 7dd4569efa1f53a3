"""GPU check: compile the Triton kernels on CUDA, compare them with their PyTorch
twins, and time them. Writes one JSON file with one entry per named check.

    python bench/gpu_check.py --out gpu_check.json            # on a GPU machine (H200), < 5 min
    python bench/gpu_check.py --dry-run --out /tmp/dry.json   # CPU: tiny shapes, interpreter, no timing claims

Checks are registered in ``CHECKS`` (name -> function(args) -> dict); other
kernels append their own. A failing check records its error and the script
carries on; the exit status is 1 if any check failed.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import platform
import sys
import time
import traceback

HBM_BYTES_PER_S = {"H200": 4.8e12, "H100": 3.35e12, "A100": 2.0e12}  # peak HBM bandwidth by GPU name


def _peak_bw(name: str) -> float | None:
    for key, bw in HBM_BYTES_PER_S.items():
        if key in name:
            return bw
    return None


def _gpu_facts() -> dict:
    """The GPU's name, memory, compute capability, driver and CUDA versions, for the record."""
    import subprocess

    import torch
    import transformers

    props = torch.cuda.get_device_properties(0)
    facts = {"gpu": props.name, "gpu_memory_bytes": int(props.total_memory),
             "compute_capability": f"{props.major}.{props.minor}", "multiprocessors": props.multi_processor_count,
             "cuda_runtime": torch.version.cuda, "transformers": transformers.__version__}
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
        facts["driver"] = out.stdout.strip() or out.stderr.strip()
    except (OSError, subprocess.SubprocessError) as err:
        facts["driver"] = f"unknown ({err})"
    return facts


def _timer(dry: bool):
    """do_bench on CUDA (median µs); a plain wall-clock median on the CPU dry run."""
    if not dry:
        import triton.testing

        return lambda fn: triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median") * 1e3

    from selfjudge.timing import median_ms

    return lambda fn: median_ms(fn, repeats=3) * 1e3


# ------------------------------------------------------------------ verify


def _against_hf(drafts, logits, q, ours, bench) -> dict:
    """Hugging Face's ``_speculative_sampling`` (one request per call, its own noise) on the same
    inputs: time for all B requests, and its mean accepted count against ours (equal in
    expectation: the two walks accept with the same probabilities)."""
    import torch
    from transformers.generation.utils import _speculative_sampling

    B, K = drafts.shape
    prompt = torch.zeros(B, 4, dtype=torch.long, device=drafts.device)
    cand = torch.cat([prompt, drafts], 1)
    draft_logits = q.float().clamp_min(1e-30).log()  # HF takes draft logits; log q gives back q

    # transformers before 5.2x takes a positional ``is_done_candidate`` (False: no EOS among drafts)
    extra = (False,) if "is_done_candidate" in inspect.signature(_speculative_sampling).parameters else ()

    def run():
        return [_speculative_sampling(cand[b:b + 1], draft_logits[b:b + 1], K, logits[b:b + 1].float(), *extra)[1]
                for b in range(B)]

    accepted = torch.tensor([float(n) for n in run()])
    ours_mean = float(ours.num_accepted.float().mean())
    se = float(accepted.std()) / max(B, 1) ** 0.5 if B > 1 else float("nan")
    return {"hf_us_all_requests": bench(run), "hf_mean_accepted": float(accepted.mean()),
            "ours_mean_accepted": ours_mean, "hf_standard_error": se}


def _split_sweep(B: int, V: int, dtype, device, bench) -> list[dict]:
    """Tile, warps and chunk of the split kernels at one batch (K = 4; greedy and sampling without q):
    bare-kernel time and the bandwidth of one read of the logits."""
    import torch

    from selfjudge.kernels.verify import draw_noise
    from selfjudge.kernels.verify.launch import prepare_launch
    from selfjudge.kernels.verify.prepare import PaddedInputs, VerifyOptions

    K = 4
    g = torch.Generator(device=device).manual_seed(1)
    logits = (torch.randn(B, K + 1, V, device=device, generator=g) * 3).to(dtype)
    drafts = logits[:, :K].float().argmax(-1)
    n = torch.full((B,), K, device=device, dtype=torch.long)
    u, e = draw_noise(B, K, V, device, seed=1)
    rows = []
    for mode in ("greedy", "sample_no_q"):
        greedy = mode == "greedy"
        noise = (None, None) if greedy else (u, e)
        inputs = PaddedInputs(drafts, n, logits, VerifyOptions(
            torch.ones(B, device=device), torch.full((B,), greedy, device=device), all_greedy=greedy,
            uniforms=noise[0], exponentials=noise[1]))
        for bv in (1024, 2048, 4096):
            for nw in (4, 8, 16):
                for chunk in (None, 4 * bv, 16 * bv):
                    row = {"mode": mode, "BLOCK_V": bv, "num_warps": nw, "chunk": chunk or "auto"}
                    try:
                        us = bench(prepare_launch(inputs, block_v=bv, num_warps=nw, chunk=chunk).run)
                        row.update(kernel_us=us, GBps_logits_once=logits.numel() * 2 / (us * 1e-6) / 1e9)
                    except Exception as exc:  # e.g. out of resources
                        row["error"] = repr(exc)[:300]
                    rows.append(row)
    return rows


def check_verify(args) -> dict:
    import torch

    from selfjudge.kernels.verify import Randomness, draw_noise, verify
    from selfjudge.kernels.verify.launch import prepare_launch
    from selfjudge.kernels.verify.prepare import PaddedInputs, VerifyOptions

    dry = args.dry_run
    device = "cpu" if dry else "cuda"
    V = 1000 if dry else 128256
    batches = [1, 3] if dry else [1, 8, 64, 256]
    dtype = torch.bfloat16
    bench = _timer(dry)
    gpu = "cpu (dry run)" if dry else torch.cuda.get_device_name()
    peak = None if dry else _peak_bw(gpu)
    res = {"device": gpu, "Ks": [4, 8], "V": V, "dtype": "bf16", "peak_bytes_per_s": peak, "rows": []}
    g = torch.Generator(device=device).manual_seed(0)
    for K, B in ((K, B) for K in (4, 8) for B in batches):
        logits = (torch.randn(B, K + 1, V, device=device, generator=g) * 3).to(dtype)
        am = logits[:, :K].float().argmax(-1)
        rand_ids = torch.randint(0, V, (B, K), device=device, generator=g)
        drafts = torch.where(torch.rand(B, K, device=device, generator=g) < 0.7, am, rand_ids)
        n = torch.full((B,), K, device=device, dtype=torch.long)
        probs = torch.softmax(logits[:, :K].float() + torch.randn(B, K, V, device=device, generator=g), -1)
        u, e = draw_noise(B, K, V, device, seed=1)
        for mode in ("greedy", "sample_no_q", "sample_q_bf16"):
            temp = 0.0 if mode == "greedy" else 1.0
            q = probs.to(dtype) if mode == "sample_q_bf16" else None
            noise = None if mode == "greedy" else (u, e)
            kw = dict(temperature=temp, randomness=Randomness(noise=noise))
            a = verify(drafts, n, logits, q, backend="torch", **kw)
            b = verify(drafts, n, logits, q, backend="triton", **kw)
            row_equal = (a.output_token_ids == b.output_token_ids).all(-1)
            emitted = b.output_token_ids[b.output_token_ids >= 0]
            row = {
                "B": B, "K": K, "mode": mode,
                "rows_equal_to_twin": int(row_equal.sum()), "rows": B,
                "ids_in_range": bool(((emitted >= 0) & (emitted < V)).all()),
                "mean_accepted": float(b.num_accepted.float().mean()),
            }
            # bare kernels (outputs preallocated): split (the default) and fused; the whole op (wrapper included)
            inv_t = torch.full((B,), 1.0, device=device)
            greedy = torch.full((B,), temp == 0.0, device=device)
            options = VerifyOptions(inv_t, greedy, all_greedy=temp == 0.0, uniforms=None if temp == 0 else u,
                                    exponentials=None if temp == 0 else e)
            inputs = PaddedInputs(drafts, n, logits, options, draft_probs=q)
            row["kernel_us"] = bench(prepare_launch(inputs).run)
            row["fused_kernel_us"] = bench(prepare_launch(inputs, split=False).run)
            row["op_us"] = bench(lambda: verify(drafts, n, logits, q, backend="triton", **kw))
            row["twin_us"] = bench(lambda: verify(drafts, n, logits, q, backend="torch", **kw))
            logit_bytes = logits.numel() * logits.element_size()
            extra = (q.numel() * q.element_size() if q is not None else 0) + (0 if temp == 0 else e.numel() * 4)
            row["logit_bytes"] = logit_bytes
            row["all_bytes_upper_bound"] = logit_bytes + extra
            row["GBps_logits_once"] = logit_bytes / (row["kernel_us"] * 1e-6) / 1e9
            if peak:
                row["frac_of_peak_logits_once"] = row["GBps_logits_once"] * 1e9 / peak
            if mode == "sample_q_bf16":
                try:
                    row.update(_against_hf(drafts, logits, q, b, bench))
                except Exception as exc:  # keep the row: the comparison is an extra
                    row["hf_error"] = repr(exc)[:500]
            res["rows"].append(row)
            print(json.dumps(row), flush=True)
    if not dry:
        # launches per op call (the op should be one kernel plus tiny allocations)
        B = batches[-1]
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            verify(drafts, n, logits, None, backend="triton", temperature=1.0, randomness=Randomness(noise=(u, e)))
            torch.cuda.synchronize()
        names = [evt.name for evt in prof.events() if evt.device_type.name == "CUDA"]
        res["cuda_kernels_per_op_call"] = names
        for B_s in (64, batches[-1]):
            res["sweep_B%d" % B_s] = _split_sweep(B_s, V, dtype, device, bench)
    # pass criteria: greedy rows bit-exact, sampling rows >= 99% equal (exp rounding on GPU
    # may flip a comparison that sits within an ulp), all ids in range
    ok = all(r["ids_in_range"] for r in res["rows"])
    ok &= not any("hf_error" in r for r in res["rows"])
    ok &= all(r["rows_equal_to_twin"] == r["rows"] for r in res["rows"] if r["mode"] == "greedy")
    ok &= all(r["rows_equal_to_twin"] >= 0.99 * r["rows"] for r in res["rows"])
    res["ok"] = bool(ok)
    return res


CHECKS = [("verify", check_verify)]


# ------------------------------------------------------------------ scorer (helper "labelling")


def check_scorer(args) -> dict:
    """token_logprobs Triton kernel: TFLOP/s at R=8192, H=4096, V=128256 bf16 (bench/gpu_check_scorer.py)."""
    import gpu_check_scorer  # a sibling in bench/ (a script's folder is on sys.path)

    return gpu_check_scorer.check_scorer_tflops(dry=args.dry_run)


CHECKS.append(("scorer", check_scorer))


def check_engine(args) -> dict:
    """The engine on the default pair on CUDA: greedy equal to generate (fp32), bf16 tokens/s and m
    (bench/gpu_check_engine.py)."""
    import gpu_check_engine  # a sibling in bench/

    return gpu_check_engine.check_engine(dry=args.dry_run, n_prompts=args.engine_prompts, drafters=args.engine_drafters)


CHECKS.append(("engine", check_engine))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="gpu_check.json", help="JSON file to write")
    parser.add_argument("--only", nargs="*", default=None, help="names of checks to run (default: all)")
    parser.add_argument("--dry-run", action="store_true",
                        help="CPU, tiny shapes, Triton interpreter: exercises the script without a GPU")
    parser.add_argument("--engine-prompts", type=int, default=8, help="GSM8K eval prompts of the engine check")
    parser.add_argument("--engine-drafters", nargs="+", default=["prompt-lookup", "model"],
                        choices=["prompt-lookup", "model"], help="drafters the engine check measures")
    args = parser.parse_args(argv)
    if args.dry_run:
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
    import torch

    if not args.dry_run and not torch.cuda.is_available():
        print("no CUDA device: use --dry-run on a CPU machine", file=sys.stderr)
        return 2
    names = [n for n, _ in CHECKS]
    unknown = set(args.only or []) - set(names)
    if unknown:
        parser.error(f"unknown checks {sorted(unknown)}; known: {names}")
    report = {"python": platform.python_version(), "torch": torch.__version__, "dry_run": args.dry_run,
              "checks": {}}
    try:
        import triton

        report["triton"] = triton.__version__
    except ImportError:
        pass
    if not args.dry_run:
        report.update(_gpu_facts())
    failed = False
    for name, fn in CHECKS:
        if args.only and name not in args.only:
            continue
        t0 = time.time()
        try:
            result = fn(args)
        except Exception:
            result = {"ok": False, "error": traceback.format_exc()[-4000:]}
        result["seconds"] = time.time() - t0
        failed |= not result.get("ok", False)
        report["checks"][name] = result
        with open(args.out, "w") as f:  # rewrite after every check: partial results survive a timeout
            json.dump(report, f, indent=2)
        print(f"[{name}] ok={result.get('ok')} in {result['seconds']:.1f}s", flush=True)
    print(f"wrote {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
