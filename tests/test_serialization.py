"""torch.save / torch.load of tpu tensors and modules, with and without map_location."""
from __future__ import annotations

import io

import pytest
import torch

import torchtpu  # noqa: F401  (registers the tpu device)

TPU = torch.device("tpu", 0)

# map_location -> device type the loaded tensors must have (None keeps the saved location: tpu).
MAP_LOCATIONS = {None: "tpu", "cpu": "cpu", "tpu": "tpu"}


# ---- helpers ------------------------------------------------------------------------------------------

@pytest.fixture(params=["bytesio", "file"])
def roundtrip(request, tmp_path):
    """Returns ``fn(obj, map_location=None)`` that saves ``obj`` and loads it back, to memory or to a file."""

    def fn(obj, map_location=None):
        if request.param == "bytesio":
            buffer = io.BytesIO()
            torch.save(obj, buffer)
            buffer.seek(0)
            return torch.load(buffer, map_location=map_location)
        path = tmp_path / "saved.pt"
        torch.save(obj, path)
        return torch.load(path, map_location=map_location)

    return fn


def assert_loaded(loaded: torch.Tensor, expected_cpu: torch.Tensor, device_type: str) -> None:
    assert isinstance(loaded, torch.Tensor)
    assert loaded.device.type == device_type, loaded.device
    if device_type == "tpu":
        assert loaded.device == TPU
    assert loaded.dtype == expected_cpu.dtype
    assert loaded.shape == expected_cpu.shape
    assert loaded.stride() == expected_cpu.stride()
    torch.testing.assert_close(loaded.cpu(), expected_cpu, rtol=0, atol=0)


def share_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def tensor_cases() -> dict[str, torch.Tensor]:
    """CPU reference tensors, each moved to tpu by the tests."""
    torch.manual_seed(0)
    return {
        "float32": torch.randn(3, 4),
        "int64": torch.arange(-5, 7, dtype=torch.int64).view(3, 4),
        "bfloat16": torch.randn(5, 2).to(torch.bfloat16),
        "scalar": torch.tensor(2.5),
        "bool": torch.tensor([True, False, True]),
    }


CASES = list(tensor_cases())


def make_model() -> torch.nn.Module:
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(),
                               torch.nn.Linear(8, 2))


# ---- tensors ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("map_location", list(MAP_LOCATIONS), ids=lambda m: f"map={m}")
@pytest.mark.parametrize("case", CASES)
def test_tensor_roundtrip(roundtrip, case, map_location):
    cpu = tensor_cases()[case]
    loaded = roundtrip(cpu.to("tpu"), map_location)
    assert_loaded(loaded, cpu, MAP_LOCATIONS[map_location])


@pytest.mark.parametrize("map_location", list(MAP_LOCATIONS), ids=lambda m: f"map={m}")
def test_non_contiguous_view_roundtrip(roundtrip, map_location):
    base_cpu = torch.arange(24.0).view(4, 6)
    base = base_cpu.to("tpu")
    views = {
        "transpose": (base.t(), base_cpu.t()),
        "strided_slice": (base[1:, ::2], base_cpu[1:, ::2]),
        "column": (base[:, 3], base_cpu[:, 3]),
    }
    for name, (view, view_cpu) in views.items():
        assert not view.is_contiguous(), name
        loaded = roundtrip(view, map_location)
        device_type = MAP_LOCATIONS[map_location]
        assert loaded.device.type == device_type
        assert loaded.shape == view_cpu.shape
        torch.testing.assert_close(loaded.cpu(), view_cpu, rtol=0, atol=0)
        # torch.save keeps the whole storage, so the view's layout survives too.
        assert loaded.stride() == view_cpu.stride(), name
        assert loaded.storage_offset() == view_cpu.storage_offset(), name
        torch.testing.assert_close((loaded * 2).cpu(), view_cpu * 2)


