"""Single-controller SPMD (docs/distributed.md): one process drives every tpu device; a tensor may be split
over them and XLA's SPMD partitioner (GSPMD) turns each program that touches it into one program per
device with the collectives it needs.

A :class:`Mesh` arranges the process's devices in named axes; :func:`shard` splits a tensor's dimensions
over mesh axes (a spec like JAX's ``PartitionSpec``, or DTensor placements). A sharded tensor keeps its
logical shape and values; every op on it runs on all devices and leaves its results sharded as the
partitioner chose (a write into a sharded tensor keeps that tensor's sharding); ``.cpu()`` gathers.
"""
from __future__ import annotations

import math
from typing import NamedTuple, Optional, Sequence, Union

import torch

from torchtpu import _C

AxisSpec = Union[None, str, Sequence[str]]


class Mesh:
    """The process's tpu devices arranged as an array with named axes, e.g. ``Mesh((2, 4), ("dp", "tp"))``.

    ``devices`` lists the device indices in row-major mesh order (default ``0 .. n-1``); a mesh spans every
    device of the process (``TORCHTPU_NUM_DEVICES`` chips on the CPU plugin)."""

    def __init__(self, shape: Sequence[int], axis_names: Sequence[str], devices: Optional[Sequence[int]] = None):
        shape, axis_names = tuple(int(s) for s in shape), tuple(axis_names)
        if len(shape) != len(axis_names):
            raise ValueError(f"Mesh: {len(shape)} axis sizes but {len(axis_names)} axis names")
        if len(set(axis_names)) != len(axis_names):
            raise ValueError(f"Mesh: axis names must differ, got {axis_names}")
        count = torch.tpu.device_count()
        size = math.prod(shape)
        if size != count:
            raise ValueError(f"Mesh: a mesh of shape {shape} has {size} devices but the process has {count}; "
                             f"a mesh spans every tpu device (TORCHTPU_NUM_DEVICES sets how many the CPU "
                             f"plugin presents)")
        order = list(range(size)) if devices is None else [int(d) for d in devices]
        if sorted(order) != list(range(size)):
            raise ValueError(f"Mesh: devices must list each of 0..{size - 1} once, got {order}")
        self.shape = dict(zip(axis_names, shape))
        self.axis_names = axis_names
        self.devices = torch.tensor(order, dtype=torch.int64).reshape(shape)

    def __repr__(self) -> str:
        return f"Mesh({self.shape})"


class Sharding(NamedTuple):
    """How a tensor is split: ``tiles[d]`` pieces along dim d, each held by ``replicas`` devices;
    ``devices`` in XLA's tile-assignment order; ``mhlo`` the annotation its programs carry."""
    tiles: list
    replicas: int
    devices: list
    mhlo: str


def _axes(entry: AxisSpec) -> tuple:
    if entry is None:
        return ()
    return (entry,) if isinstance(entry, str) else tuple(entry)


def _spec_from_placements(placements, mesh: Mesh, ndim: int) -> tuple:
    """DTensor placements (one per mesh axis: ``Shard(dim)`` or ``Replicate()``) as a per-dim spec."""
    from torch.distributed.tensor import Replicate, Shard

    if len(placements) != len(mesh.axis_names):
        raise ValueError(f"shard: {len(placements)} placements for a mesh of {len(mesh.axis_names)} axes")
    spec = [[] for _ in range(ndim)]
    for axis, placement in zip(mesh.axis_names, placements):
        if isinstance(placement, Shard):
            dim = placement.dim % ndim if ndim else placement.dim
            if not 0 <= dim < ndim:
                raise ValueError(f"shard: Shard({placement.dim}) on a tensor of {ndim} dims")
            spec[dim].append(axis)
        elif not isinstance(placement, Replicate):
            raise ValueError(f"shard: placement {placement} is not supported (Shard or Replicate)")
    return tuple(tuple(a) if a else None for a in spec)


def _tile_assignment(shape: Sequence[int], mesh: Mesh, spec: Sequence[AxisSpec]):
    if len(spec) != len(shape):
        raise ValueError(f"shard: the spec {tuple(spec)} has {len(spec)} entries for a tensor of {len(shape)} dims")
    used, tiles = [], []
    for dim, entry in enumerate(spec):
        axes = _axes(entry)
        for axis in axes:
            if axis not in mesh.shape:
                raise ValueError(f"shard: axis '{axis}' is not in the mesh (axes {mesh.axis_names})")
            if axis in used:
                raise ValueError(f"shard: mesh axis '{axis}' splits more than one dimension")
            used.append(axis)
        pieces = math.prod(mesh.shape[a] for a in axes)
        if shape[dim] % pieces:
            raise ValueError(f"shard: dimension {dim} of size {shape[dim]} does not divide into {pieces} pieces "
                             f"(mesh axes {axes})")
        tiles.append(pieces)
    rest = [a for a in mesh.axis_names if a not in used]
    order = [mesh.axis_names.index(a) for a in used + rest]
    devices = mesh.devices.permute(order).reshape(-1).tolist() if order else mesh.devices.reshape(-1).tolist()
    return tiles, math.prod(mesh.shape[a] for a in rest), devices


def shard(tensor: torch.Tensor, mesh: Mesh, spec=None) -> torch.Tensor:
    """Splits ``tensor`` over ``mesh``: ``spec`` names, per tensor dim, the mesh axis (or axes) it is split
    along, ``None`` for unsplit (``None`` for the whole spec: replicated on every device); or it is a list of
    DTensor placements, one per mesh axis. A tpu tensor is resharded in place (parameters keep their
    identity) and returned; a CPU tensor is copied to a new sharded tpu tensor."""
    if tensor.device.type != "tpu":
        tensor = tensor.to("tpu")
    if spec is None:
        spec = (None,) * tensor.dim()
    elif len(spec) and not isinstance(spec[0], (str, tuple, list, type(None))):
        spec = _spec_from_placements(spec, mesh, tensor.dim())
    tiles, replicas, devices = _tile_assignment(tuple(tensor.shape), mesh, spec)
    with torch.no_grad():
        _C._shard(tensor.detach(), tiles, replicas, devices)
    return tensor


def sharding(tensor: torch.Tensor) -> Optional[Sharding]:
    """How ``tensor``'s storage is split over the devices, or None for a tensor on one device."""
    found = _C._sharding(tensor) if tensor.device.type == "tpu" else None
    return None if found is None else Sharding(*found)
