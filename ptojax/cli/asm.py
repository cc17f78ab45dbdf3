"""`ptojax asm` (assembly text -> hex words) and `ptojax disasm` (hex words -> text)."""

from __future__ import annotations

import json

import ptojax as pj
from ptojax.report import listing

from .inputs import assemble, parse_hex_words, read_text


def cmd_asm(args) -> int:
    words = assemble(read_text(args.file))
    if args.json:
        print(json.dumps([f"0x{w:08x}" for w in words]))
    else:
        for w in words:
            print(f"0x{w:08x}")
    return 0


def cmd_disasm(args) -> int:
    words = parse_hex_words(read_text(args.file, "hex words"))
    if args.addresses:
        print("\n".join(listing(words, 0)))
    elif words:
        print(pj.asm.disassemble(words))
    return 0
