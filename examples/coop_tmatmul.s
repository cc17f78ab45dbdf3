; Cooperative TMATMUL (ADR 0100) on the whole Core: D = A (20x4, U16) x B (4x4, U16),
; both operands in Shared registers, group_M = 20 rows split over the PEs.
;
;   ptojax run examples/coop_tmatmul.s --core --config small
;   (add --reference to run the plain-Python reference model instead of JAX;
;    --pe 1 without --core shows PE1's single-PE view: only its fragment)
;
; group_M = 20 <= 64, so each PE takes M_per_PE = 16 rows: valid_M = [16, 4, 0, 0].
; PE0 publishes D rows 0..15 in its own T#1, PE1 rows 16..19 in its T#1; PE2 and
; PE3 are idle and touch no Local state. Each fragment is CUBE_M16 U32 with the
; allocation mask of its own PE (1000, 0100), 256 B charged to that PE's pool.
;
; A[i][k] = 4i + k (GM 0x100, row stride 8); B (GM 0x200, row stride 8):
;   1 1 0 0 / 0 1 1 0 / 0 0 1 1 / 1 0 0 1
; The Shared TLOADs fill each quarter of a Shared register through the GPRs of
; the PE that owns it, so every PE's a0..a3 hold the same base and stride here.
;@ --gm-hex 0x100:00000100020003000400050006000700080009000a000b000c000d000e000f00
;@ --gm-hex 0x120:10001100120013001400150016001700180019001a001b001c001d001e001f00
;@ --gm-hex 0x140:20002100220023002400250026002700280029002a002b002c002d002e002f00
;@ --gm-hex 0x160:30003100320033003400350036003700380039003a003b003c003d003e003f00
;@ --gm-hex 0x180:40004100420043004400450046004700480049004a004b004c004d004e004f00
;@ --gm-hex 0x200:0100010000000000000001000100000000000000010001000100000000000100
;@ --gpr 0:a0=0x100 --gpr 0:a1=8 --gpr 1:a0=0x100 --gpr 1:a1=8 --gpr 2:a0=0x100 --gpr 2:a1=8 --gpr 3:a0=0x100 --gpr 3:a1=8
;@ --gpr 0:a2=0x200 --gpr 0:a3=8 --gpr 1:a2=0x200 --gpr 1:a3=8 --gpr 2:a2=0x200 --gpr 2:a3=8 --gpr 3:a2=0x200 --gpr 3:a3=8
;
; Expected D (U32): row i = [A[i][3]+A[i][0], A[i][0]+A[i][1], A[i][1]+A[i][2], A[i][2]+A[i][3]]
;   PE0 T#1 row 0:  3 1 3 5      row 15: 123 121 123 125
;   PE1 T#1 row 0:  131 129 131 133  (D row 16)   row 3: 155 153 155 157

; S1 = A: 20 valid rows of 4 U16 columns, 256 B per PE (32 physical rows), all four quarters
BSTART.TLOAD U16
B.DIM zero, 4, ->LB0                ; valid columns
B.DIM zero, 20, ->LB1               ; valid rows
B.DIM zero, 4, ->LB2                ; physical columns
B.IOR a0, a1                        ; each quarter's PE: base, row stride
B.IOS mask=1111, ->S1<2>
BSTOP

; S2 = B: 4x4 U16, 128 B per PE
BSTART.TLOAD U16
B.DIM zero, 4, ->LB0
B.DIM zero, 4, ->LB1
B.DIM zero, 4, ->LB2
B.IOR a2, a3
B.IOS mask=1111, ->S2<1>
BSTOP

; the cooperative bundle: LB0 is group_M, the mask must be 1111
BSTART.TMATMUL U16
B.FPATR 0, 0, 0, 0, 0, 0, 0, 0, 0
B.DIM zero, 20, ->LB0               ; group_M
B.DIM zero, 4, ->LB1                ; N
B.DIM zero, 4, ->LB2                ; K
B.IOS S1, mask=1111                 ; Shared A [group_M, K]
B.IOS S2, mask=1111                 ; Shared B [K, N]
B.IOT mask=1111, last, ->T<2>       ; D: one 256 B fragment per active PE
BSTOP
