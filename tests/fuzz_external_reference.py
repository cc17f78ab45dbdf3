"""A tiny external command for `ptojax fuzz --against` / `ptojax replay --against`.

It speaks the ptojax.fuzz-against.v1 line protocol (ptojax/fuzz/casefile.py):
one request per line on stdin, {"initial": envelope, "words": [...], "pe": n,
"on_fault": ...}; one answer per line on stdout, {"final": envelope}. It runs
pj.reference.run, so a campaign against it must find no mismatch.

    ptojax fuzz --against "python tests/fuzz_external_reference.py"

With --break-alignment it ignores misaligned addresses of TLOAD/TSTORE (a
planted bug, for the tests).
"""

import sys

import ptojax as pj
from ptojax.fuzz.casefile import serve


def main(argv):
    if "--break-alignment" in argv:
        from ptojax.reference import transport
        probe = transport.probe

        def no_alignment(gm_size, address, size):
            f = probe(gm_size, address, size)
            return None if f is not None and f.name == "Fault_DataAlignment" else f
        transport.probe = no_alignment

    def run(state, words, pe, on_fault, cfg):
        return pj.reference.run(state, words, pe, on_fault=on_fault, cfg=cfg).state

    serve(run)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
