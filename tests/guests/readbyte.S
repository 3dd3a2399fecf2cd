/* SPDX-License-Identifier: Apache-2.0
 * Waits for one byte of console input on COM1 (polling the line status
 * register's data-ready bit) and exits with that byte as the status. */
.include "common.S"
.globl _start
_start:
    mov $0x90000, %esp
    mov $msg, %esi
    call puts
1:  mov $(COM1 + 5), %dx
    inb %dx, %al
    test $1, %al
    jz 1b
    mov $COM1, %dx
    inb %dx, %al
    jmp exit_with
msg: .asciz "waiting for a byte\n"
