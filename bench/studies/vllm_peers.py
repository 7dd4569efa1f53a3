"""vLLM (plain, ngram SD, ngram SD through this package's plugin lossless and with SelfJudge) and
this package's engine on the same prompts, interleaved; resumable.

    bash scripts/install_vllm.sh          # once: vLLM's CPU build in .venv-vllm
    python bench/studies/vllm_peers.py --out bench/results/vllm
    python bench/studies/vllm_peers.py --out bench/results/vllm --report-only

The study's code lives beside it: ``vllm_peers_run.py`` (the runs) and ``vllm_peers_report.py`` (the tables).
"""

import argparse
import logging
import shlex
import sys

from vllm_peers_report import write_report  # siblings in bench/studies/ (the script's folder is on sys.path)
from vllm_peers_run import ENGINE_METHODS, VLLM_METHODS, PeerSpec, run_peers


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="output folder (blocks/, results.json, results.md)")
    p.add_argument("--tasks", nargs="+", default=["summarize", "sharegpt", "gsm8k"])
    p.add_argument("--prompts", type=int, default=24, help="evaluation prompts per task")
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 8], help="sequences decoded together")
    p.add_argument("--chunk", type=int, default=8, help="prompts per interleaved block")
    p.add_argument("--k", type=int, default=3, help="draft tokens per step, every speculative method")
    p.add_argument("--threshold", default="quality:0.97", help="SelfJudge's operating point (both engines)")
    p.add_argument("--fallback-threshold", default="F", help="for a verifier without a validation curve")
    p.add_argument("--methods", nargs="+", default=[*VLLM_METHODS, *ENGINE_METHODS])
    p.add_argument("--vllm-python", default=".venv-vllm/bin/python", help="Python of the vLLM environment")
    p.add_argument("--kv-cache-gib", type=float, default=1.0, help="KV cache per vLLM engine")
    p.add_argument("--report-only", action="store_true", help="only rebuild results.* from the blocks")
    return p.parse_args(argv)


def main(argv) -> int:
    args = parse(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if not args.report_only:
        spec = PeerSpec(out_dir=args.out, tasks=tuple(args.tasks), prompts=args.prompts,
                        max_new_tokens=args.max_new_tokens, concurrencies=tuple(args.concurrency), chunk=args.chunk,
                        k=args.k, threshold=args.threshold, fallback_threshold=args.fallback_threshold,
                        methods=tuple(args.methods), vllm_python=args.vllm_python, kv_cache_gib=args.kv_cache_gib)
        run_peers(spec, "python bench/studies/vllm_peers.py " + shlex.join(argv))
    rows = write_report(args.out)
    print(f"{len(rows)} rows -> {args.out}/results.md")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
