/* SPDX-License-Identifier: Apache-2.0
 * A machine check with two vCPUs (tests/tests/mce_smp.rs): a 64-bit ELF
 * entered in long mode. The first NVDIMM is 16 MiB with a bad block at
 * offset 1 MiB (`badblocks=1048576+512,mce=on`).
 *
 * Both vCPUs take machine checks (one IDT, CR4.MCE set on each); vCPU 1
 * (ap_start.inc) spins with interrupts off. vCPU 0 loads from the bad
 * block. The #MC handler notes on which vCPU it ran (local APIC ID) and that
 * vCPU's MCG_STATUS. On vCPU 1 it clears MCG_STATUS and returns. On vCPU 0
 * it checks its own MCG_STATUS (MCIP|EIPV|RIPV), then waits about a second
 * for vCPU 1's:
 *   0x4d  vCPU 1 took a machine check with MCIP|RIPV and no EIPV (a
 *         broadcast, as Intel processors signal an error without LMCE)
 *   0x4e  vCPU 1 took none (as AMD processors signal it: locally)
 *   0x7a  vCPU 1's MCG_STATUS was something else
 *   0x7b  vCPU 0's MCG_STATUS was not MCIP|EIPV|RIPV
 *   0x7d  vCPU 0's load completed without a machine check
 *   0x7c  vCPU 1 did not start
 * The two MCG_STATUS values are printed on COM1 as "mcg0=XX mcg1=XX".
 */
.include "long64.S"
.include "ap_start.inc"
.include "mc_idt.inc"

.set BAD, NVDIMM + 0x100000 + 8
.set AP_STACK, 0x80000
.set AP_UP, 0x50000
.set SEEN, 0x50100                 /* per vCPU: 0x100 | MCG_STATUS[7:0] */
.set LAPIC_ID, 0xfee00020

.text
.code64
.globl _start
_start:
    mov $0x90000, %rsp
    MAP_HOLE_AND_FIRST_NVDIMM
    movq $0, SEEN
    movq $0, SEEN + 8
    MC_IDT mc_handler
    START_AP AP_UP, no_ap

    mov $BAD, %rdi
    mov (%rdi), %rax
    mov $0x7d, %bl
    jmp exit_bl

no_ap:
    mov $0x7c, %bl
    jmp exit_bl

/* This vCPU's IDT and CR4.MCE. */
take_machine_checks:
    lidt idtr(%rip)
    mov %cr4, %rax
    or $0x40, %rax
    mov %rax, %cr4
    ret

ap_main:
    mov $AP_STACK, %rsp
    call take_machine_checks
    movq $1, AP_UP
1:  pause
    jmp 1b

mc_handler:
    mov $LAPIC_ID, %rdi
    mov (%rdi), %ebx
    shr $24, %ebx
    and $1, %ebx
    mov $0x17a, %ecx                     /* MCG_STATUS */
    rdmsr
    and $0xff, %eax
    or $0x100, %eax
    lea SEEN(, %rbx, 8), %rdi
    mov %rax, (%rdi)
    test %ebx, %ebx
    jz 2f
    xor %eax, %eax                       /* vCPU 1: leave the handler */
    xor %edx, %edx
    wrmsr
    iretq
2:  and $0xff, %eax
    cmp $7, %eax
    mov $0x7b, %bl
    jne exit_bl
    TSC_DEADLINE
3:  cmpq $0, SEEN + 8
    jne 4f
    TSC_WAITING
    jb 3b
4:  call report
    mov SEEN + 8, %rax
    mov $0x4e, %bl
    test %rax, %rax
    jz exit_bl
    and $0xff, %eax
    cmp $5, %eax
    mov $0x4d, %bl
    je exit_bl
    mov $0x7a, %bl

exit_bl:
    mov %bl, %al
    mov $GUEST_EXIT, %dx
    out %al, %dx
5:  cli
    hlt
    jmp 5b

/* "mcg0=XX mcg1=XX\n" from SEEN. */
report:
    mov $COM1, %dx
    mov $'0', %r9b
    lea SEEN, %r10
6:  lea msg_mcg(%rip), %rsi
7:  lodsb
    test %al, %al
    jz 8f
    out %al, %dx
    jmp 7b
8:  mov %r9b, %al
    out %al, %dx
    mov $'=', %al
    out %al, %dx
    mov (%r10), %r11
    mov %r11, %rax
    shr $4, %rax
    call hex_digit
    mov %r11, %rax
    call hex_digit
    mov $' ', %al
    out %al, %dx
    add $8, %r10
    inc %r9b
    cmp $'2', %r9b
    jne 6b
    mov $'\n', %al
    out %al, %dx
    ret

hex_digit:
    and $0xf, %al
    add $'0', %al
    cmp $'9', %al
    jbe 9f
    add $('a' - '9' - 1), %al
9:  out %al, %dx
    ret

msg_mcg: .asciz "mcg"

AP_TRAMPOLINE_CODE

.data
MC_IDT_DATA
