"""Files of a campaign: replayable mismatch cases, exported cases, and the
line protocol of an external command (`ptojax fuzz --against CMD`).

Every file is one JSON object. States are `pto.asl-model.arch-state.v1`
envelopes (`pj.interop.to_arch_state`), words are 32-bit ints or "0x%08x"
strings, the machine config is every `MachineConfig` field.

- mismatch case (`ptojax.fuzz-case.v1`), written by `fuzz`, read by `replay`:
  config, pe, core (true: the case runs on the Core's four PEs,
  pj.batch.run(core=True) / pj.reference.run_core; absent = false), on_fault, batch (rows of the compiled shape that found it),
  campaign (seed, case number k, draw index), case (kind, mutations, notes,
  pc, TILE_CAPACITY, nonzero GPRs), words (hex) and disassembly, initial
  (envelope, kind "initial_state"), results (per model: fault,
  fault_address, executed, pc, final envelope), differences (field by
  field), shrink (the original words, the steps kept, counts), against (the
  external command, when it was the other side).
- exported case (`ptojax.fuzz-export.v1`): config, pe, core, on_fault, words,
  words_hex, disassembly, initial, expected (the reference model's final
  envelope, fault, fault_address, executed, pc).
- protocol (`ptojax.fuzz-against.v1`): ptojax starts CMD once (through the
  shell) and, per case, writes one line to its stdin, `{"protocol", "id",
  "initial": envelope, "words": [ints], "pe": n, "on_fault": "abandon"|"hold"}`,
  and reads one line from its stdout, `{"id", "final": envelope}` (optionally
  "executed"; without it executed = (final tpc - initial tpc) / 4 mod 2^64),
  or `{"error": "message"}`. The final envelope is read with
  `pj.interop.from_arch_state(final, cfg)` and compared with pj.batch.run's
  State leaf for leaf. CMD's stderr passes through; EOF on its stdin means stop.
"""

from __future__ import annotations

import dataclasses
import json
import os
import queue
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np

from .. import tables
from ..state import MachineConfig, State, state_leaves
from . import gen as G
from .cases import initial_state
from .compare import Outcome

CASE_FORMAT = "ptojax.fuzz-case.v1"
EXPORT_FORMAT = "ptojax.fuzz-export.v1"
PROTOCOL = "ptojax.fuzz-against.v1"
MASK64 = (1 << 64) - 1


def machine_json(cfg: MachineConfig) -> dict:
    return dataclasses.asdict(cfg)


def machine_from(d: dict) -> MachineConfig:
    fields = {f.name for f in dataclasses.fields(MachineConfig)}
    return MachineConfig(**{k: v for k, v in d.items() if k in fields})


def words_hex(words) -> list:
    return [f"0x{int(w):08x}" for w in words]


def disassembly(words) -> list:
    from ..isa.asm import disassemble
    return [disassemble([int(w)]) for w in words]


def parse_words(ws) -> list:
    out = []
    for w in ws:
        v = int(w, 16) if isinstance(w, str) else int(w)
        if not 0 <= v <= 0xFFFFFFFF:
            raise ValueError(f"word {w!r} is not a 32-bit value")
        out.append(v)
    return out


def envelope(state: State, cfg: MachineConfig, pe: int, kind: str = "state_snapshot") -> dict:
    from ..interop import to_arch_state
    return to_arch_state(state, cfg, pe=pe, kind=kind)


def outcome_json(o: Outcome, cfg: MachineConfig, pe: int) -> dict:
    if o.error is not None:
        return {"error": o.error}
    fa = o.fault_address
    d: dict[str, Any] = {"fault": o.fault,
                         "fault_address": hex(fa) if o.fault in tables.MEMORY_FAULTS else None,
                         "executed": o.executed, "pc": hex(o.pc)}
    try:
        d["final"] = envelope(o.state(cfg), cfg, pe)
    except Exception as e:           # noqa: BLE001 - a State the envelope cannot express
        d["final"], d["final_error"] = None, str(e)
    return d


