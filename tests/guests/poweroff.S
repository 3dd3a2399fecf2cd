/* SPDX-License-Identifier: Apache-2.0
 * ACPI soft-off: SLP_TYP 5 with SLP_EN written to the sleep control register. */
.include "common.S"
.globl _start
_start:
    mov $0x90000, %esp
    mov $msg, %esi
    call puts
    mov $SLEEP_CONTROL, %dx
    mov $((5 << 2) | 0x20), %al
    out %al, %dx
1:  hlt
    jmp 1b
msg: .asciz "powering off\n"
