/* SPDX-License-Identifier: Apache-2.0
 * Prints a line on the console and exits with status 42 through the
 * guest-exit port. */
.include "common.S"
.globl _start
_start:
    mov $0x90000, %esp
    mov $msg, %esi
    call puts
    mov $42, %al
    jmp exit_with
msg: .asciz "hello from the tiny guest\n"
