; Shared TLOADs of S40 = [[2]] and S41 = [[3]], then TMATMUL D = S40 x S41 on a
; partial mask 1100: adr0100 rejects it (Fault_TileLegality), the 0.58.3 model
; (ptojax run --semantics 0.58.3) publishes D = [[6]] with the mask 1100.
;@ --gm-hex 0x100:0200 --gm-hex 0x110:0300 --gpr a0=0x100 --gpr a2=0x110
BSTART.TLOAD U16
B.DIM zero, 1, ->LB0
B.DIM zero, 1, ->LB1
B.DIM zero, 1, ->LB2
B.IOS mask=1111, ->S40<1>
B.IOR a0, a1
BSTOP
BSTART.TLOAD U16
B.DIM zero, 1, ->LB0
B.DIM zero, 1, ->LB1
B.DIM zero, 1, ->LB2
B.IOS mask=1111, ->S41<1>
B.IOR a2, a1
BSTOP
BSTART.TMATMUL U16
B.FPATR 0, 0, 0, 0, 0, 0, 0, 0, 0
B.DIM zero, 1, ->LB0
B.DIM zero, 1, ->LB1
B.DIM zero, 1, ->LB2
B.IOS S40, mask=1100
B.IOS S41, mask=1100
B.IOT mask=1100, last, ->T<1>
BSTOP
