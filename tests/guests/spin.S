/* SPDX-License-Identifier: Apache-2.0
 * Prints a line on the console, then spins with interrupts off and never
 * exits to the host: only a signal to the vCPU thread (pmemvm's kick) or the
 * watchdog can end it. */
.include "common.S"
.globl _start
.type _start, @function
_start:
    mov $0x90000, %esp
    mov $msg, %esi
    call puts
    cli
spin:
    pause
    jmp spin
msg: .asciz "spinning\n"
