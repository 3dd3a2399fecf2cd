/* SPDX-License-Identifier: Apache-2.0
 * Loads an empty IDT and faults: with no handler for the fault nor for the
 * double fault, the CPU shuts down (triple fault). */
.include "common.S"
.globl _start
_start:
    mov $0x90000, %esp
    lidt idtr
    /* A load from a non-canonical... in 32-bit mode: use a #GP from a null
     * segment load into SS instead. */
    xor %eax, %eax
    mov %ax, %ss
    push %eax
1:  hlt
    jmp 1b
.align 8
idtr: .word 0
      .long 0
