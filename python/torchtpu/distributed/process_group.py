"""The ``torch.distributed`` backend ``"tpu_dist"``: one process per chip, collectives over tpu tensors.

transformers maps the ``tpu`` device to this name, and ``torchrun`` + ``init_process_group("tpu_dist")`` (or
``"cpu:gloo,tpu:tpu_dist"``) selects it. It bootstraps through the c10d store like every backend.

Where the data travels: the CPU plugin offers collectives only among the virtual chips of one process (its
``InProcessCollectives``; it has no Gloo or MPI transport and takes no key-value store), so between
processes there is no XLA collective to run. The collectives here therefore stage through the host: each
tpu tensor is read once, the operation runs on Gloo over the same store, and the result is written back
into the tpu tensor (one upload). CPU tensors given to this backend go to Gloo directly. Every operation is
complete when its ``Work`` is returned (``wait()`` returns at once), so ordering with later tpu ops is the
program order, as on a synchronous stream. Point-to-point calls are the exception: a send or receive waits
for its peer, so ``isend``/``irecv`` return at once (a ring exchange posts every send before any receive) and
a receive writes into its tpu tensor when its ``Work`` is waited for.
"""
from __future__ import annotations

import threading
from datetime import timedelta

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _create_work_from_future
from torch.futures import Future

BACKEND_NAME = "tpu_dist"


def _write_back(pairs) -> list:
    """Writes each host result into its tpu tensor; returns the targets (CPU tensors were filled by Gloo)."""
    with torch.no_grad():
        for target, result in pairs:
            if target.device.type == "tpu":
                target.copy_(result)
    return [target for target, _ in pairs]


def _done(result) -> dist.Work:
    future: Future = Future()
    future.set_result(result)
    return _create_work_from_future(future)


class _ReceiveWork(dist._Work):
    """A receive into tpu tensors: Gloo receives into host copies, which are written into the tpu tensors once,
    by the first of ``wait()``, a completed ``is_completed()`` or the future's waiting thread."""

    def __init__(self, gloo_work: dist.Work, pairs: list):
        super().__init__()
        self._gloo_work = gloo_work
        self._pairs = pairs  # (tpu tensor, its host copy)
        self._lock = threading.Lock()
        self._written = False
        self._future: Future | None = None

    def wait(self, timeout: timedelta | None = None) -> bool:
        with self._lock:
            if not self._written:
                if timeout is None:
                    self._gloo_work.wait()
                else:
                    self._gloo_work.wait(timeout)
                _write_back(self._pairs)
                self._written = True
        return True

    def is_completed(self) -> bool:
        if not self._written and self._gloo_work.is_completed():
            self.wait()  # received: write it now, so a loop polling is_completed() sees the tpu tensor filled
        return self._written

    def _source_rank(self) -> int:
        """The sending rank (``dist.recv`` without ``src`` returns it)."""
        self.wait()
        return self._gloo_work._source_rank()

    def get_future(self) -> Future:
        """Completes when the tensors are written, without blocking the caller (a thread waits for the peer)."""
        with self._lock:
            if self._future is None:
                self._future = Future()

                def finish(future: Future = self._future) -> None:
                    try:
                        self.wait()
                        future.set_result([target for target, _ in self._pairs])
                    except Exception as error:  # noqa: BLE001  (handed to whoever waits on the future)
                        future.set_exception(error)

                threading.Thread(target=finish, daemon=True, name="tpu_dist receive").start()
        return self._future