def case_json(case: G.Case) -> dict:
    regs = {str(pe): {tables.GPR_NAMES[r]: hex(v & MASK64) for r, v in sorted(rs.items()) if r and v}
            for pe, rs in sorted(case.gprs.items())}
    return {"kind": case.kind, "mutations": list(case.mutations), "notes": list(case.notes),
            "pc": hex(case.pc), "tile_capacity": case.tile_capacity, "pe": case.pe,
            "core": bool(getattr(case, "core", False)),
            "gprs": {pe: r for pe, r in regs.items() if r},
            "gm_nonzero_bytes": int(np.count_nonzero(np.frombuffer(bytes(case.gm), np.uint8))),
            "setup": words_hex(getattr(case, "setup", ())),
            "undefine": [list(x) for x in getattr(case, "undefine", ())],
            "pokes": [list(x) for x in getattr(case, "pokes", ())]}


def repro_json(case: G.Case, *, cfg: MachineConfig, config_name: str, on_fault: str, rows: int,
               campaign: dict, a: Outcome, b: Outcome, names: tuple, diffs: list,
               shrink: Optional[dict] = None, original: Optional[G.Case] = None,
               against: Optional[str] = None, against_protocol: str = "lines") -> dict:
    from ..version import __version__
    d: dict[str, Any] = {     # a JSON object
        "format": CASE_FORMAT, "ptojax_version": __version__,
        "config": {"preset": config_name, "machine": machine_json(cfg)},
        "pe": case.pe, "core": bool(case.core), "on_fault": on_fault, "batch": rows,
        "campaign": campaign,
        "case": case_json(case),
        "words": words_hex(case.words), "disassembly": disassembly(case.words),
        "initial": envelope(initial_state(case, cfg), cfg, case.pe, "initial_state"),
        "results": {names[0]: outcome_json(a, cfg, case.pe), names[1]: outcome_json(b, cfg, case.pe)},
        "differences": diffs,
        "against": against,
        "against_protocol": against_protocol if against else None,
    }
    if shrink is not None:
        d["shrink"] = dict(shrink)
        if original is not None:
            d["shrink"]["original_words"] = words_hex(original.words)
            d["shrink"]["original_case"] = case_json(original)
    return d


def write_json(path: Path, d: dict) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(d, indent=1) + "\n")
    return path


@dataclass
class Repro:
    """A loaded mismatch case: what `replay` runs."""
    data: dict
    cfg: MachineConfig
    state: State
    words: list
    pe: int
    on_fault: str
    rows: int
    core: bool = False            # run with pj.batch.run(core=True) / pj.reference.run_core


def load_repro(path) -> Repro:
    """Read a `ptojax.fuzz-case.v1` file (an export file works too)."""
    from ..interop import from_arch_state
    try:
        d = json.loads(Path(path).read_text())
    except OSError as e:
        raise ValueError(f"cannot read {path}: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not JSON ({e})") from None
    if not isinstance(d, dict) or d.get("format") not in (CASE_FORMAT, EXPORT_FORMAT):
        raise ValueError(f"{path}: not a ptojax fuzz case (format {CASE_FORMAT} or {EXPORT_FORMAT})")
    try:
        conf = d["config"]
        cfg = machine_from(conf["machine"] if "machine" in conf else conf)
        state = from_arch_state(d["initial"], cfg)
        words = parse_words(d["words"])
        pe, on_fault = int(d["pe"]), d["on_fault"]
        core = bool(d.get("core", False))
    except (KeyError, TypeError) as e:
        raise ValueError(f"{path}: missing or malformed field {e}") from None
    return Repro(d, cfg, state, words, pe, on_fault, int(d.get("batch", 64)), core)


