/* SPDX-License-Identifier: Apache-2.0
 * Executes int3 in ring 0, which PVM's instruction emulator cannot do (on
 * hardware KVM it is an ordinary breakpoint exception; with no IDT it ends
 * in a triple fault). */
.include "common.S"
.globl _start
_start:
    mov $0x90000, %esp
    mov $msg, %esi
    call puts
    lidt idtr
    int3
1:  hlt
    jmp 1b
.align 8
idtr: .word 0
      .long 0
msg: .asciz "about to int3\n"