class ProcessGroupTPU(dist.ProcessGroup):
    """``torch.distributed`` process group for tpu tensors (see the module docstring for the data path)."""

    def __init__(self, store: dist.Store, rank: int, size: int, timeout: timedelta):
        super().__init__(rank, size)
        # The process takes its device now, as NCCL binds its GPU: libraries that set a device from LOCAL_RANK
        # when none is set yet (DeviceMesh) then keep this one. Each process has its own chip(s), from index 0.
        torch.tpu.init()
        self._gloo = dist.ProcessGroupGloo(store, rank, size, timeout)
        if dist.get_debug_level() == dist.DebugLevel.DETAIL:
            # As c10d does for its own backends under TORCH_DISTRIBUTED_DEBUG=DETAIL: a helper group compares each
            # collective's kind, shapes and dtypes across the ranks first, so a mismatch raises on every rank
            # instead of reducing garbage. (c10d cannot wrap this group itself: it is a ProcessGroup, not a
            # Backend.) `store` is already this group's own.
            self._gloo = dist.distributed_c10d._create_process_group_wrapper(self._gloo, BACKEND_NAME, store, rank,
                                                                             size, timeout)
        # c10d keeps a group's name and description on its backends (DeviceMesh, DTensor and FSDP2 find groups
        # by name): Gloo is registered as this group's backend, for CPU tensors, and as its default.
        self._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.GLOO, self._gloo)
        self._set_default_backend(dist.ProcessGroup.BackendType.GLOO)

    def getBackendName(self) -> str:  # noqa: N802  (c10d's name)
        return BACKEND_NAME

    def _get_backend_name(self) -> str:
        return BACKEND_NAME

    # Staging: a host copy of each tpu tensor in, the host results written back once the Gloo op has run.

    @staticmethod
    def _host(value):
        """`value` (a tensor, or a list of tensors or of lists) with each tpu tensor replaced by a host copy."""
        if isinstance(value, torch.Tensor):
            return value.detach().cpu() if value.device.type == "tpu" else value
        if isinstance(value, (list, tuple)):
            return [ProcessGroupTPU._host(v) for v in value]
        return value

    @staticmethod
    def _pairs(target, host):
        if isinstance(target, torch.Tensor):
            yield target, host
        else:
            for t, h in zip(target, host):
                yield from ProcessGroupTPU._pairs(t, h)

    def _call(self, gloo_method, *args, written: tuple[int, ...] = (0,)) -> dist.Work:
        """Runs `gloo_method` on host copies of `args`, then writes the results into the tpu tensors of the
        arguments at `written` (those the collective fills)."""
        host = [self._host(a) for a in args]
        gloo_method(*host).wait()
        # The future holds the filled tensors as one flat list, as Gloo's and NCCL's do.
        return _done(_write_back([pair for i in written for pair in self._pairs(args[i], host[i])]))

    @staticmethod
    def _each(single, outputs, inputs, opts) -> dist.Work:
        """A coalesced collective as its single form on each (output, input) pair."""
        for output, input in zip(outputs, inputs):
            single(output, input, opts)
        return _done(list(outputs))

    def allreduce(self, tensors, opts=None):
        return self._call(self._gloo.allreduce, list(tensors), opts or dist.AllreduceOptions())

    def allreduce_coalesced(self, tensors, opts=None):
        return self._call(self._gloo.allreduce_coalesced, list(tensors), opts or dist.AllreduceCoalescedOptions())

    def broadcast(self, tensors, opts=None):
        return self._call(self._gloo.broadcast, list(tensors), opts or dist.BroadcastOptions())

    def reduce(self, tensors, opts=None):
        return self._call(self._gloo.reduce, list(tensors), opts or dist.ReduceOptions())

    # Point-to-point: not waited for here (see the module docstring). A send's host copies are taken now, so
    # the tpu tensor may change after the call, as with a CUDA send once enqueued.

    def send(self, tensors, dst, tag):
        return self._gloo.send(self._host(list(tensors)), dst, tag)

    def recv(self, tensors, src, tag):
        host = self._host(list(tensors))
        return _ReceiveWork(self._gloo.recv(host, src, tag), list(zip(tensors, host)))

    def recv_anysource(self, tensors, tag):
        host = self._host(list(tensors))
        return _ReceiveWork(self._gloo.recv_anysource(host, tag), list(zip(tensors, host)))

    def barrier(self, opts=None):
        return self._gloo.barrier(opts or dist.BarrierOptions())

    def allgather(self, output_lists, inputs, opts=None):
        return self._call(self._gloo.allgather, output_lists, inputs, opts or dist.AllgatherOptions())

    def all_gather_single(self, output, input, opts=None):
        # NCCL takes any output of world size x the input's elements (SyncBatchNorm passes [1, N]); Gloo wants
        # the inputs stacked along dim 0, so it gets a view of that shape.
        if output.is_contiguous() and output.numel() == self.size() * input.numel():
            output = output.view(self.size() * input.shape[0], *input.shape[1:]) if input.dim() else output.view(-1)
        return self._call(self._gloo._allgather_base, output, input, opts or dist.AllgatherOptions())

    _allgather_base = all_gather_single  # the name older callers use

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        return self._each(self.all_gather_single, outputs, inputs, opts)

    def gather(self, output_lists, inputs, opts=None):
        return self._call(self._gloo.gather, output_lists, inputs, opts or dist.GatherOptions())

    def scatter(self, outputs, input_lists, opts=None):
        return self._call(self._gloo.scatter, outputs, input_lists, opts or dist.ScatterOptions())

    def reduce_scatter(self, outputs, input_lists, opts=None):
        return self._call(self._gloo.reduce_scatter, outputs, input_lists, opts or dist.ReduceScatterOptions())

    def reduce_scatter_single(self, output, input, opts=None):
        return self._call(self._gloo._reduce_scatter_base, output, input, opts or dist.ReduceScatterOptions())

    _reduce_scatter_base = reduce_scatter_single  # the name older callers use

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        return self._each(self.reduce_scatter_single, outputs, inputs, opts)

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        return self._call(self._gloo.alltoall_base, output, input, output_split_sizes, input_split_sizes,
                          opts or dist.AllToAllOptions())

    def alltoall(self, outputs, inputs, opts=None):
        return self._call(self._gloo.alltoall, outputs, inputs, opts or dist.AllToAllOptions())


# C++ callers reach these methods from inside a torch.compile'd region (DDP's reducer syncing its rebuilt buckets
# at the second step's forward): dynamo must run them as they are, not trace into a process group it sees as an
# opaque object.
for _name, _method in list(vars(ProcessGroupTPU).items()):
    if callable(_method) and not isinstance(_method, staticmethod) and _name != "__init__":
        setattr(ProcessGroupTPU, _name, torch._dynamo.disable(_method, recursive=True))


def _create(store, rank: int, size: int, timeout: timedelta) -> ProcessGroupTPU:
    return ProcessGroupTPU(store, rank, size, timeout)


def register() -> None:
    """Registers ``"tpu_dist"`` with torch.distributed for the ``tpu`` device (``import torchtpu`` does this)."""
    if BACKEND_NAME.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND_NAME, _create, devices=["tpu"])
