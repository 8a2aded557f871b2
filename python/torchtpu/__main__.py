"""`torchtpu` on the command line (also `python -m torchtpu`): `torchtpu demo [options]`."""
from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help") or argv[0] != "demo":
        print("usage: torchtpu demo [--steps N] [--devices N] [--mode strict|fused|debug] [--no-hf] [--plot FILE]\n"
              "       torchtpu demo --help")
        raise SystemExit(0 if argv and argv[0] in ("-h", "--help") else 2)
    from torchtpu import demo

    demo.main(argv[1:])


if __name__ == "__main__":
    main()
