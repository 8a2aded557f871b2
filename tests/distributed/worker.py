"""One rank of the tests in test_process_group.py, launched by torchrun: ``worker.py CASE [ARG]`` with CASE one of
collectives, ddp, sync_batch_norm, fsdp, tp, hf_tp (ARG: a saved tiny Llama's folder), trainer (ARG: an output folder).

Each case checks its results itself (against values every rank can compute, or a single-process CPU run of
the same model on the whole batch) and prints ``OK <case> rank <r>``."""
from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

import torchtpu  # noqa: F401  (registers the device and the "tpu_dist" backend)
from torchtpu.testing.models import SmallGPT


def collectives(rank: int, size: int) -> None:
    tpu = torch.device("tpu")
    t = torch.full((4,), float(rank + 1), device=tpu)
    dist.all_reduce(t)
    assert t.cpu().tolist() == [float(sum(range(1, size + 1)))] * 4, t
    t = torch.full((2,), float(rank), device=tpu)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    assert t.cpu().tolist() == [float(size - 1)] * 2, t
    t = torch.full((2,), float(rank), device=tpu)
    dist.broadcast(t, src=size - 1)
    assert t.cpu().tolist() == [float(size - 1)] * 2
    gathered = torch.empty(2 * size, device=tpu)
    dist.all_gather_into_tensor(gathered, torch.full((2,), float(rank), device=tpu))
    assert gathered.cpu().tolist() == [float(r) for r in range(size) for _ in range(2)], gathered
    pieces = [torch.empty(3, device=tpu) for _ in range(size)]
    dist.all_gather(pieces, torch.full((3,), float(rank), device=tpu))
    assert [p.cpu()[0].item() for p in pieces] == [float(r) for r in range(size)]
    scattered = torch.empty(2, device=tpu)
    dist.reduce_scatter_tensor(scattered, torch.arange(2.0 * size, device=tpu))
    assert scattered.cpu().tolist() == [size * 2.0 * rank, size * (2.0 * rank + 1)], scattered
    exchanged = torch.empty(size, device=tpu)
    dist.all_to_all_single(exchanged, torch.arange(float(size), device=tpu) + 10 * rank)
    assert exchanged.cpu().tolist() == [10.0 * r + rank for r in range(size)], exchanged
    pieces_out = [torch.empty(1, device=tpu) for _ in range(size)]
    dist.all_to_all(pieces_out, [torch.tensor([10.0 * rank + r], device=tpu) for r in range(size)])
    assert [p.item() for p in pieces_out] == [10.0 * r + rank for r in range(size)]
    reduced = torch.full((2,), float(rank + 1), device=tpu)
    dist.reduce(reduced, dst=0)
    if rank == 0:
        assert reduced.cpu().tolist() == [float(sum(range(1, size + 1)))] * 2
    gathered_list = [torch.empty(2, device=tpu) for _ in range(size)] if rank == 0 else None
    dist.gather(torch.full((2,), float(rank), device=tpu), gathered_list, dst=0)
    if rank == 0:
        assert [g.cpu()[0].item() for g in gathered_list] == [float(r) for r in range(size)]
    mine = torch.empty(3, device=tpu)
    dist.scatter(mine, [torch.full((3,), float(r), device=tpu) for r in range(size)] if rank == 0 else None, src=0)
    assert mine.cpu().tolist() == [float(rank)] * 3
    if rank == 0:
        dist.send(torch.tensor([42.0], device=tpu), 1)
    elif rank == 1:
        received = torch.zeros(1, device=tpu)
        dist.recv(received, 0)
        assert received.item() == 42.0
    # A ring exchange posts every send before any receive: isend returns at once, as on NCCL and Gloo.
    outgoing, incoming = torch.full((2,), float(rank), device=tpu), torch.zeros(2, device=tpu)
    requests = [dist.isend(outgoing, (rank + 1) % size), dist.irecv(incoming, (rank - 1) % size)]
    for request in requests:
        request.wait()
    assert incoming.cpu().tolist() == [float((rank - 1) % size)] * 2, incoming
    # A receive's future does not wait for the peer: taken before this rank's own send, it completes after.
    incoming = torch.zeros(2, device=tpu)
    future = dist.irecv(incoming, (rank - 1) % size).get_future()
    dist.isend(outgoing, (rank + 1) % size).wait()
    assert future.wait()[0] is incoming and incoming.cpu().tolist() == [float((rank - 1) % size)] * 2, incoming
    incoming = torch.zeros(2, device=tpu)
    ops = [dist.P2POp(dist.isend, outgoing, (rank + 1) % size), dist.P2POp(dist.irecv, incoming, (rank - 1) % size)]
    for request in dist.batch_isend_irecv(ops):
        request.wait()
    assert incoming.cpu().tolist() == [float((rank - 1) % size)] * 2, incoming
    if rank == 0:  # a receive from any rank names the sender
        dist.send(torch.tensor([7.0], device=tpu), 1)
    elif rank == 1:
        received = torch.zeros(1, device=tpu)
        assert dist.recv(received) == 0 and received.item() == 7.0
    # A Work's future holds the filled tensors as one flat list (DDP's comm hooks index it).
    t = torch.ones(2, device=tpu)
    value = dist.all_reduce(t, async_op=True).get_future().wait()
    assert len(value) == 1 and value[0] is t and t.cpu().tolist() == [float(size)] * 2, value
    cpu = torch.full((2,), float(rank))  # CPU tensors go to Gloo as they are
    dist.all_reduce(cpu)
    assert cpu.tolist() == [float(sum(range(size)))] * 2
    try:  # a bad call raises in Python, naming what is wrong, and the group stays usable
        dist.all_gather_into_tensor(torch.empty(3, device=tpu), torch.ones(2, device=tpu))
    except (RuntimeError, ValueError) as e:
        assert "size" in str(e).lower() or "numel" in str(e).lower(), e
    else:
        raise AssertionError("a mis-sized all_gather_into_tensor was accepted")
    dist.barrier()
    assert dist.get_backend() == "tpu_dist"


