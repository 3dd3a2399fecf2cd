/* SPDX-License-Identifier: Apache-2.0
 * Two-vCPU flush-recording guest (tests/tests/record_instant.rs): a 64-bit
 * ELF entered in long mode with pmemvm's identity map of the first 1 GiB.
 *
 * vCPU 0 maps the MMIO hole and the first NVDIMM, starts vCPU 1
 * (ap_start.inc), and once vCPU 1 runs writes the DIMM's flush hint FLUSHES
 * times, a short wait between each. vCPU 1 counts in a loop and stores each
 * count n to DIMM offset 0x1000 (page A) and then to 0x2000 (page B), in
 * that order. So at every instant of memory A is n and B is n or n - 1:
 * never B ahead of A, never A two ahead.
 *
 * vCPU 0 then asks vCPU 1 to stop, waits for it, prints "ab done" on COM1
 * and powers off (ACPI S5). vCPU 1 not up within about a second: guest-exit
 * byte 0x7d.
 */
.include "long64.S"
.include "ap_start.inc"

.set FLUSHES, 50
.set AP_STACK, 0x80000
.set AP_UP, 0x50000                /* vCPU 1: 1 once it runs */
.set AP_STOP, 0x50008              /* vCPU 0: 1 to stop vCPU 1 */
.set AP_STOPPED, 0x50010           /* vCPU 1: 1 once stopped */

.text
.code64
.globl _start
_start:
    mov $0x90000, %rsp
    MAP_HOLE_AND_FIRST_NVDIMM
    movq $0, AP_STOP
    movq $0, AP_STOPPED
    START_AP AP_UP, no_ap

    /* The flushes, while vCPU 1 stores. */
    mov $FLUSHES, %r8
1:  mov $FLUSH_HINT, %rdx
    movl $1, (%rdx)
    AP_PAUSE
    dec %r8
    jnz 1b
    movq $1, AP_STOP
2:  cmpq $0, AP_STOPPED
    je 2b

    lea msg(%rip), %rsi
3:  lodsb
    test %al, %al
    jz 4f
    mov $COM1, %dx
    out %al, %dx
    jmp 3b
4:  mov $SLEEP_CONTROL, %dx
    mov $((5 << 2) | 0x20), %al
    out %al, %dx
9:  cli
    hlt
    jmp 9b

no_ap:
    mov $0x7d, %al
    mov $GUEST_EXIT, %dx
    out %al, %dx
    jmp 9b

/* vCPU 1 in long mode: count, store A then B, until asked to stop. */
ap_main:
    mov $AP_STACK, %rsp
    movq $1, AP_UP
    mov $NVDIMM, %rbx
    xor %rax, %rax
1:  inc %rax
    mov %rax, 0x1000(%rbx)
    mov %rax, 0x2000(%rbx)
    cmpq $0, AP_STOP
    je 1b
    movq $1, AP_STOPPED
2:  cli
    hlt
    jmp 2b

msg: .asciz "ab done\n"

AP_TRAMPOLINE_CODE
