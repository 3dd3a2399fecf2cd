/* SPDX-License-Identifier: Apache-2.0
 * Reads COM1's line status register eight times with one `rep insb` (KVM
 * batches the reads of a string IN into one exit) and checks that every
 * byte is the register's value: exit 0x11 when all eight match and none
 * is 0xff (an unanswered read), 0x22 otherwise. */
.include "common.S"
.set BUF, 0x80000
.globl _start
_start:
    mov $0x90000, %esp
    cld
    mov $BUF, %edi
    mov $8, %ecx
    mov $(COM1 + 5), %dx
    rep insb
    mov $BUF, %esi
    movb (%esi), %al
    cmp $0xff, %al
    je 2f
    mov $1, %ecx
1:  cmpb %al, (%esi, %ecx)
    jne 2f
    inc %ecx
    cmp $8, %ecx
    jne 1b
    mov $0x11, %al
    jmp exit_with
2:  mov $0x22, %al
    jmp exit_with