@pytest.mark.parametrize("map_location", list(MAP_LOCATIONS), ids=lambda m: f"map={m}")
def test_shared_storage_preserved(roundtrip, map_location):
    base = torch.arange(12.0).view(3, 4).to("tpu")
    row = base[1]
    assert share_storage(base, row)
    loaded = roundtrip({"base": base, "row": row, "t": base.t()}, map_location)
    device_type = MAP_LOCATIONS[map_location]
    for value in loaded.values():
        assert value.device.type == device_type
    assert share_storage(loaded["base"], loaded["row"])
    assert share_storage(loaded["base"], loaded["t"])
    assert loaded["row"].storage_offset() == 4
    torch.testing.assert_close(loaded["row"].cpu(), torch.arange(4.0, 8.0), rtol=0, atol=0)
    # A write through one of them is seen by the other.
    loaded["row"].add_(100)
    expected = torch.arange(12.0).view(3, 4)
    expected[1] += 100
    torch.testing.assert_close(loaded["base"].cpu(), expected, rtol=0, atol=0)
    torch.testing.assert_close(loaded["t"].cpu(), expected.t(), rtol=0, atol=0)
    # The original is untouched.
    torch.testing.assert_close(base.cpu(), torch.arange(12.0).view(3, 4), rtol=0, atol=0)


def test_mixed_container_roundtrip(roundtrip):
    cpu = torch.arange(5.0)
    loaded = roundtrip({"tpu": cpu.to("tpu"), "cpu": cpu.clone(), "list": [cpu.to("tpu") + 1, 3]})
    assert_loaded(loaded["tpu"], cpu, "tpu")
    assert_loaded(loaded["cpu"], cpu, "cpu")
    assert_loaded(loaded["list"][0], cpu + 1, "tpu")
    assert loaded["list"][1] == 3


@pytest.mark.parametrize("map_location", ["tpu", "tpu:0", TPU, {"cpu": "tpu:0"}],
                         ids=["str", "str_index", "device", "dict"])
def test_cpu_saved_tensor_loaded_to_tpu(roundtrip, map_location):
    for cpu in tensor_cases().values():
        loaded = roundtrip(cpu, map_location)
        assert_loaded(loaded, cpu, "tpu")
        torch.testing.assert_close((loaded + loaded).cpu(), cpu + cpu)


def test_loaded_tensor_is_independent_and_usable(roundtrip):
    original = torch.ones(4, device="tpu")
    loaded = roundtrip(original)
    loaded.mul_(3)
    torch.testing.assert_close(original.cpu(), torch.ones(4))
    torch.testing.assert_close((loaded + original).cpu(), torch.full((4,), 4.0))


def test_requires_grad_survives(roundtrip):
    param = torch.nn.Parameter(torch.randn(3).to("tpu"))
    loaded = roundtrip(param)
    assert isinstance(loaded, torch.nn.Parameter)
    assert loaded.requires_grad
    assert loaded.device == TPU
    (loaded * 2).sum().backward()
    torch.testing.assert_close(loaded.grad.cpu(), torch.full((3,), 2.0))


# ---- modules ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("map_location", list(MAP_LOCATIONS), ids=lambda m: f"map={m}")
def test_module_state_dict_roundtrip(roundtrip, map_location):
    ref = make_model()
    ref.train()
    ref(torch.randn(6, 4))  # give BatchNorm non-default running stats
    ref.eval()
    model = make_model()
    model.load_state_dict(ref.state_dict())
    model.tpu()
    state = model.state_dict()
    assert all(v.device == TPU for v in state.values())

    loaded = roundtrip(state, map_location)
    device_type = MAP_LOCATIONS[map_location]
    assert list(loaded) == list(ref.state_dict())
    for key, value in ref.state_dict().items():
        assert_loaded(loaded[key], value, device_type)

    fresh = make_model().tpu().eval()
    fresh.load_state_dict(loaded)
    for p in fresh.state_dict().values():
        assert p.device == TPU
    x = torch.randn(5, 4)
    torch.testing.assert_close(fresh(x.tpu()).cpu(), ref(x), rtol=1e-5, atol=1e-5)


