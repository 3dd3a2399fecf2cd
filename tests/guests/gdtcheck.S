/* SPDX-License-Identifier: Apache-2.0
 * Checks the boot GDT pmemvm gives a 64-bit ELF (no PVH note): SGDT must
 * report five descriptors (limit 39) and the fifth, the TSS placeholder,
 * must still hold 0x00808b0000000000 — an IDT written on top of it zeroes
 * it. Exit byte 0x11: intact; 0x21: wrong limit; 0x22: TSS descriptor
 * overwritten.
 */
.include "long64.S"

.text
.code64
.globl _start
_start:
    mov $0x90000, %rsp
    sgdt gdtr(%rip)
    movzwl gdtr(%rip), %eax
    cmp $39, %eax
    jne bad_limit
    mov gdtr+2(%rip), %rbx
    mov 0x20(%rbx), %rax
    movabs $0x00808b0000000000, %rcx
    cmp %rcx, %rax
    jne bad_tss
    mov $0x11, %al
    jmp out
bad_limit:
    mov $0x21, %al
    jmp out
bad_tss:
    mov $0x22, %al
out:
    mov $GUEST_EXIT, %dx
    out %al, %dx
1:  cli
    hlt
    jmp 1b

.data
.align 16
gdtr: .word 0
      .quad 0
