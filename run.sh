#!/usr/bin/env bash
# The two commands of README.md:
#   ./run.sh demo   set everything up, then `torchtpu demo`: a small GPT and a tiny HF Llama on tpu against CPU
#   ./run.sh test   set everything up, then run the C++ unit tests and the whole Python test suite
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
    ;;
  *)
    echo "usage: ./run.sh demo|test" >&2
    exit 2
    ;;
esac
