"""``selfjudge import-head``: a published judge head (SelfJudge pickle, AutoJudge export) as a verifier file.

    selfjudge import-head Llama-3.1-8B-self-logistic-num20.pkl --model meta-llama/Llama-3.1-8B-Instruct \
        --hidden-size 4096 --out llama8b-selfjudge.safetensors

The pickle is read through an allowlist (numpy arrays and the two scikit-learn
estimators' attributes); a pickle that names any other global is refused before it runs.
"""

from __future__ import annotations

from selfjudge.cli.common import add_command, positive_int


def register(subparsers) -> None:
    p = add_command(subparsers, "import-head", "import a published judge head (.pkl / AutoJudge .json) as a verifier")
    p.add_argument("file", help="SelfJudge verifier_general/*.pkl, or AutoJudge's exported .json")
    p.add_argument("--target", "--model", dest="model", required=True, metavar="NAME|DIR",
                   help="the target the head was trained for, as verifiers name it (smollm2-135m, or its folder or "
                        "hub id); --model is the same option")
    p.add_argument("--hidden-size", type=positive_int, required=True, help="the target's hidden size")
    p.add_argument("--feature-offset", type=int, default=None,
                   help="first feature of the target's part (default: the head's last HIDDEN_SIZE features)")
    p.add_argument("--out", required=True, help="output verifier .safetensors")
    p.set_defaults(func=run)


def run(args) -> int:
    from selfjudge.judge.import_head import import_head

    verifier = import_head(args.file, model=args.model, hidden_size=args.hidden_size,
                           feature_offset=args.feature_offset, command=args.command_line)
    verifier.save(args.out)
    note = verifier.metadata["approximation"]
    print(f"wrote {args.out} (hidden size {verifier.hidden_size}, thresholds: {', '.join(verifier.thresholds) or 'none'})"
          + (f"\nnote: {note}" if note else ""))
    return 0
