"""`torchtpu demo` (README's first command) runs end to end: device report, GPT on tpu against CPU, the HF part,
the summary with zero fallbacks and the loss plot. A short run in a fresh interpreter."""

from helpers import run_python


def test_demo_runs(tmp_path):
    plot = tmp_path / "loss.png"
    result = run_python(f"""
        import sys
        sys.argv = ["torchtpu", "demo", "--steps", "12", "--cpu-steps", "4", "--hf-steps", "2", "--plot", {str(plot)!r}]
        from torchtpu.__main__ import main
        main()
    """)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    for line in ("PJRT C API", "gpt ", "sample ", "generate ", "trainer ", "| CPU fallbacks | 0"):
        assert line in out, out
    assert plot.exists() and plot.stat().st_size > 0


def test_demo_compiled_mode(tmp_path):
    """--mode compiled: the GPT step under torch.compile(backend="tpu"), replayed after its capture."""
    result = run_python(f"""
        import sys
        sys.argv = ["torchtpu", "demo", "--mode", "compiled", "--steps", "6", "--cpu-steps", "3", "--no-hf",
                    "--plot", {str(tmp_path / "loss.png")!r}]
        from torchtpu.__main__ import main
        main()
    """)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "| compiled graph replays |" in result.stdout and "| CPU fallbacks | 0" in result.stdout, result.stdout


def test_usage_without_command():
    result = run_python("import runpy, sys; sys.argv = ['torchtpu']; runpy.run_module('torchtpu', run_name='__main__')")
    assert result.returncode == 2 and "torchtpu demo" in result.stdout
