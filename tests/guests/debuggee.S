/* SPDX-License-Identifier: Apache-2.0
 * A guest for the gdb stub, as a 64-bit ELF without a PVH note (entered in
 * long mode with pmemvm's identity map, so memory is read through real page
 * tables). It adds 1 to `counter` five times, passes `poke` (a place for a
 * breakpoint: a one-byte nop, then a two-byte `xor`) and exits with the
 * byte in `status` (7 unless a debugger changed it). With interrupts off
 * and no exits until the end, a stop can only come from the debugger. */
.include "long64.S"

.text
.code64
.globl _start
.type _start, @function
_start:
    mov $0x90000, %rsp
    cli
    xor %ebx, %ebx
count:
    incq counter(%rip)
    inc %ebx
    cmp $5, %ebx
    jne count
.globl poke
.type poke, @function
poke:
    nop
    xor %ecx, %ecx
    movzbl status(%rip), %eax
    mov $GUEST_EXIT, %dx
    out %al, %dx
1:  hlt
    jmp 1b

.data
.globl counter
.type counter, @object
counter: .quad 0
.globl status
.type status, @object
status: .byte 7
