/* SPDX-License-Identifier: Apache-2.0
 * Two-vCPU flush-recording guest (tests/tests/record_instant.rs): a 64-bit
 * ELF entered in long mode with pmemvm's identity map of the first 1 GiB.
 *
 * vCPU 0 (the BSP) maps the MMIO hole and the first NVDIMM, starts vCPU 1
 * with INIT and SIPI through its local APIC, and once vCPU 1 runs writes the
 * DIMM's flush hint FLUSHES times, a short wait between each. vCPU 1 counts
 * in a loop and stores each count n to DIMM offset 0x1000 (page A) and then
 * to 0x2000 (page B), in that order. So at every instant of memory A is n
 * and B is n or n - 1: never B ahead of A, never A two ahead.
 *
 * vCPU 0 then asks vCPU 1 to stop, waits for it, prints "ab done" on COM1
 * and powers off (ACPI S5). vCPU 1 not up within about a second: guest-exit
 * byte 0x7d.
 */
.include "long64.S"

.set FLUSHES, 50
.set TRAMPOLINE, 0x10000           /* SIPI vector 0x10 */
.set AP_STACK, 0x80000
.set AP_UP, 0x50000                /* vCPU 1: 1 once it runs */
.set AP_STOP, 0x50008              /* vCPU 0: 1 to stop vCPU 1 */
.set AP_STOPPED, 0x50010           /* vCPU 1: 1 once stopped */
.set APIC_ICR_LOW, 0xfee00300
.set APIC_ICR_HIGH, 0xfee00310

/* Writes \low to the local APIC's ICR for APIC ID 1 (an address above 2 GiB
 * cannot be a 32-bit displacement in long mode). */
.macro ICR_TO_AP1 low
    mov $APIC_ICR_HIGH, %rdi
    movl $(1 << 24), (%rdi)
    mov $APIC_ICR_LOW, %rdi
    movl $\low, (%rdi)
.endm

.text
.code64
.globl _start
_start:
    mov $0x90000, %rsp
    MAP_HOLE_AND_FIRST_NVDIMM

    movq $0, AP_UP
    movq $0, AP_STOP
    movq $0, AP_STOPPED
    /* The real-mode trampoline to TRAMPOLINE, with this CR3 for vCPU 1. */
    lea ap_trampoline(%rip), %rsi
    mov $TRAMPOLINE, %rdi
    mov $(ap_trampoline_end - ap_trampoline), %rcx
    rep movsb
    mov %cr3, %rax
    mov %eax, TRAMPOLINE + (ap_cr3 - ap_trampoline)

    /* INIT, then SIPI twice (as the MP specification asks), to APIC ID 1. */
    ICR_TO_AP1 0x00004500
    call delay
    ICR_TO_AP1 (0x00004600 | (TRAMPOLINE >> 12))
    call delay
    cmpq $0, AP_UP
    jne 2f
    ICR_TO_AP1 (0x00004600 | (TRAMPOLINE >> 12))
2:  mov $2000, %r8
3:  cmpq $0, AP_UP
    jne 4f
    call delay
    dec %r8
    jnz 3b
    mov $0x7d, %al
    mov $GUEST_EXIT, %dx
    out %al, %dx
    jmp 9f

    /* The flushes, while vCPU 1 stores. */
4:  mov $FLUSHES, %r8
5:  mov $FLUSH_HINT, %rdx
    movl $1, (%rdx)
    call delay
    dec %r8
    jnz 5b
    movq $1, AP_STOP
6:  cmpq $0, AP_STOPPED
    je 6b

    lea msg(%rip), %rsi
7:  lodsb
    test %al, %al
    jz 8f
    mov $COM1, %dx
    out %al, %dx
    jmp 7b
8:  mov $SLEEP_CONTROL, %dx
    mov $((5 << 2) | 0x20), %al
    out %al, %dx
9:  cli
    hlt
    jmp 9b

/* Tens of microseconds on current hardware. */
delay:
    mov $20000, %ecx
1:  pause
    dec %ecx
    jnz 1b
    ret

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

/* Copied to TRAMPOLINE; vCPU 1 starts here in real mode at CS = TRAMPOLINE >> 4. */
.code16
ap_trampoline:
    cli
    lgdtl %cs:(ap_gdt_ptr - ap_trampoline)
    mov %cr0, %eax
    or $1, %eax
    mov %eax, %cr0
    ljmpl $0x08, $(TRAMPOLINE + ap_protected - ap_trampoline)
.code32
ap_protected:
    mov $0x10, %ax
    mov %ax, %ds
    mov %ax, %es
    mov %ax, %ss
    mov %cr4, %eax
    or $0x20, %eax                 /* PAE */
    mov %eax, %cr4
    mov TRAMPOLINE + (ap_cr3 - ap_trampoline), %eax
    mov %eax, %cr3
    mov $0xc0000080, %ecx          /* EFER.LME */
    rdmsr
    or $0x100, %eax
    wrmsr
    mov %cr0, %eax
    or $0x80000000, %eax           /* paging: long mode */
    mov %eax, %cr0
    ljmpl $0x18, $ap_main
.p2align 3
ap_gdt:
    .quad 0
    .quad 0x00cf9a000000ffff       /* 0x08: 32-bit code */
    .quad 0x00cf92000000ffff       /* 0x10: data */
    .quad 0x00af9a000000ffff       /* 0x18: 64-bit code */
ap_gdt_ptr:
    .word ap_gdt_ptr - ap_gdt - 1
    .long TRAMPOLINE + ap_gdt - ap_trampoline
ap_cr3:
    .long 0
ap_trampoline_end:
