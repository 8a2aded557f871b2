"""torch.compile(backend="tpu") against eager CPU (docs/compile.md). Tolerance 1e-4 (float32)."""
import copy
import threading
import warnings

import pytest
import torch
import torch.nn as nn
import torchtpu
from torchtpu.testing.models import SmallGPT

TOL = dict(atol=1e-4, rtol=1e-4)


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def train_steps(model, device, steps, compiled, batch=8):
    torch.manual_seed(1)
    model = copy.deepcopy(model).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    forward = torch.compile(model, backend="tpu") if compiled else model
    step = torch.compile(opt.step, backend="tpu") if compiled else opt.step
    losses = []
    for _ in range(steps):
        x = torch.randn(batch, *model_input_shape(model))
        loss = forward(x.to(device)).square().mean()
        loss.backward()
        step()
        opt.zero_grad()
        losses.append(loss.item())
    return model, losses


def model_input_shape(model):
    return (3, 8, 8) if isinstance(model[0], nn.Conv2d) else (16,)


MLP = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))
# No conv bias: batch norm cancels its gradient, and AdamW would amplify the rounding noise left over.
CNN = nn.Sequential(nn.Conv2d(3, 6, 3, bias=False), nn.BatchNorm2d(6), nn.ReLU(), nn.Flatten(), nn.Linear(6 * 36, 4))


@pytest.mark.parametrize("model", [MLP, CNN], ids=["mlp", "cnn_batchnorm"])
def test_compiled_training_with_compiled_adamw_matches_cpu(model):
    cpu_model, cpu_losses = train_steps(model, "cpu", 3, compiled=False)
    tpu_model, tpu_losses = train_steps(model, "tpu", 3, compiled=True)
    torch.testing.assert_close(torch.tensor(tpu_losses), torch.tensor(cpu_losses), **TOL)
    for (name, a), b in zip(tpu_model.state_dict().items(), cpu_model.state_dict().values()):
        torch.testing.assert_close(a.cpu(), b, **TOL, msg=name)  # batch norm running stats land too


def test_default_backend_compiles_tpu_graphs_with_the_tpu_backend():
    """torch.compile(model) names inductor, whose "tpu" code generator belongs to another package: graphs on
    tpu go to the tpu backend, graphs on CPU still to inductor."""
    torch.manual_seed(0)
    reference = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    model = copy.deepcopy(reference).to("tpu")
    x = torch.randn(8, 16)
    captures = torchtpu.metrics()["compiled"]["captures"]
    loss = torch.compile(model)(x.to("tpu")).square().mean()
    loss.backward()
    assert torchtpu.metrics()["compiled"]["captures"] > captures
    expected = reference(x).square().mean()
    expected.backward()
    torch.testing.assert_close(loss.cpu(), expected, **TOL)
    for a, b in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(a.grad.cpu(), b.grad, **TOL)
    # Made on tpu inside the graph, with no tpu input.
    made_here = torch.compile(lambda n: torch.ones(n, device="tpu").cumsum(0))(4)
    torch.testing.assert_close(made_here.cpu(), torch.arange(1.0, 5.0))
    # Which graphs are routed: by their inputs, parameters and buffers (and, under dynamo, their values).
    from torchtpu.compile import _graph_on_tpu
    assert not _graph_on_tpu(torch.fx.symbolic_trace(copy.deepcopy(MLP)), [torch.randn(2, 16)])
    assert _graph_on_tpu(torch.fx.symbolic_trace(copy.deepcopy(MLP).to("tpu")), [])


@pytest.mark.parametrize("mode", ["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"])
def test_compile_modes_are_accepted(mode):
    x = torch.randn(4, 16)
    out = torch.compile(copy.deepcopy(MLP).to("tpu"), backend="tpu", mode=mode)(x.to("tpu"))
    torch.testing.assert_close(out.cpu(), MLP(x), **TOL)


def test_unknown_compile_mode_and_options_are_refused():
    model = copy.deepcopy(MLP).to("tpu")
    x = torch.randn(4, 16, device="tpu")
    with pytest.raises(Exception, match="unknown mode 'fastest'"):
        torch.compile(model, backend="tpu", mode="fastest")(x)
    torch._dynamo.reset()
    with pytest.raises(Exception, match=r"takes no options, got \['trace.enabled'\]"):
        torch.compile(model, backend="tpu", options={"trace.enabled": True})(x)


