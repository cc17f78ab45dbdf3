"""What the commands read: program text, hex words, setup lines, --gm/--gm-hex/--gpr.

Every function raises CliError (exit status 2) on bad input, with the option
or line it came from.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import ptojax as pj
from ptojax import tables

from .common import CliError


def read_text(path: str, what: str = "program") -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        return Path(path).read_text()
    except UnicodeDecodeError:
        raise CliError(f"cannot read {what} {path}: not a text file (assembly or hex words)") from None
    except OSError as e:
        raise CliError(f"cannot read {what} {path}: {e.strerror or e}") from None


_HEX_TOKEN = re.compile(r"(?:0[xX])?[0-9a-fA-F]+")
_SEPARATORS = re.compile(r"[\s,\[\]\"']+")


def _hex_lines(text: str):
    """(line number, tokens) of hex-word text; `#`/`;` comments; JSON list punctuation ignored."""
    for n, line in enumerate(text.splitlines(), 1):
        code = re.split(r"[#;]", line, maxsplit=1)[0]
        toks = [t for t in _SEPARATORS.split(code) if t]
        if toks:
            yield n, toks


def looks_hex(text: str) -> bool:
    """True when the text has words and every token parses as a hex number."""
    toks = [t for _, ts in _hex_lines(text) for t in ts]
    return bool(toks) and all(_HEX_TOKEN.fullmatch(t) for t in toks)


def parse_hex_words(text: str) -> list[int]:
    """Hex words (with or without 0x), whitespace/comma separated, any number per line."""
    words = []
    for n, toks in _hex_lines(text):
        for t in toks:
            if not _HEX_TOKEN.fullmatch(t):
                raise CliError(f"line {n}: {t!r} is not a hex word")
            v = int(t, 16)
            if v > 0xFFFFFFFF:
                raise CliError(f"line {n}: {t} does not fit a 32-bit instruction word")
            words.append(v)
    return words


def assemble(text: str) -> list[int]:
    try:
        return pj.asm.assemble(text)
    except pj.asm.AsmError as e:
        raise CliError(f"assembly error: {e}") from None


def load_program(text: str, force_hex: bool = False) -> tuple[list[int], str]:
    """(words, "hex" | "assembly"): hex when asked or when every token is hex."""
    if force_hex or looks_hex(text):
        return parse_hex_words(text), "hex"
    return assemble(text), "assembly"


_SETUP_RE = re.compile(r"^\s*[;#]@(.*)$")
_SETUP_OPTIONS = ("--gm-hex", "--gpr")


def program_setup(text: str) -> tuple[list[str], list[str]]:
    """(gm_hex specs, gpr specs) of the setup lines `;@ --gm-hex A:HEX --gpr R=V ...`."""
    gm_hex: list[str] = []
    gprs: list[str] = []
    for n, line in enumerate(text.splitlines(), 1):
        m = _SETUP_RE.match(line)
        if not m:
            continue
        toks = m[1].split()
        if not toks or len(toks) % 2:
            raise CliError(f"line {n}: setup line {line.strip()!r}: expected pairs of "
                           f"{' or '.join(_SETUP_OPTIONS)} and a value")
        for opt, value in zip(toks[::2], toks[1::2]):
            if opt not in _SETUP_OPTIONS:
                raise CliError(f"line {n}: setup line option {opt!r}: expected "
                               f"{' or '.join(_SETUP_OPTIONS)}")
            (gm_hex if opt == "--gm-hex" else gprs).append(value)
    return gm_hex, gprs


def _int(text: str, what: str) -> int:
    try:
        return int(text.strip().replace("_", ""), 0)
    except ValueError:
        raise CliError(f"{what} {text!r} is not an integer (decimal or 0x hex)") from None


_GPR_RE = re.compile(r"(?:(\d+):)?([A-Za-z][A-Za-z0-9]*)=(.+)")


def parse_gpr(spec: str, default_pe: int) -> tuple[int, int, int]:
    """`[PE:]REG=VALUE` -> (pe, register index, value)."""
    m = _GPR_RE.fullmatch(spec.strip())
    if not m:
        raise CliError(f"--gpr {spec!r}: expected [PE:]REG=VALUE, e.g. a0=0x100 or 1:a1=8")
    pe = default_pe if m[1] is None else int(m[1])
    if not 0 <= pe < tables.NUM_PES:
        raise CliError(f"--gpr {spec!r}: PE {pe} out of range 0..{tables.NUM_PES - 1}")
    try:
        reg = tables.gpr_index(m[2])
    except ValueError as e:
        raise CliError(f"--gpr {spec!r}: {e}") from None
    value = _int(m[3], f"--gpr {spec!r}: value")
    if not -(1 << 63) <= value < 1 << 64:
        raise CliError(f"--gpr {spec!r}: value does not fit a 64-bit GPR")
    return pe, reg, value


def parse_gm_hex(spec: str) -> tuple[int, bytes]:
    """`ADDR:HEXBYTES` -> (address, bytes)."""
    addr, sep, data = spec.partition(":")
    if not sep:
        raise CliError(f"--gm-hex {spec!r}: expected ADDR:HEXBYTES, e.g. 0x100:003c0040")
    a = _int(addr, f"--gm-hex {spec!r}: address")
    h = re.sub(r"[\s_]", "", data)
    if h[:2].lower() == "0x":
        h = h[2:]
    try:
        return a, bytes.fromhex(h)
    except ValueError:
        raise CliError(f"--gm-hex {spec!r}: {data!r} is not an even number of hex digits") from None


def build_state(cfg: pj.MachineConfig, gm_file=None, gm_hex=(), gprs=(), pe: int = 0):
    s = pj.reset(cfg)
    writes = []
    if gm_file is not None:
        try:
            data = sys.stdin.buffer.read() if gm_file == "-" else Path(gm_file).read_bytes()
        except OSError as e:
            raise CliError(f"cannot read GM image {gm_file}: {e.strerror or e}") from None
        writes.append((f"--gm {gm_file}", 0, data))
    for spec in gm_hex:
        writes.append((f"--gm-hex {spec}", *parse_gm_hex(spec)))
    for what, addr, data in writes:
        if addr + len(data) > cfg.gm_bytes:
            raise CliError(f"{what}: {len(data)} bytes at {addr:#x} do not fit the "
                           f"{cfg.gm_bytes}-byte GM of this config")
        s = pj.write_memory(s, addr, data)
    for spec in gprs:
        p, reg, value = parse_gpr(spec, pe)
        s = pj.write_gpr(s, reg, value, pe=p)
    return s
