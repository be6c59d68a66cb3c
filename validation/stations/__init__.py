"""Replay stations, one class per analytical station with the same name (see qmodel.stations)."""

from .chunked import ChunkedStation
from .colocated import ColocatedStation
from .decode import DecodeStation
from .kv_transfer import KVTransferStation
from .prefill import PrefillStation

__all__ = ["PrefillStation", "KVTransferStation", "DecodeStation", "ColocatedStation", "ChunkedStation"]