def export_json(k: int, index: int, seed: int, case: G.Case, cfg: MachineConfig, on_fault: str,
                state: State, expected: Outcome) -> dict:
    return {
        "format": EXPORT_FORMAT, "id": f"{seed}-{k}",
        "campaign": {"seed": seed, "k": k, "index": index},
        "kind": case.kind, "mutations": list(case.mutations),
        "config": machine_json(cfg), "pe": case.pe, "core": bool(case.core), "on_fault": on_fault,
        "words": [int(w) for w in case.words], "words_hex": words_hex(case.words),
        "disassembly": disassembly(case.words),
        "initial": envelope(state, cfg, case.pe, "initial_state"),
        "expected": outcome_json(expected, cfg, case.pe),
    }


# ----------------------------------------------------------------- external command


class ExternalError(RuntimeError):
    """The external command failed, died, or broke the protocol."""


START_TIMEOUT = 600.0      # seconds the first answer may take: the command's start
                           # and first compile (a DUT on pj.batch.run: tens of seconds)


def _wait_group_dead(pgid: int, limit: float = 5.0) -> None:
    """Return once no live (non-zombie) process is left in group `pgid`, or after
    `limit` seconds. SIGKILL is delivered asynchronously: the shell's children,
    which nobody here can wait for, may still be running for a moment after the
    shell is reaped, and a caller that checks right after close() must not find
    them. Without /proc (not Linux) this returns at once."""
    deadline = time.monotonic() + limit
    proc = Path("/proc")
    if not proc.is_dir():
        return
    while time.monotonic() < deadline:
        alive = False
        for d in proc.iterdir():
            if not d.name.isdigit():
                continue
            try:
                # stat: "pid (comm) state ppid pgrp ..."; comm may hold spaces
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if fields[0] != "Z" and int(fields[2]) == pgid:
                alive = True
                break
        if not alive:
            return
        time.sleep(0.01)