def test_torch_cond_backward_follows_each_calls_branch():
    """The backward graph reads the saved predicate on the host: its capture must not replay one branch."""
    def f(x, p):
        return torch.cond(p.sum() > 0, lambda x: x.sin() * 2, lambda x: x.cos() - 1, (x,))

    compiled = torch.compile(f, backend="tpu")
    x = torch.tensor([0.5, 1.0, -0.3])
    for sign in (1.0, -1.0, 1.0, -1.0):
        p = torch.tensor([sign])
        xc = x.clone().requires_grad_()
        f(xc, p).sum().backward()
        xt = x.to("tpu").requires_grad_()
        compiled(xt, p.to("tpu")).sum().backward()
        torch.testing.assert_close(xt.grad.cpu(), xc.grad, **TOL)


def test_compiled_gpt_training_step_with_compiled_adamw_matches_cpu_and_settles():
    """Causal attention, layer norm, GELU, cross entropy, clipping and AdamW: 5 steps, then no compiles."""
    torch.manual_seed(0)
    reference = SmallGPT()
    idx = torch.randint(0, 64, (4, 17))

    def run(device, compiled, steps=5):
        model = copy.deepcopy(reference).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        forward = torch.compile(model, backend="tpu") if compiled else model
        step = torch.compile(opt.step, backend="tpu") if compiled else opt.step
        x, y = idx[:, :-1].to(device), idx[:, 1:].to(device)
        losses = []
        for i in range(steps):
            if i == steps - 1:
                torchtpu.reset_metrics()
            loss = nn.functional.cross_entropy(forward(x).flatten(0, 1), y.flatten())
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            step()
            opt.zero_grad()
            losses.append(loss.item())
        return model, losses

    cpu_model, cpu_losses = run("cpu", compiled=False)
    tpu_model, tpu_losses = run("tpu", compiled=True)
    assert torchtpu.metrics()["fused"]["compiles"] == 0  # the last step
    torch.testing.assert_close(torch.tensor(tpu_losses), torch.tensor(cpu_losses), **TOL)
    for (name, a), b in zip(tpu_model.state_dict().items(), cpu_model.state_dict().values()):
        a = a.cpu()
        if name.endswith("qkv.bias"):
            # The key bias has gradient 0 in exact arithmetic (softmax ignores a constant added to a row of
            # scores), so AdamW turns rounding noise into steps of up to lr: checked at that scale.
            keys = slice(a.shape[0] // 3, 2 * a.shape[0] // 3)
            torch.testing.assert_close(a[keys], b[keys], atol=5 * 1e-2, rtol=0, msg=name)
            a[keys], b = 0, b.clone()
            b[keys] = 0
        torch.testing.assert_close(a, b, atol=2e-4, rtol=2e-4, msg=name)


def test_compiled_multihead_attention_forward_and_backward_match_cpu():
    """Attention's output follows its (transposed) query's layout, as the graph's later views assume."""
    torch.manual_seed(0)
    cpu = nn.MultiheadAttention(16, 2, batch_first=True)
    tpu = copy.deepcopy(cpu).to("tpu")
    x = torch.randn(2, 5, 16)
    xt = x.to("tpu").requires_grad_()
    x.requires_grad_()
    expected, _ = cpu(x, x, x)
    out, _ = torch.compile(tpu, backend="tpu")(xt, xt, xt)
    torch.testing.assert_close(out.cpu(), expected, **TOL)
    expected.square().sum().backward()
    out.square().sum().backward()
    torch.testing.assert_close(xt.grad.cpu(), x.grad, **TOL)
    for (name, a), b in zip(tpu.named_parameters(), cpu.parameters()):
        torch.testing.assert_close(a.grad.cpu(), b.grad, **TOL, msg=name)


@pytest.mark.parametrize("head", ["flatten", "instance_norm", "transpose_flatten"])
def test_compiled_channels_last_convolution_then_a_reshape_matches_cpu(head):
    # The graph is traced on fake tensors, which lay a tpu convolution's result out row-major; eager tpu
    # must give the same strides, or the traced view of a channels-last result fails.
    torch.manual_seed(0)
    conv = nn.ConvTranspose2d(3, 4, 3, padding=1) if head == "transpose_flatten" else nn.Conv2d(3, 4, 3, padding=1)
    tail = nn.InstanceNorm2d(4) if head == "instance_norm" else nn.Flatten()
    model = nn.Sequential(conv, tail).to(memory_format=torch.channels_last)
    x = torch.randn(2, 3, 8, 8).contiguous(memory_format=torch.channels_last)
    expected = model(x)
    actual = torch.compile(copy.deepcopy(model).to("tpu"), backend="tpu")(x.to("tpu"))
    torch.testing.assert_close(actual.cpu(), expected, **TOL)


def test_compiled_eval_matches_cpu():
    torch.manual_seed(0)
    model = copy.deepcopy(CNN).eval()
    x = torch.randn(4, 3, 8, 8)
    compiled = torch.compile(copy.deepcopy(model).to("tpu"), backend="tpu")
    with torch.no_grad():
        torch.testing.assert_close(compiled(x.to("tpu")).cpu(), model(x), **TOL)


def test_graph_break_runs_the_pieces_on_tpu():
    def f(x):
        y = torch.sin(x) * 2
        torch._dynamo.graph_break()
        return torch.cos(y) + 1

    x = torch.randn(5, 7)
    out = torch.compile(f, backend="tpu")(x.to("tpu"))
    assert out.device.type == "tpu"
    torch.testing.assert_close(out.cpu(), f(x), **TOL)


def test_new_batch_size_recompiles_once_then_hits_the_cache():
    frames = []

    def counting_backend(gm, example_inputs):
        frames.append(gm)
        return torchtpu.compile.tpu_backend(gm, example_inputs)

    model = copy.deepcopy(MLP).to("tpu")
    f = torch.compile(model, backend=counting_backend, dynamic=False)
    for batch in (4, 4, 6, 6, 4, 6):
        x = torch.randn(batch, 16)
        torch.testing.assert_close(f(x.to("tpu")).cpu(), model.cpu()(x), **TOL)
        model.to("tpu")
    assert len(frames) == 2
    f(torch.randn(6, 16, device="tpu")).sum().item()  # the eager ops around the call: fused in fused mode
    torchtpu.reset_metrics()
    f(torch.randn(6, 16, device="tpu")).sum().item()
    assert torchtpu.metrics()["fused"]["compiles"] == 0


def test_steady_state_training_compiles_nothing():
    model = copy.deepcopy(MLP).to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    forward = torch.compile(model, backend="tpu")
    step = torch.compile(opt.step, backend="tpu")
    for i in range(4):
        if i == 2:
            torchtpu.reset_metrics()
        forward(torch.randn(8, 16, device="tpu")).sum().backward()
        step()
        opt.zero_grad()
    torch.tpu.synchronize()
    assert torchtpu.metrics()["fused"]["compiles"] == 0


def test_op_without_lowering_warns_and_still_runs():
    x = torch.randn(6, 4)
    # poisson has no lowering; with zero rates its draws are zeros, so the result is deterministic.
    with pytest.warns(UserWarning, match="no tpu lowering: poisson"):
        out = torch.compile(lambda t: torch.poisson(t * 0).sum() + t.sum(), backend="tpu")(x.to("tpu"))
    torch.testing.assert_close(out.cpu(), x.sum(), **TOL)


def test_value_checks_hold_inside_compiled_graphs():
    """A compiled graph runs through the same rules, so an index past the end raises at the next sync."""
    f = torch.compile(lambda x, i: torch.gather(x, 0, i) * 2, backend="tpu")
    x = torch.arange(3.0, device="tpu")
    with pytest.raises(RuntimeError, match="index 9 is out of bounds for dimension 0 with size 3"):
        f(x, torch.tensor([1, 9], device="tpu")).cpu()
    torch.testing.assert_close(f(x, torch.tensor([2, 0], device="tpu")).cpu(), torch.tensor([4.0, 0.0]))


def test_later_calls_replay_the_captured_program_without_dispatching_ops():
    model = copy.deepcopy(MLP).to("tpu")
    f = torch.compile(model, backend="tpu")
    f(torch.randn(8, 16, device="tpu"))
    torchtpu.reset_metrics()
    x = torch.randn(8, 16)
    out = f(x.to("tpu"))
    m = torchtpu.metrics()
    assert m["compiled"]["replays"] == 1 and m["fused"]["ops_recorded"] == 0
    torch.testing.assert_close(out.cpu(), copy.deepcopy(model).cpu()(x), **TOL)


def test_replayed_dropout_draws_new_masks_and_follows_the_seed():
    f = torch.compile(lambda x: nn.functional.dropout(x, 0.5) * 1.0, backend="tpu")
    x = torch.ones(64, device="tpu")
    torch.manual_seed(3)
    first = [f(x).cpu() for _ in range(3)]  # capture, then two replays
    assert not torch.equal(first[1], first[2])
    torch.manual_seed(3)
    assert all(torch.equal(a, f(x).cpu()) for a in first)


def test_input_unlike_the_capture_runs_through_the_fused_driver():
    """A view at another storage offset than at capture: the program's plan does not fit, the graph still runs."""
    f = torch.compile(lambda x: x * 2 + 1, backend="tpu")
    base = torch.arange(12.0).to("tpu")
    for start in (0, 0, 4):
        torch.testing.assert_close(f(base[start:start + 4]).cpu(), torch.arange(start, start + 4.0) * 2 + 1)


def test_mark_dynamic_says_what_it_does_and_compiles_once_per_shape(monkeypatch):
    monkeypatch.setattr(torchtpu.compile, "_warned_dynamic", False)  # the warning comes once per process
    model = copy.deepcopy(MLP).to("tpu")
    f = torch.compile(model, backend="tpu")
    x = torch.randn(4, 16, device="tpu")
    torch._dynamo.mark_dynamic(x, 0)
    with pytest.warns(UserWarning, match="one program for each distinct shape"):
        f(x)
    other = torch.compile(copy.deepcopy(MLP).to("tpu"), backend="tpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        other(x)  # another dynamic graph: no second warning
    for batch in (5, 4, 5):
        x = torch.randn(batch, 16)
        torch.testing.assert_close(f(x.to("tpu")).cpu(), copy.deepcopy(model).cpu()(x), **TOL)
    assert torchtpu.metrics()["compiled"]["replays"] >= 2


def test_export_gives_the_stablehlo_of_the_model():
    model = copy.deepcopy(MLP).to("tpu")
    text = torchtpu.export(model, (torch.randn(2, 16, device="tpu"),))
    assert text.startswith("module") and "func.func public @main(" in text and "stablehlo.dot_general" in text
    with pytest.raises(ValueError, match="must be on tpu"):
        torchtpu.export(copy.deepcopy(MLP), (torch.randn(2, 16),))


class FusedProjection(nn.Module):
    """Attention's input projection: one matmul, then q, k and v as strided views of its result."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(8, 24)

    def forward(self, x):
        q, k, v = self.qkv(x).split(8, dim=-1)
        return (q * k).softmax(-1) @ v.transpose(-1, -2)


def test_a_captured_graph_compiles_its_view_offsets_in():
    """A captured graph's view offsets are the same at every call, so they are constants of its program (XLA
    slices statically) rather than parameters; @main takes exactly the parameters and inputs."""
    model = FusedProjection()
    x = torch.randn(2, 5, 8)
    compiled = torch.compile(copy.deepcopy(model).to("tpu"), backend="tpu")
    for _ in range(2):
        torch.testing.assert_close(compiled(x.to("tpu")).cpu(), model(x), rtol=1e-5, atol=1e-5)
    text = torchtpu.export(copy.deepcopy(model).to("tpu"), (x.to("tpu"),))
    signature = text[text.index("func.func public @main("):]
    signature = signature[:signature.index(") -> ")]
    assert signature.count("%e") == 3, signature  # weight, bias, x


def test_graphs_differing_only_in_compiled_in_values_get_their_own_programs():
    """The same ops at another offset or with another number are another program: the values are in its key."""
    x = torch.randn(3, 12)
    graphs = [lambda t: t[:, 0:4] * 3.0, lambda t: t[:, 4:8] * 3.0, lambda t: t[:, 4:8] * 5.0,
              lambda t: t[:, 8:] * 5.0]
    for f in graphs:
        compiled = torch.compile(f, backend="tpu")
        for _ in range(2):
            torch.testing.assert_close(compiled(x.to("tpu")).cpu(), f(x))


def test_compiled_adamw_with_a_scheduler_neither_retraces_nor_recompiles():
    """lr as a tensor (as PyTorch advises for compiled optimizers): the schedule's value is an operand."""
    def run(device, compiled, steps=6):
        torch.manual_seed(0)
        model = copy.deepcopy(MLP).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=torch.tensor(1e-2))
        schedule = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10)
        step = torch.compile(opt.step, backend="tpu") if compiled else opt.step
        for i in range(steps):
            if i == 3:
                torchtpu.reset_metrics()
                torch._dynamo.utils.counters.clear()
            model(torch.randn(8, 16).to(device)).square().mean().backward()
            step()
            schedule.step()
            opt.zero_grad()
        return model

    expected = run("cpu", compiled=False)
    actual = run("tpu", compiled=True)
    assert torchtpu.metrics()["compiled"]["replays"] == 3 and torchtpu.metrics()["fused"]["compiles"] == 0
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 0  # no new trace after warm-up
    for a, b in zip(actual.parameters(), expected.parameters()):
        torch.testing.assert_close(a.cpu(), b, **TOL)


