"""A dataset's whole epoch order and a reader's sample ids, through public paths only (for checks)."""

from __future__ import annotations

import numpy as np

from stream_plugin import StreamingDataset
from stream_plugin.order.plan import EpochOrder, plan_epoch
from stream_plugin.order.topology import Topology
from stream_plugin.reading.cursor import IterationPlan


def whole_order(dataset: StreamingDataset, plan: IterationPlan) -> EpochOrder:
    """Every rank's batches of ``plan``'s epoch, as the ``order`` maths plans it for ``dataset``."""
    assert dataset.batch_size is not None
    config = dataset.config.order_settings.order_config(
        global_batch_size=plan.epoch_batch_size,
        num_canonical_nodes=plan.num_canonical_nodes,
        device_batch_size=dataset.batch_size,
    )
    chosen = dataset.plan.planner.chosen_samples(plan.epoch)
    return plan_epoch(dataset.plan.table.shape, chosen, config, plan.epoch)


def sample_ids(dataset: StreamingDataset, plan: IterationPlan, topology: Topology) -> np.ndarray:
    """The global sample ids ``topology``'s (rank, worker) yields in ``plan``'s pass, in order."""
    return np.concatenate([np.zeros(0, np.int64), *dataset.sample_id_pieces(plan, topology)])
