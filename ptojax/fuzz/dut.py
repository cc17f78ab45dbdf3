"""An external device under test, a batch of cases at a time (`ptojax fuzz
--against CMD --against-protocol batch`).

ptojax starts CMD once (through the shell) and writes one request per batch
to its standard input; CMD writes one answer per request, in order, to its
standard output. Both are batchfile containers (safetensors) back to back
(docs/fuzzing.md, "The batched DUT protocol"):

    request  __metadata__ {format: ptojax.fuzz-dut-request.v2, batch, cases,
             pe, on_fault, machine (JSON)}
             id uint64[n] (campaign case numbers), words uint32[n, L],
             lengths int32[n], core bool[n] (the case runs on the Core's four
             PEs), initial.* (the States, batchfile's layout)
    answer   __metadata__ {format: ptojax.fuzz-dut-answer.v2, batch}
             id uint64[n] (the request's, in its order), executed int64[n],
             final.* (the States after the cases)
             or __metadata__ {format: ..., batch, error: "message"}

A request is written while ptojax runs the batch itself, and the next ones
before an answer is read, so CMD works while ptojax does. A CMD that exits,
stops answering for `timeout` seconds, answers a malformed or short batch, or
answers for other cases is an ExternalError that names the batch and case;
the campaign stops there with every result it already has.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
from typing import Callable, Optional

import numpy as np

from ..state import MachineConfig
from . import batchfile
from .casefile import START_TIMEOUT, Command, ExternalError, machine_from, machine_json
from .compare import Results

REQUEST_FORMAT = "ptojax.fuzz-dut-request.v2"
ANSWER_FORMAT = "ptojax.fuzz-dut-answer.v2"


def request(batch_id: int, ids, words, lengths, core, initial: dict, cfg: MachineConfig, pe: int,
            on_fault: str) -> bytes:
    """One request's bytes; `initial`: the States as batchfile tensors under "initial"."""
    meta = {"format": REQUEST_FORMAT, "batch": batch_id, "cases": len(ids), "pe": pe,
            "on_fault": on_fault, "machine": json.dumps(machine_json(cfg), sort_keys=True)}
    t = {"id": np.asarray(ids, np.uint64), "words": np.asarray(words, np.uint32),
         "lengths": np.asarray(lengths, np.int32), "core": np.asarray(core, np.bool_)}
    t.update(initial)
    return batchfile.encode(t, meta)