def _train(rank: int, size: int, wrap) -> None:
    """Three SGD steps of the small GPT, each rank on its quarter of the batch, against one CPU process on the
    whole batch (data parallel averages the gradients: the same steps)."""
    torch.manual_seed(0)
    reference = SmallGPT()
    data = torch.randint(0, 64, (4 * size, 17))
    model = SmallGPT().tpu()
    model.load_state_dict(reference.state_dict())
    wrapped = wrap(model)
    optimizer = torch.optim.SGD(wrapped.parameters(), lr=0.1, momentum=0.9)
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)

    def loss(out, target):
        return F.cross_entropy(out.flatten(0, 1), target.flatten())

    mine = data[4 * rank:4 * (rank + 1)]
    for _ in range(3):
        optimizer.zero_grad()
        loss(wrapped(mine[:, :-1].tpu()), mine[:, 1:].tpu()).backward()
        optimizer.step()
        reference_optimizer.zero_grad()
        loss(reference(data[:, :-1]), data[:, 1:]).backward()
        reference_optimizer.step()
    state = {k: (v.full_tensor() if hasattr(v, "full_tensor") else v).cpu() for k, v in wrapped.state_dict().items()}
    state = {k.removeprefix("_orig_mod.").removeprefix("module."): v for k, v in state.items()}
    for name, value in reference.state_dict().items():
        torch.testing.assert_close(state[name], value, rtol=1e-5, atol=1e-5, msg=name)
    return model


def ddp(rank: int, size: int) -> None:
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel

    def with_allreduce_hook(model):  # the comm hook reads the all_reduce future's first tensor
        wrapped = DistributedDataParallel(model)
        wrapped.register_comm_hook(None, default_hooks.allreduce_hook)
        return wrapped

    _train(rank, size, DistributedDataParallel)
    _train(rank, size, with_allreduce_hook)
    # Compiled: the reducer syncs its rebuilt buckets from inside the compiled forward of the second step.
    _train(rank, size, lambda model: torch.compile(DistributedDataParallel(model), backend="tpu"))


def debug_detail(rank: int, size: int) -> None:
    """Under TORCH_DISTRIBUTED_DEBUG=DETAIL every collective still works, and collectives whose shapes or dtypes
    differ across ranks raise on every rank (as c10d's own backends do) instead of reducing garbage."""
    collectives(rank, size)
    for mismatched in (torch.ones((2, 3) if rank == 0 else (3, 2), device="tpu"),
                       torch.ones(4, device="tpu", dtype=torch.float32 if rank == 0 else torch.int32)):
        try:
            dist.all_reduce(mismatched)
        except RuntimeError as error:
            assert "Detected mismatch between collectives on ranks" in str(error), error
        else:
            raise AssertionError("a mismatched all_reduce was accepted")
    agreed = torch.full((3,), float(rank), device="tpu")
    dist.all_reduce(agreed)
    assert agreed.cpu().tolist() == [float(sum(range(size)))] * 3


