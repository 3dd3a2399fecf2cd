/* SPDX-License-Identifier: Apache-2.0
 * Prints a line on the console with one `rep outsb` (a string I/O exit
 * carrying many bytes), then exits with status 42. */
.include "common.S"
.globl _start
_start:
    mov $0x90000, %esp
    cld
    mov $msg, %esi
    mov $(msg_end - msg), %ecx
    mov $COM1, %dx
    rep outsb
    mov $42, %al
    jmp exit_with
msg: .ascii "rep outsb reached the console in one piece\n"
msg_end:
