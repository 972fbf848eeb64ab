"""The one record type every trace reader produces and memctl consumes (C struct mc_record)."""
import numpy as np   # (imported lazily by pimrt memsim: RECORD_DTYPE is made on first use)

#: the fields of RECORD_DTYPE, as the C struct mc_record lays them out (24 bytes)
RECORD_FIELDS = [
    ("cycle", "<u8"),
    ("addr", "<u8"),
    ("value", "<u4"),
    ("op", "u1"),
    ("requestor", "u1"),
    ("param", "<u2"),
]


def __getattr__(name: str):
    if name == "RECORD_DTYPE":   # made on first use, so importing this module needs no numpy
        dtype = globals()["RECORD_DTYPE"] = np.dtype(RECORD_FIELDS)
        assert dtype.itemsize == 24
        return dtype
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# op codes
READ, WRITE, LAYER, PARAM, BARRIER = 0, 1, 2, 3, 4
# per-requestor stream markers (the record's requestor says whose stream):
DELAY = 5    # the stream pauses `value` cycles (compute time)
SIGNAL = 6   # event `value` fires once the stream's earlier requests have completed
WAIT = 7     # the stream waits until event `value` has fired
COMPUTE = 8  # the requestor computes `value` cycles while the requests after it issue; its
             # next COMPUTE, DELAY, SIGNAL, WAIT or BARRIER waits until that is done
OP_NAMES = {READ: "READ", WRITE: "WRITE", LAYER: "LAYER", PARAM: "PARAM", BARRIER: "BARRIER",
            DELAY: "DELAY", SIGNAL: "SIGNAL", WAIT: "WAIT", COMPUTE: "COMPUTE"}
LAST_OP = COMPUTE

# requestors
HOST, PIM = 0, 1
REQUESTOR_NAMES = {HOST: "host", PIM: "pim"}

# PARAM ids (authority policy parameters); value is an unsigned 32-bit integer
PARAM_IDS = {
    "high_watermark": 1,       # sets both host_ and pim_high_watermark
    "host_high_watermark": 2,  # host takes the channel once this many host requests wait
    "pim_high_watermark": 3,   # PIM takes the channel once this many PIM requests wait
    "epoch_cap": 4,            # longest epoch (cycles) while the other side waits
    "min_epoch": 5,            # shortest epoch before a watermark hand-over
    "low_watermark": 6,        # sets both host_ and pim_low_watermark
    "host_low_watermark": 7,   # the host gives way to a waiting PIM at its high watermark
    "pim_low_watermark": 8,    #   only once its own queue is down to this (and vice versa)
    "host_epoch_cap": 9,       # longest host epoch while the PIM waits (0: epoch_cap)
}
PARAM_NAMES = {v: k for k, v in PARAM_IDS.items()}
