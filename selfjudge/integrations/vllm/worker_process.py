"""One vLLM engine in its own process, driven by JSON lines on stdin (one reply line each).

The first line is ``{"engine": kwargs}`` (:func:`.runner.engine_kwargs`); each next line is
``{"prompts": [[ids]], "max_tokens": N, "concurrency": C}`` or ``{"stop": true}``. A peer
benchmark keeps one such process per method alive and sends them the same prompts in turn, so
that the methods' timings interleave on a shared machine. Replies are ``{"ok": ...}`` or
``{"error": message}``; vLLM's own logging goes to stderr.
"""

from __future__ import annotations

import json
import sys


def main() -> None:
    from .runner import build_llm, generate_timed

    out = sys.stdout
    sys.stdout = sys.stderr  # vLLM and tqdm print; the protocol owns the real stdout
    llm = None
    for line in sys.stdin:
        request = json.loads(line)
        try:
            if "engine" in request:
                llm = build_llm(request["engine"])
                reply = {"ok": "ready"}
            elif request.get("stop"):
                break
            else:
                reply = {"ok": generate_timed(llm, request["prompts"], request["max_tokens"], request["concurrency"])}
        except Exception as err:  # reported to the driver, which names the method
            reply = {"error": f"{type(err).__name__}: {err}"}
        out.write(json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
