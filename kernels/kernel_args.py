"""A kernel's grouped parameters built from named values.

Every kernel of the verify op and the scorer takes its arguments in a few tuples (outputs, inputs,
sizes, layout, constexpr flags) and unpacks them by name; its ``*_ARGS`` constant lists the groups
and their members in that order. The launcher fills one dict of named values and
:func:`kernel_args` builds each kernel's arguments from it, so no call site orders them by hand.
"""

from __future__ import annotations

__all__ = ["kernel_args"]


def kernel_args(spec, values: dict) -> tuple:
    """The positional arguments of a kernel whose parameters ``spec`` groups (``(name, members)``
    pairs; ``members`` None: a plain parameter), from ``values`` (member name -> value)."""
    return tuple(tuple(values[m] for m in members) if members else values[name] for name, members in spec)
