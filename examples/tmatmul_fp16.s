; TMATMUL FP16: D (2x2, FP32) = A (2x3, FP16) x B (3x2, FP16), All-Local CUBE operands.
;
;   ptojax run examples/tmatmul_fp16.s --config small                   # portable profile
;   ptojax run examples/tmatmul_fp16.s --config small --profile ieee    # ieee profile
;   (add --reference to run the plain-Python reference model instead of JAX)
;
; The three blocks are the ones of `ptojax demo`, step 5: two CUBE TLOADs from GM
; build A (CUBE_M16) and B (CUBE_N8), then TMATMUL writes D into T#1 (tile 0).
;
; Setup lines (`;@`, read by `ptojax run`; --gm-hex / --gpr on the command line
; are applied after them and can override them):
;   A = [[1, 2, 3], [4, 5, 6]]                 FP16 bits 3c00 4000 4200 / 4400 4500 4600
;   B = [[0.5, -1], [0.25, 2], [1.5, 0.125]]   FP16 bits 3800 bc00 / 3400 4000 / 3e00 3000
;@ --gm-hex 0x100:003c00400042004400450046
;@ --gm-hex 0x140:003800bc00340040003e0030
;@ --gpr a0=0x100 --gpr a1=6
;@ --gpr a4=0x140 --gpr a5=4
;
; Expected D (T#1, CUBE_M16 FP32, valid 2x2; docs/numerics.md, "Arithmetic of the
; matrix family"):
;   portable (default; the ASL model's arithmetic): the raw FP16 bit patterns are
;     multiplied and summed as integers mod 2^64, e.g. D[0][0] =
;     0x3c00*0x3800 + 0x4000*0x3400 + 0x4200*0x3e00 = 0x2a1c0000:
;       2a1c0000 48700000
;       2dd80000 50500000
;   ieee: exact products rounded to binary32, binary32 adds over ascending k:
;       40b00000 40580000        = 5.5    3.375
;       41440000 40d80000        = 12.25  6.75

; A: 2x3 FP16 from GM 0x100 (row stride 6) into M#1 (tile 32)
BSTART.TLOAD FP16
B.DATR {ND2M16, DTYPE_NONE, Max}    ; ND -> CUBE_M16, pad with the FP16 maximum (never read)
B.DIM zero, 3, ->LB0                ; valid columns: K
B.DIM zero, 2, ->LB1                ; valid rows: M
B.IOR a0, a1                        ; base address, row stride in bytes
B.IOT mask=1000, last, ->M<1>       ; destination: a Matrix-hand tile of 128 B on PE0
BSTOP

; B: 3x2 FP16 from GM 0x140 (row stride 4) into N#1 (tile 48)
BSTART.TLOAD FP16
B.DATR {ND2N8, DTYPE_NONE}          ; ND -> CUBE_N8 (B's layout), pad with zeros
B.DIM zero, 2, ->LB0                ; valid columns: N
B.DIM zero, 3, ->LB1                ; valid rows: K
B.IOR a4, a5                        ; base 0x140, row stride 4 bytes
B.IOT mask=1000, last, ->N<1>       ; destination: N#1 (tile 48), 128 B
BSTOP

; D = A x B into T#1 (tile 0)
BSTART.TMATMUL FP16                 ; AType FP16 (no B.DATR: BType = AType)
B.FPATR 0                           ; required; all zero: no conversion, activation, maxima
B.DIM zero, 2, ->LB0                ; M
B.DIM zero, 2, ->LB1                ; N
B.DIM zero, 3, ->LB2                ; K
B.IOT M#1, N#1, mask=1000, last, ->T<1>   ; sources A, B; D: T#1, 128 B (SizeCode 1)
BSTOP
