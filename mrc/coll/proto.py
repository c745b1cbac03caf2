"""What crosses between two ranks of a communicator, besides the data: the
immediate of each WRITE_IMM and the call description a grant carries
(docs/coll.md, "Flow control: credits"). Pure: no I/O.

>>> imm_unpack(imm_pack(KIND_DATA, 17, 4100, 3))
(0, 1, 4, 3)
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from mrc.coll import schedule

#: bfloat16 has no numpy dtype: its arrays are 2-byte records of this dtype (its name says what they hold), which
#: numpy copies as bytes and never computes on. Its reductions are registered by whoever computes on it
#: (``import mrc.torch`` registers torch's); the communicator moves it as any other dtype.
BFLOAT16 = np.dtype([("bfloat16", "<u2")])
DTYPES = {np.dtype(t): i for i, t in enumerate(("float16", "float32", "float64", "int32", "int64"))}
DTYPES[BFLOAT16] = 5
DTYPE_NAMES = {i: ("bfloat16" if t == BFLOAT16 else t.name) for t, i in DTYPES.items()}
OPS = {"sum": (0, np.add), "max": (1, np.maximum), "min": (2, np.minimum), "prod": (3, np.multiply)}
OP_NAMES = {code: name for name, (code, _) in OPS.items()}
#: (dtype, op) -> reduce(acc, x): acc = op(acc, x) in place, for dtypes numpy does not compute on (BFLOAT16)
REDUCERS: dict = {}


def dtype_name(dt: np.dtype) -> str:
    """A dtype's name as the errors and the grants say it (``bfloat16`` for :data:`BFLOAT16`)."""
    return DTYPE_NAMES.get(DTYPES.get(dt, -1), str(dt))


def reducer(dt: np.dtype, op: str):
    """The in-place reduction ``f(acc, x)`` of ``op`` on arrays of ``dt``; None where nobody registered
    one (bfloat16 without ``mrc.torch``)."""
    if (dt, op) in REDUCERS:
        return REDUCERS[(dt, op)]
    if dt == BFLOAT16:
        return None
    uf = OPS[op][1]
    return lambda acc, x: uf(acc, x, out=acc)
COLL_CODES = {c: i for i, c in enumerate(schedule.COLLECTIVES)}

KIND_DATA, KIND_CREDIT, KIND_GRANT = 0, 1, 2
MAILBOX = 64                     # bytes of one mailbox entry (two per channel 0 region: by sequence parity)
DESC_STRUCT = struct.Struct("<IIBBBBiqqII")   # magic, seq, coll, dtype, op, pad, root, count, pair, nranks, rank
_MAGIC = 0x4D52434C


def imm_pack(kind: int, seq: int, tag: int, slot: int) -> int:
    """The immediate of a collective's WRITE_IMM: kind (2 bits), sequence
    mod 16 (4), message tag mod 4096 (12), slot (14)."""
    return (kind << 30) | ((seq & 0xF) << 26) | ((tag & 0xFFF) << 14) | (slot & 0x3FFF)


def imm_unpack(imm: int) -> tuple[int, int, int, int]:
    """An immediate's (kind, sequence, tag, slot)."""
    return imm >> 30, (imm >> 26) & 0xF, (imm >> 14) & 0xFFF, imm & 0x3FFF


@dataclass
class Desc:
    """A rank's description of one call, as a grant carries it."""

    seq: int
    coll: int
    dtype: int
    op: int
    root: int
    count: int
    pair: int        # elements the granting rank expects from the rank it grants
    nranks: int
    rank: int

    def pack(self) -> bytes:
        """The description as the bytes a grant carries."""
        return DESC_STRUCT.pack(_MAGIC, self.seq, self.coll, self.dtype, self.op, 0, self.root, self.count, self.pair,
                          self.nranks, self.rank)

    @classmethod
    def unpack(cls, b: bytes) -> Desc | None:
        """A description from a grant's bytes, or None when they are not one."""
        try:
            magic, seq, coll, dt, op, _, root, count, pair, n, rank = DESC_STRUCT.unpack_from(b)
        except struct.error:
            return None
        return cls(seq, coll, dt, op, root, count, pair, n, rank) if magic == _MAGIC else None

    def text(self) -> str:
        """The call in words, for an error that names two calls that differ."""
        coll = schedule.COLLECTIVES[self.coll] if self.coll < len(schedule.COLLECTIVES) else f"collective {self.coll}"
        op = f" {OP_NAMES.get(self.op, self.op)}" if coll in ("all_reduce", "reduce_scatter") else ""
        root = f" root {self.root}" if coll == "broadcast" else ""
        return f"call {self.seq}: {coll}{op} of {self.count} {DTYPE_NAMES.get(self.dtype, '?')}{root}"
