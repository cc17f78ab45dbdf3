"""An example device under test for `ptojax fuzz --against-protocol batch`.

A hardware harness or a simulator plugs into a campaign by reading batched
requests on its standard input and writing one answer per request on its
standard output (docs/fuzzing.md, "The batched DUT protocol"). This one
answers with pj.batch.run itself, a stand-in for the device, and can be told
to misbehave, so that a campaign's handling of a wrong or broken DUT can be
seen and tested:

    ptojax fuzz --config tiny --batch 4096 --sample 0 --count 100000 \\
        --against "python examples/dut_harness.py" --against-protocol batch
    ptojax fuzz ... --against "python examples/dut_harness.py --wrong-every 1000"

--device echo     answer every case with its initial State, executed 0 (the
                  protocol alone, no engine: to time the exchange, or to test
                  how a campaign handles the misbehaviours below in seconds)
--wrong-every N   flip one GM byte in the final State of about one case in N
                  (a hash of its words picks it, so asking again reproduces it)
--die-after B     exit after answering B requests
--hang-after B    stop answering (sleep) after B requests
--bad-ids-after B answer request B+1 with the case ids in reverse order
--short-after B   answer request B+1 with its last case missing
--truncate-after B  write half of answer B+1, then exit
--error-after B   answer request B+1 with an error

The protocol itself needs only numpy, json and struct (ptojax.fuzz.batchfile
is 200 lines of that); the device here is ptojax's own engine.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=("engine", "echo"), default="engine")
    for name in ("wrong-every", "die-after", "hang-after", "bad-ids-after", "short-after",
                 "truncate-after", "error-after"):
        p.add_argument(f"--{name}", type=int)
    args = p.parse_args(argv)

    from ptojax.fuzz import batchfile, dut

    engines = {}
    answered = [0]

    def run(initial, words, lengths, core, pe, on_fault, cfg):
        if args.error_after is not None and answered[0] >= args.error_after:
            raise RuntimeError("the device reports a failure (--error-after)")
        final, executed = (echo if args.device == "echo" else engine)(initial, words, lengths, core, pe,
                                                                      on_fault, cfg)
        if args.wrong_every:            # about one case in N, the same one when asked again
            key = (words.astype(np.uint64) * np.uint64(2654435761)).sum(axis=1) + lengths
            ks = np.flatnonzero(key % np.uint64(args.wrong_every) == 0)
            final[".gm"][ks, 0] ^= 0x5A
        answered[0] += 1
        return final, executed

    def echo(initial, words, lengths, core, pe, on_fault, cfg):
        return {k: v.copy() for k, v in initial.items()}, np.zeros(len(lengths), np.int64)

    def engine(initial, words, lengths, core, pe, on_fault, cfg):
        """Each request's cases on pj.batch.run: Core rows and the others apart."""
        import jax
        from ptojax.fuzz.engine import Engine, Rows, leaves_of, reset_leaves
        n = len(lengths)
        treedef = jax.tree_util.tree_structure(reset_leaves(cfg))
        final = {k: np.zeros_like(v) for k, v in initial.items()}
        executed = np.zeros(n, np.int64)
        for flag in (False, True):
            rows = np.flatnonzero(core == flag)
            if not len(rows):
                continue
            # one compiled shape: the next power of two with room for a filler row,
            # kept for smaller requests (a campaign's last batch is a short one)
            key = (cfg, flag, pe, on_fault)
            if key not in engines or engines[key].capacity < len(rows):
                engines[key] = Engine(cfg, 1 << len(rows).bit_length(), 0 if flag else pe, on_fault,
                                      core=flag)
            states = jax.tree_util.tree_unflatten(treedef, [v[rows] for v in initial.values()])
            res = engines[key].run(Rows(states.gm, states.gpr, states.pc, states.tile_capacity,
                                        np.arange(len(rows), dtype=np.int32), states),
                                   words[rows], lengths[rows])
            for k, v in leaves_of(res, len(rows)).items():
                final[k][rows] = v
            executed[rows] = res.executed[: len(rows)]
        return final, executed

    out = sys.stdout.buffer

    class Misbehaving:
        """stdout with the misbehaviours that concern whole answers."""

        def write(self, buf):
            b = answered[0]          # answers written so far + 1 (run counted this one)
            if args.hang_after is not None and b > args.hang_after:
                time.sleep(3600)
            if args.truncate_after is not None and b > args.truncate_after:
                out.write(buf[: len(buf) // 2])
                out.flush()
                sys.exit(3)
            if (args.bad_ids_after is not None and b > args.bad_ids_after) or \
                    (args.short_after is not None and b > args.short_after):
                tensors, meta = batchfile.decode(buf)
                if "id" in tensors and args.bad_ids_after is not None and b > args.bad_ids_after:
                    tensors["id"] = tensors["id"][::-1].copy()
                if "id" in tensors and args.short_after is not None and b > args.short_after:
                    tensors["id"] = tensors["id"][:-1]
                    tensors["executed"] = tensors["executed"][:-1]
                buf = batchfile.encode(tensors, meta)
            out.write(buf)
            out.flush()
            if args.die_after is not None and b >= args.die_after:
                sys.exit(4)

        def flush(self):
            out.flush()

    dut.serve(run, sys.stdin.buffer, Misbehaving())
    return 0


if __name__ == "__main__":
    sys.exit(main())