def test_whole_module_state_into_cpu_module(roundtrip):
    ref = make_model().eval()
    loaded = roundtrip(make_model().tpu().state_dict(), "cpu")
    cpu_model = make_model().eval()
    cpu_model.load_state_dict(loaded)
    x = torch.randn(3, 4)
    torch.testing.assert_close(cpu_model(x), ref(x))


# ---- pickle -------------------------------------------------------------------------------------------

def test_pickle_and_deepcopy_keep_tpu_tensors_and_modules():
    import copy
    import pickle

    base = torch.arange(12.0).reshape(3, 4)
    view = base.to(TPU)[:, 1:3]
    for restored in (pickle.loads(pickle.dumps(view)), copy.deepcopy(view)):
        assert restored.device == TPU and restored.stride() == view.stride()
        assert torch.equal(restored.cpu(), base[:, 1:3])
    model = make_model().to(TPU)
    restored_model = pickle.loads(pickle.dumps(model))
    for original, restored in zip(model.state_dict().values(), restored_model.state_dict().values()):
        assert restored.device == TPU and torch.equal(restored.cpu(), original.cpu())
    assert pickle.loads(pickle.dumps(view.untyped_storage())).device == TPU


def test_legacy_format_explains_itself():
    with pytest.raises(RuntimeError, match="default format"):
        torch.save(torch.ones(2, device=TPU), io.BytesIO(), _use_new_zipfile_serialization=False)


def test_multiprocessing_queues_carry_tpu_tensors_by_value():
    from multiprocessing.reduction import ForkingPickler

    weight = torch.nn.Parameter(torch.arange(4.0, device="tpu"))
    plain = torch.ones(2, 3, device="tpu")[:, 1]
    for sent in (weight, plain):
        received = ForkingPickler.loads(ForkingPickler.dumps(sent))
        assert type(received) is type(sent) and received.device == sent.device
        assert received.requires_grad == sent.requires_grad
        assert torch.equal(received.detach().cpu(), sent.detach().cpu())
    with pytest.raises(RuntimeError, match="non-leaf"):
        ForkingPickler.dumps(weight * 2)  # torch's rule: autograd history does not cross processes


SPAWN_WITH_TENSOR_ARGUMENT = """
import torch, torchtpu, torch.multiprocessing as mp

def child(rank, tensor, queue):
    queue.put((tensor.device.type, tensor.cpu().tolist()))

if __name__ == "__main__":
    queue = mp.get_context("spawn").Queue()
    mp.spawn(child, args=(torch.arange(6.0, device="tpu")[1:4], queue), nprocs=1)
    assert queue.get(timeout=120) == ("tpu", [1.0, 2.0, 3.0])
    print("OK")
"""


def test_a_spawned_process_receives_tpu_tensor_arguments(tmp_path):
    """mp.spawn pickles its arguments before the child reads them: a host copy shared through CPU memory was
    freed by then ("unable to resize file"), so the values travel inside the message."""
    from helpers import run_python

    script = tmp_path / "spawn_argument.py"  # spawn pickles functions by module: they must live in a file
    script.write_text(SPAWN_WITH_TENSOR_ARGUMENT)
    result = run_python(f"import runpy; runpy.run_path({str(script)!r}, run_name='__main__')")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("OK")


def test_a_dataloader_worker_can_return_tpu_tensors():
    """The parent has not used tpu yet, so the forked worker may; its batches come back on tpu (they were
    dropped and the loader waited forever)."""
    from helpers import run_python

    result = run_python("""
        import torch, torchtpu
        from torch.utils.data import DataLoader, Dataset

        class Rows(Dataset):
            def __len__(self): return 4
            def __getitem__(self, i): return torch.full((2,), float(i), device="tpu")

        batches = [b for b in DataLoader(Rows(), batch_size=2, num_workers=1, timeout=120)]
        assert [b.device.type for b in batches] == ["tpu", "tpu"]
        assert torch.equal(torch.cat(batches).cpu(), torch.tensor([[0.0, 0.0], [1.0, 1.0], [2.0, 2.0], [3.0, 3.0]]))
        print("OK")
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("OK")