def sync_batch_norm(rank: int, size: int) -> None:
    """nn.SyncBatchNorm under DDP, each rank on its part of the batch, equals BatchNorm on the whole batch in
    one CPU process: parameters and running statistics after 3 SGD steps."""
    import copy

    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(0)
    reference = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                                    torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 2))
    model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(copy.deepcopy(reference)).tpu()
    wrapped = DistributedDataParallel(model)
    data, target = torch.randn(4 * size, 3, 8, 8), torch.randn(4 * size, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    mine = slice(4 * rank, 4 * (rank + 1))
    for _ in range(3):
        optimizer.zero_grad()
        (wrapped(data[mine].tpu()) - target[mine].tpu()).square().mean().backward()
        optimizer.step()
        reference_optimizer.zero_grad()
        (reference(data) - target).square().mean().backward()
        reference_optimizer.step()
    for (name, got), expected in zip(model.state_dict().items(), reference.state_dict().values()):
        torch.testing.assert_close(got.cpu(), expected, rtol=1e-4, atol=1e-5, msg=name)


def fsdp(rank: int, size: int) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("tpu", (size,))

    def shard(model):
        for block in model.blocks:
            fully_shard(block, mesh=mesh)
        return fully_shard(model, mesh=mesh)

    model = _train(rank, size, shard)
    # Parameters really divided: each rank holds its 1/size of every parameter (rounded up per tensor).
    local = sum(p.to_local().numel() for p in model.parameters())
    total = sum(p.numel() for p in SmallGPT().parameters())
    assert local <= total // size + len(list(model.parameters())), (local, total)


def tp(rank: int, size: int) -> None:
    """Megatron-style tensor parallelism through DTensor: every block's MLP split column-wise then row-wise,
    the same batch on every rank, against one CPU process."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = init_device_mesh("tpu", (size,))
    torch.manual_seed(0)
    reference = SmallGPT()
    model = SmallGPT().tpu()
    model.load_state_dict(reference.state_dict())
    plan = {}
    for i in range(len(model.blocks)):
        plan[f"blocks.{i}.mlp.0"] = ColwiseParallel()
        plan[f"blocks.{i}.mlp.2"] = RowwiseParallel()
    parallelize_module(model, mesh, plan)
    assert model.blocks[0].mlp[0].weight.to_local().shape[0] == model.blocks[0].mlp[0].weight.shape[0] // size
    data = torch.randint(0, 64, (4, 17))
    # foreach=False: the parameters mix DTensors (the split MLPs) and plain tensors, which PyTorch's foreach
    # kernels refuse on any device.
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    for _ in range(2):
        for m, opt, batch in ((model, optimizer, data.tpu()), (reference, reference_optimizer, data)):
            opt.zero_grad()
            F.cross_entropy(m(batch[:, :-1]).flatten(0, 1), batch[:, 1:].flatten()).backward()
            opt.step()
    state = {k: (v.full_tensor() if hasattr(v, "full_tensor") else v).cpu() for k, v in model.state_dict().items()}
    for name, value in reference.state_dict().items():
        torch.testing.assert_close(state[name], value, rtol=1e-5, atol=1e-5, msg=name)


def hf_tp(rank: int, size: int, path: str) -> None:
    """transformers' own tensor parallelism (tp_plan="auto"): it maps the tpu device to "tpu_dist" itself."""
    import transformers as hf

    from torchtpu.testing.hf_models import _ids

    model = hf.AutoModelForCausalLM.from_pretrained(path, tp_plan="auto")
    assert dist.get_backend() == "tpu_dist" and next(model.parameters()).device.type == "tpu"
    reference = hf.AutoModelForCausalLM.from_pretrained(path)
    ids = _ids(seq=16)
    with torch.no_grad():
        expected = reference(ids).logits
        got = model(ids.tpu()).logits
    got = got.full_tensor() if hasattr(got, "full_tensor") else got
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-5, atol=1e-5)


def trainer(rank: int, size: int, out_dir: str) -> None:
    """transformers' Trainer under torchrun on tpu, with nothing but `import torchtpu`: accelerate takes the
    "tpu_dist" backend and wraps the model in DDP; the ranks end with the same parameters."""
    import transformers as hf

    from torchtpu.testing.hf_models import _decoder_common

    class Tokens(torch.utils.data.Dataset):
        ids = torch.randint(0, 128, (32, 16), generator=torch.Generator().manual_seed(0))

        def __len__(self):
            return len(self.ids)

        def __getitem__(self, i):
            return {"input_ids": self.ids[i], "labels": self.ids[i]}

    torch.manual_seed(0)
    model = hf.LlamaForCausalLM(hf.LlamaConfig(**_decoder_common()))
    args = hf.TrainingArguments(output_dir=out_dir, per_device_train_batch_size=4, max_steps=3, logging_steps=1,
                                report_to=[], seed=0, dataloader_pin_memory=False, disable_tqdm=True,
                                save_strategy="no")
    run = hf.Trainer(model=model, args=args, train_dataset=Tokens())
    run.train()
    assert dist.get_backend() == "tpu_dist" and run.args.world_size == size
    assert run.accelerator.device.type == "tpu"
    assert isinstance(run.model_wrapped, torch.nn.parallel.DistributedDataParallel)
    losses = [e["loss"] for e in run.state.log_history if "loss" in e]
    assert len(losses) == 3 and all(torch.isfinite(torch.tensor(losses)))
    checksum = torch.stack([p.detach().double().sum() for p in model.parameters()]).sum().reshape(1).tpu()
    everyone = [torch.empty_like(checksum) for _ in range(size)]
    dist.all_gather(everyone, checksum)
    assert len({t.item() for t in everyone}) == 1, everyone  # DDP kept the replicas equal


if __name__ == "__main__":
    case, *args = sys.argv[1:]
    if case not in ("hf_tp", "trainer"):  # transformers and accelerate initialise the process group themselves
        dist.init_process_group("tpu_dist")
    cases = {"collectives": collectives, "ddp": ddp, "debug_detail": debug_detail, "sync_batch_norm": sync_batch_norm,
             "fsdp": fsdp, "tp": tp, "hf_tp": hf_tp, "trainer": trainer}
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    cases[case](rank, size, *args)
    print(f"OK {case} rank {rank}", flush=True)
    dist.destroy_process_group()