class Command:
    """A started external command (`proc`): stopped by close(), or by leaving a
    `with` block, after its input is closed (`_end_input`). Its first answer
    may take `start_timeout` seconds, every later one `timeout`."""
    proc: subprocess.Popen
    timeout: float
    start_timeout: float = START_TIMEOUT
    answered: bool = False
    hung: bool = False              # it let an answer's time run out: close() stops it at once

    def _wait(self) -> float:
        """Seconds to wait for the next answer."""
        return self.timeout if self.answered else max(self.timeout, self.start_timeout)

    def _end_input(self):
        try:
            self.proc.stdin.close()
        except OSError:
            pass

    def close(self):
        if self.proc.poll() is None:
            self._end_input()
            try:
                self.proc.wait(timeout=0 if self.hung else 10)
            except subprocess.TimeoutExpired:
                # the command runs under a shell in its own session: stop the whole
                # group, or a hung DUT outlives the shell that started it
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait()
                _wait_group_dead(self.proc.pid)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class External(Command):
    """An external command speaking `ptojax.fuzz-against.v1` (one line per case)."""

    def __init__(self, command: str, cfg: MachineConfig, on_fault: str, timeout: float = 120.0,
                 start_timeout: float = START_TIMEOUT):
        self.command, self.cfg, self.on_fault, self.timeout = command, cfg, on_fault, timeout
        self.start_timeout = start_timeout
        self.n = 0
        try:
            self.proc = subprocess.Popen(command, shell=True, stdin=subprocess.PIPE,
                                         start_new_session=True, stdout=subprocess.PIPE, text=True, bufsize=1)
        except OSError as e:
            raise ExternalError(f"cannot start {command!r}: {e}") from None
        self.lines: queue.Queue[Optional[str]] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True, name="ptojax-against")
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def _line(self, state: State, words, pe: int) -> str:
        self.n += 1
        req = {"protocol": PROTOCOL, "id": self.n,
               "initial": envelope(state, self.cfg, pe, "initial_state"),
               "words": [int(w) for w in words], "pe": int(pe), "on_fault": self.on_fault}
        return json.dumps(req, separators=(",", ":")) + "\n"

    def _send(self, line: str):
        assert self.proc.stdin is not None      # stdin=PIPE
        try:
            self.proc.stdin.write(line)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            raise ExternalError(f"{self.command!r} closed its input "
                                f"(exit status {self.proc.poll()})") from None

    def _receive(self, n: int) -> dict:
        wait = self._wait()
        try:
            line = self.lines.get(timeout=wait)
        except queue.Empty:
            self.hung = True
            raise ExternalError(f"{self.command!r} gave no answer within {wait:g} s") from None
        self.answered = line is not None
        if line is None:
            self.lines.put(None)
            raise ExternalError(f"{self.command!r} ended without answering request {n} "
                                f"(exit status {self.proc.wait()})")
        try:
            ans = json.loads(line)
        except json.JSONDecodeError:
            raise ExternalError(f"{self.command!r} answered a line that is not JSON: {line[:200]!r}") from None
        if not isinstance(ans, dict):
            raise ExternalError(f"{self.command!r} answered {type(ans).__name__}, not an object")
        if "error" in ans:
            raise ExternalError(f"{self.command!r} reported an error: {ans['error']}")
        if "final" not in ans:
            raise ExternalError(f"{self.command!r}: the answer has no \"final\" envelope")
        return ans

    def _outcome(self, ans: dict, state: State) -> Outcome:
        from ..interop import from_arch_state
        try:
            final = from_arch_state(ans["final"], self.cfg)
        except ValueError as e:
            raise ExternalError(f"{self.command!r}: {e}") from None
        leaves = state_leaves(final)
        if "executed" in ans:
            executed = int(ans["executed"])
        else:
            executed = ((int(leaves[".pc"]) - int(np.asarray(state.pc))) & MASK64) // 4
        return Outcome(leaves, executed)

    def run_state(self, state: State, words, pe: int) -> Outcome:
        """One request, one answer."""
        self._send(self._line(state, words, pe))
        return self._outcome(self._receive(self.n), state)

    def run(self, case: G.Case, state: State) -> Outcome:
        return self.run_state(state, case.words, case.pe)

    def run_many(self, items) -> list:
        """Outcomes of [(case, state)]: request i+1 is written before answer i
        is read, so the command works on the next case while this side reads."""
        items = list(items)
        out = []
        ids = []
        for i, (case, state) in enumerate(items):
            if i == 0:
                self._send(self._line(state, case.words, case.pe))
                ids.append(self.n)
            if i + 1 < len(items):
                nc, ns = items[i + 1]
                self._send(self._line(ns, nc.words, nc.pe))
                ids.append(self.n)
            out.append(self._outcome(self._receive(ids[i]), state))
        return out


def serve(run, stdin=None, stdout=None) -> int:
    """The command side of the protocol: answer each request line with
    `run(state, words, pe, on_fault, cfg) -> final State`, where cfg is the
    request envelope's `metadata.machine_config` (sizes from the envelope when
    absent). Returns the number of requests answered."""
    import sys

    from ..interop import from_arch_state, to_arch_state
    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    n = 0
    for line in stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        pe = int(req.get("pe", 0))
        try:
            mc = req["initial"].get("metadata", {}).get("machine_config")
            cfg = machine_from(mc) if mc else None
            state = from_arch_state(req["initial"], cfg)
            final = run(state, parse_words(req["words"]), pe, req.get("on_fault", "abandon"), cfg)
            ans = {"id": req.get("id"), "final": to_arch_state(final, cfg, pe=pe)}
        except Exception as e:      # reported to ptojax, which stops the campaign
            ans = {"id": req.get("id"), "error": f"{type(e).__name__}: {e}"}
        stdout.write(json.dumps(ans, separators=(",", ":")) + "\n")
        stdout.flush()
        n += 1
    return n


__all__ = ["CASE_FORMAT", "EXPORT_FORMAT", "PROTOCOL", "Command", "External", "ExternalError", "Repro",
           "export_json", "load_repro", "repro_json", "serve", "write_json"]
