"""``ProcessGroupMRC``: torch.distributed's collectives on an :mod:`mrc.coll` communicator.

Every op checks its tensors in the caller (a wrong device, layout, dtype or
size raises ``CollError`` there, before anything is queued or sent), then
queues the call on the communicator's :class:`mrc.coll.progress.Progress`
engine and returns a ``Work`` at once, whose future completes (with the
output tensors) when the data is in place. The engine runs the calls in
the order they were made, while the caller computes: DDP's reducer
launches each bucket's all-reduce during the backward pass.

A tensor is read and written through a numpy view of its storage (no
copy); bfloat16 travels as 2-byte records (:data:`mrc.coll.proto.BFLOAT16`)
and is reduced by torch on bfloat16 tensors (see ``_register_bf16``).
Ops whose outputs are lists (``allgather``, ``alltoall``) gather into the
communicator's result and copy out into each tensor once it is in place.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import torch
import torch.distributed as dist

from mrc.coll import proto
from mrc.coll.comm import CollError, Communicator
from mrc.coll.progress import Progress

#: torch dtypes and the numpy dtype their storage is read as
NP_DTYPES = {torch.float32: np.dtype(np.float32), torch.float16: np.dtype(np.float16),
             torch.float64: np.dtype(np.float64), torch.int32: np.dtype(np.int32),
             torch.int64: np.dtype(np.int64), torch.bfloat16: proto.BFLOAT16}
_R = dist.ReduceOp
#: torch's reduce ops and mrc.coll's (AVG: a sum divided by the group's size where it lands)
OPS = {_R.SUM: "sum", _R.AVG: "sum", _R.PRODUCT: "prod", _R.MIN: "min", _R.MAX: "max"}


def _register_bf16() -> None:
    """bfloat16's reductions, on torch bfloat16 tensors over the communicator's buffers (no copy)."""
    def view(a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)

    for op, f in (("sum", torch.add), ("max", torch.maximum), ("min", torch.minimum), ("prod", torch.mul)):
        def red(acc, x, f=f):
            a = view(acc)
            f(a, view(x), out=a)
        proto.REDUCERS[(proto.BFLOAT16, op)] = red


_register_bf16()


def as_numpy(t: torch.Tensor, what: str = "the tensor") -> np.ndarray:
    """A numpy view of ``t``'s storage (CollError where the backend cannot take ``t``)."""
    if not isinstance(t, torch.Tensor):
        raise CollError(f"{what} must be a torch.Tensor, not {type(t).__name__}")
    if t.device.type != "cpu":
        raise CollError(f"{what} is on {t.device}: backend mrc moves CPU tensors")
    if t.dtype not in NP_DTYPES:
        raise CollError(f"{what} has dtype {t.dtype}: backend mrc takes "
                        f"{', '.join(str(d).removeprefix('torch.') for d in NP_DTYPES)}")
    if not t.is_contiguous():
        raise CollError(f"{what} is not contiguous: pass t.contiguous()")
    if t.is_sparse or t.is_complex():
        raise CollError(f"{what} is sparse or complex: backend mrc takes dense real tensors")
    d = t.detach()
    if t.dtype == torch.bfloat16:
        return d.view(torch.int16).numpy().view(proto.BFLOAT16)
    return d.numpy()


def _op(reduce_op, t: torch.Tensor) -> tuple[str, bool]:
    """mrc.coll's op for torch's ``reduce_op``, and whether the result is then divided (AVG)."""
    op = reduce_op.op if hasattr(reduce_op, "op") else reduce_op
    if op not in OPS:
        raise CollError(f"reduce op {str(op).split('.')[-1]} is not one backend mrc runs: use SUM, AVG, PRODUCT, "
                        f"MIN or MAX")
    avg = op == _R.AVG
    if avg and not t.is_floating_point():
        raise CollError(f"AVG of {t.dtype} would round: backend mrc averages floating-point tensors only")
    return OPS[op], avg


