"""The KV-cache handoff between the prefill and the decode pool, as a queueing station.

This package re-exports its modules' public names (import from ``qmodel.stations.kv_transfer``):

* :mod:`~qmodel.stations.kv_transfer.station`  :class:`KVTransferStation`, the link station
  (dedicated, FCFS and fair sharing; serialized and layer-wise transfers; formulas in its docstring).
* :mod:`~qmodel.stations.kv_transfer.transfer`  per-request bytes and exposed transfer times.
* :mod:`~qmodel.stations.kv_transfer.batch_work`  the work of batch releases: the compound law and
  the work ahead of a request in its batch (the link's M^X/G/1 wait).
"""

from __future__ import annotations

from qmodel.stations.kv_transfer.station import KVTransferStation, Mode, Sharing
from qmodel.stations.kv_transfer.transfer import bandwidth_needed_bytes_per_s, kv_transfer_bytes, layerwise_exposed_s

__all__ = ["KVTransferStation", "bandwidth_needed_bytes_per_s", "layerwise_exposed_s", "kv_transfer_bytes", "Sharing",
           "Mode"]
