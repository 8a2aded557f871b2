"""TPU readiness without a TPU: compile what torchtpu emits for real TPU topologies through libtpu.

    with torchtpu.aot.record() as rec:
        train_step()                      # runs on the CPU plugin as usual
    topology, results = torchtpu.aot.compile_programs(rec.programs, "v5e:2x2")
    rejected = [r for r in results if not r.accepted]

or from the shell: ``python -m torchtpu.aot check --topology v5e:2x2 script.py``. libtpu comes with the
``torchtpu[tpu]`` extra; nothing runs on a TPU, so this proves the programs compile for the chip and gives
the compiler's cost and memory figures, not that they run correctly or how fast.
"""
from torchtpu.aot.compiler import (AotError, Result, Topology, compile_for_topologies, compile_programs,
                                   find_compiler, find_libtpu)
from torchtpu.aot.recorder import Program, Recording, record

__all__ = ["AotError", "Program", "Recording", "Result", "Topology", "compile_for_topologies", "compile_programs",
           "find_compiler", "find_libtpu", "record"]