class BatchedDut(Command):
    """The command side of a campaign's batched DUT: `send(batch, cfg)` writes
    a request (Batch from fuzz.campaign), `receive(token)` reads its answer as
    compare.Results."""

    def __init__(self, command: str, cfg: MachineConfig, pe: int, on_fault: str,
                 timeout: float = 120.0, start_timeout: float = START_TIMEOUT):
        self.command, self.cfg, self.pe, self.on_fault, self.timeout = command, cfg, pe, on_fault, timeout
        self.start_timeout = start_timeout
        self.n = 0
        try:
            self.proc = subprocess.Popen(command, shell=True, stdin=subprocess.PIPE,
                                         start_new_session=True, stdout=subprocess.PIPE, bufsize=0)
        except OSError as e:
            raise ExternalError(f"cannot start {command!r}: {e}") from None
        self.answers: queue.Queue = queue.Queue()
        self.requests: queue.Queue = queue.Queue(maxsize=4)
        self.write_error: Optional[str] = None
        threading.Thread(target=self._read, daemon=True, name="ptojax-dut-read").start()
        threading.Thread(target=self._write, daemon=True, name="ptojax-dut-write").start()

    def _read(self):
        while True:
            try:
                msg = batchfile.read_message(self.proc.stdout, "the answer")
            except (batchfile.BatchFileError, OSError, ValueError) as e:
                self.answers.put(e)
                return
            self.answers.put(msg)
            if msg is None:
                return

    def _write(self):
        while True:
            item = self.requests.get()
            if item is None:
                break
            try:
                self.proc.stdin.write(item)
                self.proc.stdin.flush()
            except (BrokenPipeError, OSError, ValueError) as e:
                self.write_error = str(e) or type(e).__name__
                return
        try:
            self.proc.stdin.close()
        except OSError:
            pass

    def _where(self, token) -> str:
        batch_id, ids = token
        span = (f"{len(ids)} cases, {int(ids.min())}..{int(ids.max())}" if len(ids) > 1 else
                f"case {int(ids[0])}" if len(ids) else "no cases")
        return f"batch {batch_id} ({span})"

    def send(self, batch, cfg: MachineConfig):
        """Write the request of a campaign Batch; the token receive() takes."""
        self.n += 1
        ids = np.asarray(batch.k, np.uint64)
        s = batch.starts
        buf = request(self.n, ids, s.words, s.lengths, s.core, s.tensors("initial", cfg), cfg,
                      self.pe, self.on_fault)
        token = (self.n, ids)
        if self.write_error is not None or self.proc.poll() is not None:
            raise ExternalError(f"{self.command!r} stopped reading before {self._where(token)} "
                                f"(exit status {self.proc.poll()})")
        self.requests.put(buf)
        return token

    def receive(self, token) -> Results:
        """The answer to a sent request, checked against it."""
        batch_id, ids = token
        where = self._where(token)
        wait = self._wait()
        try:
            msg = self.answers.get(timeout=wait)
        except queue.Empty:
            self.hung = True
            raise ExternalError(f"{self.command!r} gave no answer to {where} within "
                                f"{wait:g} s") from None
        self.answered = msg is not None and not isinstance(msg, Exception)
        if msg is None:
            self.answers.put(None)
            raise ExternalError(f"{self.command!r} ended without answering {where} "
                                f"(exit status {self.proc.wait()})")
        if isinstance(msg, Exception):
            self.answers.put(msg)
            raise ExternalError(f"{self.command!r}: its answer to {where} is malformed ({msg})")
        tensors, meta = msg
        if meta.get("format") != ANSWER_FORMAT:
            raise ExternalError(f"{self.command!r}: answer to {where} has format "
                                f"{meta.get('format')!r}, expected {ANSWER_FORMAT!r}")
        if meta.get("batch") != str(batch_id):
            raise ExternalError(f"{self.command!r}: answer for batch {meta.get('batch')!r} where "
                                f"{where} was due")
        if "error" in meta:
            raise ExternalError(f"{self.command!r} reported an error for {where}: {meta['error']}")
        got = tensors.get("id")
        if got is None or got.shape != ids.shape:
            raise ExternalError(f"{self.command!r}: answer to {where} holds "
                                f"{'no ids' if got is None else f'{got.size} ids'}, expected "
                                f"{len(ids)}")
        wrong = np.flatnonzero(got.astype(np.uint64) != ids)
        if len(wrong):
            i = int(wrong[0])
            raise ExternalError(f"{self.command!r}: answer to {where} gives case {int(got[i])} at "
                                f"row {i}, where case {int(ids[i])} was asked ({len(wrong)} rows "
                                "differ)")
        ex = tensors.get("executed")
        if ex is None or ex.shape != ids.shape:
            raise ExternalError(f"{self.command!r}: answer to {where} has no executed[{len(ids)}]")
        try:
            leaves = batchfile.tensors_to_states("final", tensors, self.cfg, len(ids), where)
        except batchfile.BatchFileError as e:
            raise ExternalError(f"{self.command!r}: {e}") from None
        return Results(leaves, ex.astype(np.int64))

    def run_state(self, state, words, pe: int, core: bool = False):
        """One case as a request of one row: its compare.Outcome (what the
        shrinker and `replay` ask a DUT)."""
        import jax
        from ..state import state_leaves
        from .starts import Starts
        leaves = {k: np.asarray(v)[None] for k, v in state_leaves(
            jax.tree_util.tree_map(np.asarray, state)).items()}
        w = np.zeros((1, max(1, len(words))), np.uint32)
        w[0, : len(words)] = words
        one = Starts(leaves[".gm"], leaves[".gpr"], leaves[".pc"], leaves[".tile_capacity"],
                     np.zeros(1, np.int32), w, np.array([len(words)], np.int32),
                     np.array([core]), leaves)
        self.n += 1
        token = (self.n, np.zeros(1, np.uint64))
        self.requests.put(request(self.n, token[1], w, one.lengths, one.core,
                                  one.tensors("initial", self.cfg), self.cfg, pe, self.on_fault))
        return self.receive(token)[0]

    def run(self, case, state):
        return self.run_state(state, case.words, case.pe, case.core)

    def _end_input(self):
        self.requests.put(None)          # the writer thread closes the input after the last


def serve(run: Callable, stdin=None, stdout=None) -> int:
    """The DUT side of the protocol: answer each request with
    `run(initial, words, lengths, core, pe, on_fault, cfg) -> (final, executed)`,
    where initial and final are state_leaves-style dicts of dense [n, ...]
    arrays. An exception `run` raises is answered as the batch's error (the
    campaign then stops). Returns the number of requests answered."""
    stdin = stdin or sys.stdin.buffer
    stdout = stdout or sys.stdout.buffer
    n = 0
    while True:
        msg = batchfile.read_message(stdin, "request")
        if msg is None:
            return n
        tensors, meta = msg
        batch_id = meta.get("batch", "?")
        try:
            if meta.get("format") != REQUEST_FORMAT:
                raise ValueError(f"format {meta.get('format')!r}, expected {REQUEST_FORMAT!r}")
            cfg = machine_from(json.loads(meta["machine"]))
            ids = tensors["id"]
            initial = batchfile.tensors_to_states("initial", tensors, cfg, len(ids))
            final, executed = run(initial, tensors["words"], tensors["lengths"], tensors["core"],
                                  int(meta["pe"]), meta["on_fault"], cfg)
            out = {"id": ids, "executed": np.asarray(executed, np.int64)}
            out.update(batchfile.states_to_tensors("final", final))
            buf = batchfile.encode(out, {"format": ANSWER_FORMAT, "batch": batch_id})
        except Exception as e:      # noqa: BLE001 - reported to ptojax, which stops the campaign
            buf = batchfile.encode({}, {"format": ANSWER_FORMAT, "batch": batch_id,
                                        "error": f"{type(e).__name__}: {e}"})
        stdout.write(buf)
        stdout.flush()
        n += 1


__all__ = ["ANSWER_FORMAT", "BatchedDut", "REQUEST_FORMAT", "request", "serve"]