def test_switching_value_checks_after_capture_is_honoured():
    f = torch.compile(lambda x, i: torch.gather(x, 0, i) + 1, backend="tpu")
    x = torch.arange(3.0, device="tpu")
    good, bad = torch.tensor([0, 2], device="tpu"), torch.tensor([0, 5], device="tpu")
    with torchtpu.value_checks(False):
        f(x, good)  # captured without checks
    f(x, good)
    with pytest.raises(RuntimeError, match="index 5 is out of bounds"):
        f(x, bad).cpu()


def test_compiled_activation_checkpointing_replays_dropout(monkeypatch):
    # AOT autograd wraps dropout in run_and_save_rng_state / run_with_rng_state so the recomputation draws
    # the same mask; PyTorch implements them for CPU, CUDA, HPU and XPU only. On tpu they save and restore
    # the tpu generator, and the graphs holding them run recorded each call (a replay would skip the restore).
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Dropout(0.3), torch.nn.Linear(16, 4)).to("tpu")
    compiled = torch.compile(lambda x: checkpoint(net, x, use_reentrant=False), backend="tpu")
    monkeypatch.setattr(torchtpu.compile, "_warned_dynamic", False)  # it warns once per process
    with warnings.catch_warnings():
        # The saved random state reaches the backward graph with a symbolic size: no dynamic-shape warning.
        warnings.filterwarnings("error", message=".*dynamic dimensions")
        for step in range(3):
            results = []
            for run in (compiled, net):
                x = torch.arange(20.0, device="tpu").reshape(5, 4).requires_grad_()
                net.zero_grad()
                torch.manual_seed(100 + step)
                out = run(x)
                out.square().sum().backward()
                results.append((out.detach().cpu(), x.grad.cpu(), net[0].weight.grad.cpu()))
            for got, expected in zip(*results):
                torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_threads_compile_and_train_at_once():
    mode = torchtpu.current_eager_mode()  # the process's, as the environment picked it
    # Dynamo compiles one graph at a time, but a graph's first call (recorded through an FX interpreter) runs
    # outside its lock while another thread traces. Adam's single-tensor path: torch.optim's foreach path
    # reads the process-wide torch.compiler.is_compiling() and fails on any device while another thread
    # compiles (docs/compile.md). Three rounds: the first one's XLA compiles make the threads' timing sparse.
    def make(seed):
        torch.manual_seed(seed)
        return nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 2))

    def train(model, device, seed, compiled):
        forward = torch.compile(model, backend="tpu", dynamic=False) if compiled else model
        opt = torch.optim.Adam(model.parameters(), lr=0.01, foreach=False)
        inputs = torch.Generator().manual_seed(seed)
        for _ in range(5):
            loss = forward(torch.randn(3, 5, generator=inputs).to(device)).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            loss.item()
        return model

    for _ in range(3):
        torch._dynamo.reset()
        initial = [make(k) for k in range(4)]  # here: torch.manual_seed is the process's
        expected = [train(copy.deepcopy(m), "cpu", k, compiled=False) for k, m in enumerate(initial)]
        trained, errors = {}, []

        def work(k):
            try:
                trained[k] = train(initial[k].to("tpu"), "tpu", k, compiled=True)
            except Exception as e:  # noqa: BLE001  (reported below, with the thread's index)
                errors.append((k, repr(e)))

        threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert torchtpu.current_eager_mode() == mode  # compiled graphs record in fused mode per thread
        for k in range(4):
            for got, want in zip(trained[k].parameters(), expected[k].parameters()):
                torch.testing.assert_close(got.cpu(), want, **TOL)
