"""The sample order: pure, vectorised functions of (dataset shape, weights, seed, epoch, topology, position).

Nothing here does I/O, reads the environment or touches torch.distributed.
"""

from stream_plugin.order.chunked import plan_rank_batches
from stream_plugin.order.layout import AllSamples
from stream_plugin.order.mixing import StreamWeight, WeightScheme, samples_per_stream, validate_weights
from stream_plugin.order.partition import (
    PassBatches,
    RankBatches,
    rank_worker_batches,
    remaining_global_batches,
)
from stream_plugin.order.plan import EpochOrder, OrderConfig, plan_epoch
from stream_plugin.order.random import permute, random_bits, rng_for, unpermute
from stream_plugin.order.sampling import SAMPLING_METHODS, SamplingMethod, epoch_samples, epoch_stream_samples
from stream_plugin.order.topology import Topology

__all__ = [
    "SAMPLING_METHODS",
    "AllSamples",
    "EpochOrder",
    "OrderConfig",
    "PassBatches",
    "RankBatches",
    "SamplingMethod",
    "StreamWeight",
    "Topology",
    "WeightScheme",
    "epoch_samples",
    "epoch_stream_samples",
    "permute",
    "plan_epoch",
    "plan_rank_batches",
    "random_bits",
    "rank_worker_batches",
    "remaining_global_batches",
    "rng_for",
    "samples_per_stream",
    "unpermute",
    "validate_weights",
]
