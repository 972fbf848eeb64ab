"""Byte accounting shared by every compressor of the harness.

Convention (the same for all compressors): `bytes_sent` counts, per rank, the bytes of every
tensor this rank hands to a collective: the payload itself, its padding to the group's largest
payload (gloo's all_gather needs equal sizes), and any size exchange. Dense fp32 all-reduce
therefore counts 4 bytes x parameters per rank per step; `dense_bytes` is that reference.
`wire_bytes` models what a ring actually moves per rank, used for the step-time estimates:
all-reduce of B bytes: 2(N-1)/N * B; all-gather of B bytes per rank: (N-1) * B.

DDP also broadcasts the module's buffers (batch norm's running statistics and counters) from
rank 0 before every forward pass (`broadcast_buffers`, on by default), for every compressor and
for dense training alike: `buffer_bytes` counts them, and `ratio_whole` is the ratio with them
on both sides (what a step puts on the wire, counted whole).
"""
from __future__ import annotations

from dataclasses import dataclass, asdict


@dataclass
class ByteCounter:
    bytes_sent: int = 0        # handed to collectives by this rank (the ratio's numerator)
    payload_bytes: int = 0     # of which: encoded payload before padding
    wire_bytes: float = 0.0    # ring-model bytes moved per rank
    dense_bytes: int = 0       # dense fp32 all-reduce reference
    buffer_bytes: int = 0      # DDP's buffer broadcast, every step (the same for dense)
    collectives: int = 0
    elements: int = 0          # gradient elements compressed
    encode_s: float = 0.0
    decode_s: float = 0.0
    steps: int = 0

    def allreduce(self, nbytes: int, world: int, payload: int | None = None) -> None:
        self.bytes_sent += nbytes
        self.payload_bytes += nbytes if payload is None else payload
        self.wire_bytes += 2.0 * (world - 1) / world * nbytes
        self.collectives += 1

    def allgather(self, nbytes: int, world: int, payload: int | None = None) -> None:
        self.bytes_sent += nbytes
        self.payload_bytes += nbytes if payload is None else payload
        self.wire_bytes += float(world - 1) * nbytes
        self.collectives += 1

    def snapshot(self) -> dict:
        return asdict(self)

    def load(self, d: dict) -> None:
        for k, v in d.items():
            if hasattr(self, k):
                setattr(self, k, type(getattr(self, k))(v))

    @property
    def ratio(self) -> float:
        return self.dense_bytes / self.bytes_sent if self.bytes_sent else float("inf")

    @property
    def ratio_whole(self) -> float:
        """The ratio with DDP's buffer broadcast counted on both sides."""
        sent = self.bytes_sent + self.buffer_bytes
        return (self.dense_bytes + self.buffer_bytes) / sent if sent else float("inf")
