"""The verify op's random numbers: one call's uniforms (the acceptance tests) and exponentials (the
recovered and bonus tokens' races), drawn from a seed and offset, a generator or torch's default,
or replayed from an earlier draw so both backends emit the same tokens."""

from __future__ import annotations

import torch

from ..checks import check_device, check_shape, check_tensor

__all__ = ["draw_noise", "noise_for"]

_MASK63 = (1 << 63) - 1


def _noise_generator(device, seed, offset, generator):
    if generator is not None:
        return generator
    if seed is None:
        return None  # torch's default generator for that device
    g = torch.Generator(device=device)
    # (seed, offset) -> one 63-bit seed, so each cycle's noise is replayable
    g.manual_seed((int(seed) * 0x9E3779B97F4A7C15 + int(offset) * 0xBF58476D1CE4E5B9 + 1) & _MASK63)
    return g


def draw_noise(B: int, K: int, V: int, device, *, seed=None, offset=0, generator=None):
    """Noise for one call: ``uniforms [B, K]`` fp64 in (0, 1] and ``exponentials [B, V]`` fp32 in (0, inf] (Exp(1)).

    Uniforms are float64 because float32 ``rand`` can return exactly 0 (vLLM
    does the same). One row of exponentials per request serves both the
    recovered and the bonus token (a request emits exactly one of them).
    """
    g = _noise_generator(device, seed, offset, generator)
    u = torch.rand(B, K, dtype=torch.float64, device=device, generator=g)
    u = 1.0 - u  # [0, 1) -> (0, 1]
    # E = -log(U), U uniform in [0, 1): ~8x faster on CPU than exponential_
    # (U = 0 gives E = inf: that lane scores 0 and never wins a race)
    e = torch.rand(B, V, dtype=torch.float32, device=device, generator=g).log_().neg_()
    return u, e


def noise_for(all_greedy, randomness, B, K, V, device):
    """(uniforms, exponentials) of one call: none when every row is greedy, else ``randomness``'s
    ``noise`` (a :func:`draw_noise` result replayed: same tokens from either backend) or a fresh
    draw from its seed and offset or generator."""
    if all_greedy:
        return None, None
    noise = randomness.noise
    if noise is not None:
        if not (isinstance(noise, tuple) and len(noise) == 2):
            raise ValueError("randomness.noise must be the (uniforms, exponentials) pair draw_noise returns")
        u, e = noise
        check_tensor("randomness.noise[0]", u, 2, floating=True)
        check_shape("randomness.noise[0]", u, (B, K))
        check_device("randomness.noise[0]", u, device, "target_logits")
        check_tensor("randomness.noise[1]", e, 2, floating=True)
        check_shape("randomness.noise[1]", e, (B, V))
        check_device("randomness.noise[1]", e, device, "target_logits")
        return u, e
    return draw_noise(B, K, V, device, seed=randomness.seed, offset=randomness.offset, generator=randomness.generator)
