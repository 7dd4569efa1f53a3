"""The name of the built-in target/draft pair (SmolLM2-135M), in a module light enough for the CLI's start."""

DEFAULT_PAIR = "smollm2-135m"
