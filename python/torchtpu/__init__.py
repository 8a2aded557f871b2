"""torchtpu: Google TPUs (and any PJRT device) as the PyTorch device ``tpu``.

``import torchtpu`` renames PyTorch's PrivateUse1 backend to ``tpu``, registers ``torch.tpu`` and the
``Tensor.tpu()`` / ``Module.tpu()`` conveniences. Kernels, the device guard, hooks, allocator and
generator are registered by the C++ extension ``torchtpu._C`` when it loads.
"""
import torch

from torchtpu import _C, _accelerate, _cross_entropy, _dlpack, _meta, _pickling, _plugin, _printing, _sync_batch_norm, _trainer, _transformer  # noqa: F401  (_meta registers missing meta kernels)

_C._set_plugin_candidates(_plugin.candidates())
torch.utils.rename_privateuse1_backend("tpu")

from torchtpu import device_module  # noqa: E402  (needs the backend name)

torch._register_device_module("tpu", device_module)
torch.utils.generate_methods_for_privateuse1_backend(for_tensor=True, for_module=True, for_storage=True)
_printing.install()
_pickling.install()  # pickle of tpu storages through torch.save's zipfile format
_dlpack.install()  # DLPack export of tpu tensors refused (no address to share)
_sync_batch_norm.install()  # nn.SyncBatchNorm's per-device kernels
_cross_entropy.install()  # weighted, label-smoothed cross entropy without a data-dependent shape
_accelerate.install()  # accelerate (Trainer) places batches on tpu
_trainer.install()  # Trainer checkpoints keep the tpu random generators
_transformer.install()  # nn.TransformerEncoder's nested-tensor fast path, computed densely

from torchtpu import cache, compile  # noqa: E402,F401
from torchtpu.eager import current_eager_mode, eager_mode  # noqa: E402
from torchtpu.metrics import metrics, reset_metrics  # noqa: E402
from torchtpu.checks import value_checks, value_checks_enabled  # noqa: E402

compile.install()  # torch.compile(backend="tpu") and dynamo's tpu device interface

import torch.distributed  # noqa: E402

if torch.distributed.is_available():
    from torchtpu import distributed  # noqa: E402

    distributed.register()  # the process-group backend "tpu_dist"
export = compile.export

__all__ = ["metrics", "reset_metrics", "plugin_info", "eager_mode", "current_eager_mode", "value_checks",
           "value_checks_enabled", "export"]


def plugin_info() -> dict:
    """Path, platform and PJRT API version of the loaded plugin (loads it if needed)."""
    return _C._plugin_info()
