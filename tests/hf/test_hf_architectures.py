"""Each Hugging Face architecture at toy size on tpu against CPU: forward, backward and greedy generate, with
zero CPU fallbacks. The models come from torchtpu.testing.hf_models (built from configs, nothing downloaded)."""
import copy

import pytest
import torch

pytest.importorskip("transformers")

from torchtpu.testing.hf_models import architectures, generate_inputs  # noqa: E402

ARCHITECTURES = architectures()
# Measured: logits within 2e-6 and gradients within 5e-7 of CPU for every architecture (float32).
LOGITS_TOL = 1e-4
GRAD_TOL = 1e-4


def fallbacks(metrics):
    return {op: s["fallbacks"] for op, s in metrics()["ops"].items() if s["fallbacks"]}


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_forward_backward_generate_match_cpu(name, metrics):
    arch = ARCHITECTURES[name]
    cpu_model = arch.build()
    tpu_model = copy.deepcopy(cpu_model).to("tpu")
    inputs = arch.inputs()

    tpu_out = tpu_model(**{k: v.to("tpu") for k, v in inputs.items()})
    tpu_out.loss.backward()
    cpu_out = cpu_model(**inputs)
    cpu_out.loss.backward()
    torch.testing.assert_close(tpu_out.logits.cpu(), cpu_out.logits, atol=LOGITS_TOL, rtol=0)
    torch.testing.assert_close(tpu_out.loss.cpu(), cpu_out.loss, atol=LOGITS_TOL, rtol=0)
    tpu_params = dict(tpu_model.named_parameters())
    assert tpu_params.keys() == dict(cpu_model.named_parameters()).keys()  # tied weights stay tied on tpu
    for param_name, cpu_param in cpu_model.named_parameters():
        if cpu_param.grad is not None:
            torch.testing.assert_close(tpu_params[param_name].grad.cpu(), cpu_param.grad, atol=GRAD_TOL, rtol=0,
                                       msg=param_name)

    if arch.generates:
        prompt = generate_inputs(inputs)
        with torch.no_grad():
            tpu_tokens = tpu_model.generate(**{k: v.to("tpu") for k, v in prompt.items()}, max_new_tokens=4,
                                            do_sample=False)
            cpu_tokens = cpu_model.generate(**prompt, max_new_tokens=4, do_sample=False)
        assert torch.equal(tpu_tokens.cpu(), cpu_tokens)
    assert fallbacks(metrics) == {}
