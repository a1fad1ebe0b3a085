"""Knobs of the loader: how DataLoader workers send their batches."""

from __future__ import annotations

from streamscope._core.knob_registry import knob

__all__: list[str] = []

knob(
    "loader_group_bytes",
    8_000_000,
    "bytes",
    ("STREAMSCOPE_LOADER_GROUP_BYTES",),
    "A DataLoader worker decodes its batches into shared-memory arenas of about this many bytes and sends each "
    "arena's batches as one group (one queue message; the first group is one batch). Arenas are reused once the "
    "training loop has dropped every batch in them (at most 8 pooled per worker). 0 sends every batch on its own.",
)
