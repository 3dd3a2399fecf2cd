/* SPDX-License-Identifier: Apache-2.0
 * Asks for a reset through the ACPI reset register. */
.include "common.S"
.globl _start
_start:
    mov $0x90000, %esp
    mov $RESET_REG, %dx
    mov $1, %al
    out %al, %dx
1:  hlt
    jmp 1b
