/* SPDX-License-Identifier: Apache-2.0
 * Prints a line on the console and halts with interrupts off, so only the
 * host can end the VM (a signal, the watchdog). */
.include "common.S"
.globl _start
.type _start, @function
_start:
    mov $0x90000, %esp
    mov $msg, %esi
    call puts
1:  cli
    hlt
    jmp 1b
msg: .asciz "halting\n"