class Work(dist.Work):
    """An op in flight: ``wait()`` returns True once its outputs are in place and raises what the op
    failed with (``CommAborted``, naming the rank at fault); ``get_future()`` completes with the output
    tensors (DDP's reducer and communication hooks chain on it)."""

    def __init__(self, fut: torch.futures.Future, outputs: list[torch.Tensor]) -> None:
        super().__init__()
        self._fut, self._outputs = fut, outputs

    def wait(self, timeout=None) -> bool:
        """Block until the op is done: True, or the op's error raised."""
        self._fut.wait()     # raises the op's error
        return True

    def is_completed(self) -> bool:
        """Whether the op has finished (well or not)."""
        return self._fut.done()

    def is_success(self) -> bool:
        """Whether the op has finished without an error."""
        if not self._fut.done():
            return False
        try:
            self._fut.wait()
        except Exception:  # noqa: BLE001
            return False
        return True

    def get_future(self) -> torch.futures.Future:
        """The future that completes with the output tensors."""
        return self._fut

    def result(self) -> list[torch.Tensor]:
        """The output tensors."""
        return self._outputs


def _same(ts: list[torch.Tensor], like: torch.Tensor, what: str) -> None:
    for i, t in enumerate(ts):
        if t.dtype != like.dtype or t.numel() != like.numel():
            raise CollError(f"{what}[{i}] has {t.numel()} {t.dtype}; every one must have {like.numel()} {like.dtype}")


