/* SPDX-License-Identifier: Apache-2.0
 * Flushes while other vCPUs store (tests/tests/record_cost.rs, a benchmark):
 * a 64-bit ELF entered in long mode. The host writes at offset 0 of the
 * first NVDIMM's file: "FLUSHRT1", then u32 flushes, u32 vCPUs.
 *
 * Every vCPU but 0 (started with one INIT/SIPI to all others) stores a count
 * to its own page of the DIMM (page 1 + APIC ID) in a loop; once all run,
 * vCPU 0 writes the DIMM's flush hint `flushes` times, stops them, prints
 * "flushes done" and powers off. A wrong magic: guest-exit byte 0x7e; the
 * others not up within about a second: 0x7c.
 */
.include "long64.S"
.include "ap_start.inc"

.set UP, 0x50000
.set STOP, 0x50008
.set LAPIC_ID, 0xfee00020

.text
.code64
.globl _start
_start:
    mov $0x90000, %rsp
    MAP_HOLE_AND_FIRST_NVDIMM
    mov $NVDIMM, %rbx
    movabs $0x3154524853554c46, %rax      /* "FLUSHRT1" */
    cmp %rax, (%rbx)
    je 1f
    mov $0x7e, %al
    jmp exit_al
1:  movq $0, UP
    movq $0, STOP
    mov 12(%rbx), %r12d                   /* vCPUs */
    dec %r12
    jz 3f
    START_ALL_APS
    TSC_DEADLINE
2:  cmp %r12, UP
    je 3f
    TSC_WAITING
    jb 2b
    mov $0x7c, %al
    jmp exit_al
3:  mov 8(%rbx), %ecx                     /* flushes */
    mov $FLUSH_HINT, %rdx
4:  jrcxz 5f
    movl $1, (%rdx)
    dec %ecx
    jmp 4b
5:  movq $1, STOP
    lea msg(%rip), %rsi
    mov $COM1, %dx
6:  lodsb
    test %al, %al
    jz 7f
    out %al, %dx
    jmp 6b
7:  mov $SLEEP_CONTROL, %dx
    mov $((5 << 2) | 0x20), %al
    out %al, %dx
9:  cli
    hlt
    jmp 9b
exit_al:
    mov $GUEST_EXIT, %dx
    out %al, %dx
    jmp 9b

/* Every other vCPU: count, store to its page, until stopped. No stack. */
ap_main:
    lock incq UP
    mov $LAPIC_ID, %rdi
    mov (%rdi), %edi
    shr $24, %edi
    inc %edi
    shl $12, %rdi
    mov $NVDIMM, %rax
    add %rax, %rdi
    xor %rax, %rax
1:  inc %rax
    mov %rax, (%rdi)
    cmpq $0, STOP
    je 1b
2:  cli
    hlt
    jmp 2b

msg: .asciz "flushes done\n"

AP_TRAMPOLINE_CODE
