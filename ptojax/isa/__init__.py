"""The ptojax command slice: form table, decoder, assembler and disassembler.

Note: ``ptojax.isa.decode`` is the *function* (it shadows the submodule of the
same name); import ``Command`` from here or ``from ptojax.isa.decode import Command``.
"""

from . import forms
from .decode import Command, decode
from . import asm
from .asm import AsmError, assemble, disassemble

__all__ = ["forms", "asm", "Command", "decode", "AsmError", "assemble", "disassemble"]
