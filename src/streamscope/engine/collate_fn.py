"""``litdata_collate``: LitData 0.2.76's default ``collate_fn`` for ``StreamingDataLoader``.

PyTorch's ``default_collate``, except for graph samples (PyTorch Geometric ``Data``/``HeteroData``, also as a
value of a dict sample), which are batched with ``torch_geometric.data.Batch.from_data_list`` when PyG is
installed and stay a list otherwise. streamscope writes no graph leaves, so its datasets never yield graphs;
the branch keeps a user's own samples (a ``transform`` that builds PyG objects) batching as in LitData.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["litdata_collate"]


def _is_graph(item: Any) -> bool:
    module = getattr(type(item), "__module__", "")
    return module.startswith("torch_geometric.data") and hasattr(item, "to_dict")


def _collate_graphs(items: list[Any]) -> Any:
    try:
        from torch_geometric.data import Batch
    except ImportError:
        return items
    return Batch.from_data_list(items)


def litdata_collate(items: list[Any]) -> Any:
    """Collate a batch: graph samples with PyG's ``Batch``, everything else with ``default_collate``."""
    from torch.utils.data import default_collate

    if not items:
        return items
    first = items[0]
    if _is_graph(first):
        return _collate_graphs(items)
    if isinstance(first, Mapping) and any(_is_graph(v) for v in first.values()):
        return {k: litdata_collate([item[k] for item in items]) for k in first}
    return default_collate(items)
