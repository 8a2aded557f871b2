#!/usr/bin/env bash
# The two commands of README.md:
#   ./run.sh demo   set everything up, then `torchtpu demo`: a small GPT and a tiny HF Llama on tpu against CPU
#   ./run.sh test   set everything up, then run the C++ unit tests and the whole Python test suite (the core op,
#                   Hugging Face and kernel tests a second time in fused mode, the core op tests a third time
#                   with fused traces run op by op)
# Setting up is idempotent: a virtual environment in .venv, the pinned dependencies, the extension build.
set -euo pipefail
cd "$(dirname "$0")"

setup() {
  if ! command -v ccache >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    # Optional: makes rebuilds after a C++ change take seconds. The build works without it.
    (apt-get update -qq && apt-get install -y -qq ccache) >/dev/null 2>&1 || echo "note: ccache not installed"
  fi
  [ -x .venv/bin/python ] || python3 -m venv .venv
  .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements.txt
  # No build isolation: it would fetch a second torch to build against.
  .venv/bin/python -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps -e .
}

case "${1:-}" in
  demo)
    setup
    .venv/bin/python -m torchtpu demo
    ;;
  test)
    setup
    (cd build && ctest --output-on-failure)
    .venv/bin/python -m pytest -q tests
    # The core op, Hugging Face and custom-kernel tests once more with fused eager mode as the process's mode
    # (docs/modes.md): ops recorded into traces and run as fused programs must give what strict mode and CPU give.
    # TORCHTPU_FUSE_AFTER=1 compiles every trace at its first sight, so one-off tests run fused programs too.
    TORCHTPU_EAGER_MODE=fused TORCHTPU_FUSE_AFTER=1 .venv/bin/python -m pytest -q tests/test_ops.py tests/test_views.py \
      tests/test_overlapping_writes.py tests/test_indexing_ops.py tests/test_reduction_ops.py tests/test_nn_ops.py \
      tests/test_optimizers.py tests/test_opinfo_subset.py tests/test_fuzz_pointwise.py tests/test_fuzz_training.py \
      tests/hf tests/kernels
    # And the core op tests with every trace run op by op, as fused mode runs a trace shape it sees for the
    # first time: each op's program in turn, buffers released after their last read and donated.
    TORCHTPU_EAGER_MODE=fused TORCHTPU_FUSED_OP_BY_OP=1 .venv/bin/python -m pytest -q tests/test_ops.py \
      tests/test_views.py tests/test_overlapping_writes.py tests/test_indexing_ops.py tests/test_reduction_ops.py \
      tests/test_nn_ops.py tests/test_optimizers.py tests/test_fuzz_training.py
    ;;
  sanitize)
    # The C++ core and its tests (ctest), then the extension under Python tests, with ASan + UBSan
    # (docs/reliability.md). Leak checking is off: the plugin and its client live for the whole process.
    # SANITIZERS=thread builds and runs them under TSan, which cannot see the uninstrumented plugin's
    # synchronization (csrc/testing/tsan_suppressions.txt).
    setup
    kind="${SANITIZERS:-address,undefined}"
    dir="build-sanitize-${kind%%,*}"
    PATH="$PWD/.venv/bin:$PATH" cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DPython3_EXECUTABLE="$PWD/.venv/bin/python" -DTORCHTPU_SANITIZE="$kind" >/dev/null
    PATH="$PWD/.venv/bin:$PATH" cmake --build "$dir" --target runtime_test graph_test view_test program_cache_test
    # The suppressions' path is taken here: inside the subshell $PWD is the build directory.
    suppressions="$PWD/csrc/testing/tsan_suppressions.txt"
    (cd "$dir" && ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1 \
      TSAN_OPTIONS="suppressions=$suppressions" ctest --output-on-failure)
    # Then the extension itself, built with the same sanitizers, under Python tests (the runtime library
    # preloaded, as Python is not built with it): the threading tests under TSan (any report fails the run,
    # TSan's exit status 66); under ASan + UBSan the tests that stress storage lifetimes and error paths.
    PATH="$PWD/.venv/bin:$PATH" cmake --build "$dir" --target _C
    rm -rf "$dir/python" && mkdir -p "$dir/python" && cp -r python/torchtpu "$dir/python/"
    cp "$dir"/_C.*.so "$dir/python/torchtpu/"
    if [ "$kind" = thread ]; then
      PYTHONPATH="$PWD/$dir/python" LD_PRELOAD="$(${CXX:-g++} -print-file-name=libtsan.so.2)" \
        TSAN_OPTIONS="suppressions=$PWD/csrc/testing/tsan_suppressions.txt" \
        .venv/bin/python -m pytest -q -p no:cacheprovider tests/test_reliability.py -k threads
    else
      # libstdc++ preloaded with ASan so that its exception interceptor finds __cxa_throw; alloc_dealloc_mismatch
      # off: torch and the plugin free across library boundaries ASan cannot pair; allocator_may_return_null:
      # a device out-of-memory is a failed allocation, as with malloc, not an abort. The soak test is left
      # out: ASan's quarantine of freed memory is host-memory growth by design.
      PYTHONPATH="$PWD/$dir/python" \
        LD_PRELOAD="$(${CXX:-g++} -print-file-name=libasan.so) $(${CXX:-g++} -print-file-name=libstdc++.so)" \
        ASAN_OPTIONS=detect_leaks=0:alloc_dealloc_mismatch=0:allocator_may_return_null=1 \
        UBSAN_OPTIONS=print_stacktrace=1 \
        .venv/bin/python -m pytest -q -p no:cacheprovider -k "not soak" tests/test_reliability.py \
        tests/test_errors.py tests/test_views.py tests/test_fused.py tests/test_data_dependent.py tests/test_compile.py
    fi
    ;;
  *)
    echo "usage: ./run.sh demo|test|sanitize" >&2
    exit 2
    ;;
esac