class ProcessGroupMRC(dist.ProcessGroup):
    """One rank's process group over ``comm``, moved by ``engine`` (which may move other ranks'
    communicators as well: every rank of an in-memory world)."""

    def __init__(self, comm: Communicator, engine: Progress, owned: tuple = ()) -> None:
        super().__init__(comm.rank, comm.nranks)
        self._comm, self._eng, self._owned = comm, engine, owned
        self.n = comm.nranks

    # ------------------------------------------------------------------ plumbing
    def getBackendName(self) -> str:  # noqa: N802 (torch's name)
        """``mrc``."""
        return "mrc"

    @property
    def comm(self) -> Communicator:
        """The communicator (its ``stats`` and ``qp_counters()``)."""
        return self._comm

    def _submit(self, calls: list, outputs: list[torch.Tensor]):
        """Queue ``calls`` (each: start(comm) -> handle, or (start, then(result))); the Work completes
        with ``outputs`` after the last one, or fails with the first error."""
        fut = torch.futures.Future()
        state = {"left": len(calls), "failed": False}

        def failed(e: BaseException) -> None:
            if not state["failed"]:
                state["failed"] = True
                fut.set_exception(e)

        for call in calls:
            start, then = call if isinstance(call, tuple) else (call, None)

            def done(res, then=then) -> None:
                if state["failed"]:
                    return
                try:
                    if then is not None:
                        then(res)
                except Exception as e:  # noqa: BLE001 (the op's failure is the caller's)
                    failed(e)
                    return
                state["left"] -= 1
                if state["left"] == 0:
                    fut.set_result(outputs)

            self._eng.submit(self._comm, start, done, failed)
        if not calls:
            fut.set_result(outputs)
        return Work(fut, outputs)

    def _reduce_call(self, x: np.ndarray, t: torch.Tensor, op: str, avg: bool, kind: str = "all_reduce", out=None):
        def start(c, x=x, out=x if out is None else out):
            return getattr(c, kind)(x, op, out=out, async_op=True)

        return (start, (lambda _res, t=t: t.div_(self.n)) if avg else None)

    # ------------------------------------------------------------------ collectives
    def allreduce(self, tensors, opts=None):
        """Every tensor of ``tensors`` becomes the reduction over the ranks (in place)."""
        opts = opts if opts is not None else dist.AllreduceOptions()
        calls = []
        for i, t in enumerate(tensors):
            x = as_numpy(t, f"tensors[{i}]")
            op, avg = _op(opts.reduceOp, t)
            calls.append(self._reduce_call(x, t, op, avg))
        return self._submit(calls, list(tensors))

    def allreduce_coalesced(self, tensors, opts=None):
        """As :meth:`allreduce`, the tensors one after the other."""
        return self.allreduce(tensors, opts if opts is not None else dist.AllreduceCoalescedOptions())

    def broadcast(self, tensors, opts=None):
        """``opts.rootRank``'s tensors land in every rank's (in place)."""
        opts = opts if opts is not None else dist.BroadcastOptions()
        root = opts.rootRank
        if not 0 <= root < self.n:
            raise CollError(f"root {root} is not a rank of this group (0 to {self.n - 1})")
        xs = [as_numpy(t, f"tensors[{i}]") for i, t in enumerate(tensors)]
        calls = [lambda c, x=x: c.broadcast(x, root, async_op=True) for x in xs]
        return self._submit(calls, list(tensors))

    def allgather(self, output_tensors, input_tensors, opts=None):
        """``output_tensors[0][r]`` gets rank r's ``input_tensors[0]``."""
        if len(output_tensors) != 1 or len(input_tensors) != 1:
            raise CollError("allgather takes one input tensor and one list of outputs per process")
        t, outs = input_tensors[0], output_tensors[0]
        x = as_numpy(t, "the input")
        if len(outs) != self.n:
            raise CollError(f"allgather needs {self.n} output tensors (one per rank), not {len(outs)}")
        _same(outs, t, "output_tensor_list")
        ys = [as_numpy(o, f"output_tensor_list[{i}]") for i, o in enumerate(outs)]

        def then(res):
            k = x.size
            for r, y in enumerate(ys):
                y.reshape(-1)[...] = res[r * k:(r + 1) * k]

        return self._submit([(lambda c: c.all_gather(x, async_op=True), then)], list(outs))

    def all_gather_single(self, output, input, opts=None):  # noqa: A002 (torch's name)
        """``output`` is every rank's ``input`` concatenated in rank order (all_gather_into_tensor)."""
        x = as_numpy(input, "the input")
        y = as_numpy(output, "the output")
        if output.dtype != input.dtype or output.numel() != self.n * input.numel():
            raise CollError(f"the output has {output.numel()} {output.dtype}; it must have {self.n} x "
                            f"{input.numel()} {input.dtype}")
        return self._submit([lambda c: c.all_gather(x, out=y.reshape(-1), async_op=True)], [output])

    _allgather_base = all_gather_single

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        """``output_tensors[0]`` gets the reduction of every rank's ``input_tensors[0][rank]``."""
        opts = opts if opts is not None else dist.ReduceScatterOptions()
        if len(output_tensors) != 1 or len(input_tensors) != 1:
            raise CollError("reduce_scatter takes one output tensor and one list of inputs per process")
        out, ins = output_tensors[0], input_tensors[0]
        as_numpy(out, "the output")
        if len(ins) != self.n:
            raise CollError(f"reduce_scatter needs {self.n} input tensors (one per rank), not {len(ins)}")
        _same(ins, out, "input_list")
        for i, t in enumerate(ins):
            as_numpy(t, f"input_list[{i}]")
        # one contiguous input (a copy), then as reduce_scatter_tensor
        return self.reduce_scatter_single(out, torch.cat([t.reshape(-1) for t in ins]), opts)

    def reduce_scatter_single(self, output, input, opts=None):  # noqa: A002
        """``output`` gets block ``rank`` of the reduction of every rank's ``input`` (reduce_scatter_tensor)."""
        opts = opts if opts is not None else dist.ReduceScatterOptions()
        x, y = as_numpy(input, "the input"), as_numpy(output, "the output")
        if output.dtype != input.dtype or input.numel() != self.n * output.numel():
            raise CollError(f"the input has {input.numel()} {input.dtype}; it must have {self.n} x "
                            f"{output.numel()} {output.dtype}")
        op, avg = _op(opts.reduceOp, output)
        return self._submit([self._reduce_call(x, output, op, avg, "reduce_scatter", y.reshape(-1))], [output])

    _reduce_scatter_base = reduce_scatter_single

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):  # noqa: A002
        """Rows of ``input`` go to the ranks in ``input_split_sizes`` (equal blocks when empty); the
        rows from each rank land in ``output`` in rank order, ``output_split_sizes`` of them."""
        x, y = as_numpy(input, "the input"), as_numpy(output, "the output")
        if output.dtype != input.dtype:
            raise CollError(f"the output is {output.dtype}, the input {input.dtype}")
        if not output_split_sizes and not input_split_sizes:
            if input.numel() != output.numel() or input.numel() % self.n:
                raise CollError(f"all_to_all_single without split sizes needs input and output of the same size, "
                                f"{self.n} equal blocks: {input.numel()} and {output.numel()} elements")
            return self._submit([lambda c: c.all_to_all(x.reshape(-1), out=y.reshape(-1), async_op=True)],
                                [output])
        sc = self._counts(input, input_split_sizes, "input_split_sizes")
        rc = self._counts(output, output_split_sizes, "output_split_sizes")
        return self._submit([lambda c: c.all_to_all_v(x.reshape(-1), sc, rc, out=y.reshape(-1), async_op=True)],
                            [output])

    alltoall_base = all_to_all_single

    def _counts(self, t: torch.Tensor, splits, what: str) -> list[int]:
        rows = t.shape[0] if t.dim() else 1
        row = t.numel() // rows if rows else 0
        if not splits:
            if rows % self.n:
                raise CollError(f"{what} is empty, so the {rows} rows must split into {self.n} equal blocks")
            splits = [rows // self.n] * self.n
        splits = [int(s) for s in splits]
        if len(splits) != self.n or any(s < 0 for s in splits) or sum(splits) != rows:
            raise CollError(f"{what} {splits} must be {self.n} counts that add up to the {rows} rows of dim 0")
        return [s * row for s in splits]

    def alltoall(self, output_tensors, input_tensors, opts=None):
        """``input_tensors[j]`` goes to rank j; rank i's lands in ``output_tensors[i]``."""
        if len(output_tensors) != self.n or len(input_tensors) != self.n:
            raise CollError(f"alltoall needs {self.n} input and {self.n} output tensors")
        dt = input_tensors[0].dtype
        for i, t in enumerate([*input_tensors, *output_tensors]):
            as_numpy(t, f"tensor {i}")
            if t.dtype != dt:
                raise CollError(f"alltoall's tensors must share one dtype: {t.dtype} and {dt}")
        sc = [t.numel() for t in input_tensors]
        rc = [t.numel() for t in output_tensors]
        x = as_numpy(torch.cat([t.reshape(-1) for t in input_tensors]))
        ys = [as_numpy(o) for o in output_tensors]

        def then(res):
            off = 0
            for y, n in zip(ys, rc, strict=True):
                y.reshape(-1)[...] = res[off:off + n]
                off += n

        return self._submit([(lambda c: c.all_to_all_v(x, sc, rc, async_op=True), then)], list(output_tensors))

    def barrier(self, opts=None):
        """Every rank has reached this call (an all-reduce of one int32)."""
        z = np.zeros(1, np.int32)
        return self._submit([lambda c: c.all_reduce(z, async_op=True)], [])

    # ------------------------------------------------------------------ not carried
    def _unsupported(self, what: str, why: str = ""):
        raise CollError(f"{what} is not an op of backend mrc{why}: it runs all_reduce, broadcast, all_gather, "
                        f"reduce_scatter, all_to_all and barrier")

    def send(self, tensors, dst, tag=0):
        """Not carried (CollError)."""
        self._unsupported("send", " (its calls are collectives every rank makes in the same order)")

    def recv(self, tensors, src, tag=0):
        """Not carried (CollError)."""
        self._unsupported("recv", " (its calls are collectives every rank makes in the same order)")

    def recv_anysource(self, tensors, tag=0):
        """Not carried (CollError)."""
        self._unsupported("recv_anysource")

    def reduce(self, tensors, opts=None):
        """Not carried (CollError)."""
        self._unsupported("reduce", " (all_reduce gives every rank the result)")

    def gather(self, output_tensors, input_tensors, opts=None):
        """Not carried (CollError)."""
        self._unsupported("gather", " (all_gather gives every rank every tensor)")

    def scatter(self, output_tensors, input_tensors, opts=None):
        """Not carried (CollError)."""
        self._unsupported("scatter", " (broadcast, or all_to_all)")

    # ------------------------------------------------------------------ lifetime
    def report(self) -> dict:
        """This rank's figures: calls, bytes sent, QP errors and the QPs' counters."""
        c = self._comm
        return {"rank": c.rank, "calls": c.stats["calls"], "bytes_sent": c.stats["bytes_sent"],
                "qp_errors": c.stats["qp_errors"], "qp_counters": c.qp_counters()}

    def shutdown(self) -> None:
        """Stop the engine this group owns and leave the job (``destroy_process_group`` calls it). With
        ``MRC_TORCH_REPORT=PATH`` in the environment, :meth:`report` goes to ``PATH.RANK.json`` first,
        so that a script run unchanged still tells a bench what its QPs did."""
        path = os.environ.get("MRC_TORCH_REPORT")
        if path and self._owned:
            try:
                with open(f"{path}.{self._comm.rank}.json", "w") as f:
                    json.dump(self.report(), f)
            except OSError as e:   # the report is an extra: the group still shuts down
                print(f"mrc.torch: MRC_TORCH_REPORT: cannot write {path}.{self._comm.rank}.json: {e.strerror}",
                      file=sys.stderr)
        for x in self._owned:
            x.close()
        self._owned = ()

    def __repr__(self) -> str:
        return f"ProcessGroupMRC(rank={self._comm.rank}, size={self.n})"
