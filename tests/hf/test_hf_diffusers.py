"""diffusers on tpu: a tiny UNet2DModel loaded straight onto the device, and a DDPM pipeline moved with
.to("tpu") running a few denoising steps, both against CPU."""
import numpy as np
import pytest
import torch

pytest.importorskip("diffusers")

from diffusers import DDPMPipeline, DDPMScheduler, UNet2DModel  # noqa: E402

from torchtpu.testing.hf_models import tiny_unet  # noqa: E402

# Measured: UNet output within 2e-6 of CPU, four DDPM steps within 6e-6 (images in [0, 1]).
TOL = 1e-4


def no_fallbacks(metrics):
    return all(s["fallbacks"] == 0 for s in metrics()["ops"].values())


def test_unet_from_pretrained_device_map(tmp_path, metrics):
    cpu = tiny_unet()
    cpu.save_pretrained(tmp_path)
    tpu = UNet2DModel.from_pretrained(tmp_path, device_map="tpu")
    assert tpu.device.type == "tpu"
    # Batch 1 and one timestep, as the pipeline below calls it, so the two tests share compiled programs.
    sample = torch.randn(1, 3, 16, 16)
    timesteps = torch.tensor([500])
    with torch.no_grad():
        out = tpu(sample.to("tpu"), timesteps.to("tpu")).sample
        expected = cpu(sample, timesteps).sample
    torch.testing.assert_close(out.cpu(), expected, atol=TOL, rtol=0)
    assert no_fallbacks(metrics)


def test_ddpm_pipeline_to_tpu_matches_cpu(tmp_path, metrics):
    DDPMPipeline(unet=tiny_unet(), scheduler=DDPMScheduler(num_train_timesteps=1000)).save_pretrained(tmp_path)
    tpu = DDPMPipeline.from_pretrained(tmp_path).to("tpu")
    assert tpu.device.type == "tpu"
    cpu = DDPMPipeline.from_pretrained(tmp_path)
    # The starting noise and each step's noise come from the CPU generator on both sides, so the two runs
    # see the same random numbers and differ only by arithmetic.
    images = [pipe(batch_size=1, generator=torch.Generator().manual_seed(0), num_inference_steps=4,
                   output_type="np").images for pipe in (tpu, cpu)]
    np.testing.assert_allclose(images[0], images[1], atol=TOL, rtol=0)
    assert no_fallbacks(metrics)
