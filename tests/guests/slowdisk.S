/* SPDX-License-Identifier: Apache-2.0
 * A guest that keeps running while its disk reads: sets up pmemvm's first
 * virtio-mmio disk (VERSION_1 only, one queue of 16), asks it to read sector 0
 * into RAM, then polls: each poll reads the device's interrupt status register
 * (an exit to pmemvm) and the used ring; every 256 polls it prints "t". When
 * the request is back it prints "R" and exits with its status byte (0 = OK);
 * 0x55 when FEATURES_OK was refused. With the disk I/O in the vCPU's thread
 * the notify write (or the register read) waits for the read, and no "t"
 * appears while the file is slow. */
.include "common.S"

.set VIRTIO, 0xd0000000
.set DESC, 0x20000
.set AVAIL, 0x21000
.set USED, 0x22000
.set HDR, 0x23000
.set STAT, 0x23100
.set BUF, 0x24000

.globl _start
_start:
    mov $0x90000, %esp
    mov $msg, %esi
    call puts
    mov $VIRTIO, %ebx
    movl $0, 0x70(%ebx)
    movl $1, 0x70(%ebx)
    movl $3, 0x70(%ebx)
    movl $1, 0x24(%ebx)
    movl $1, 0x20(%ebx)
    movl $0, 0x24(%ebx)
    movl $0, 0x20(%ebx)
    movl $11, 0x70(%ebx)
    movl 0x70(%ebx), %eax
    test $8, %eax
    jz no_features
    movl $0, 0x30(%ebx)
    movl $16, 0x38(%ebx)
    movl $DESC, 0x80(%ebx)
    movl $0, 0x84(%ebx)
    movl $AVAIL, 0x90(%ebx)
    movl $0, 0x94(%ebx)
    movl $USED, 0xa0(%ebx)
    movl $0, 0xa4(%ebx)
    movl $1, 0x44(%ebx)
    movl $15, 0x70(%ebx)

    movl $0, HDR
    movl $0, HDR + 4
    movl $0, HDR + 8
    movl $0, HDR + 12
    movb $0xee, STAT
    movl $HDR, DESC
    movl $0, DESC + 4
    movl $16, DESC + 8
    movw $1, DESC + 12
    movw $1, DESC + 14
    movl $BUF, DESC + 16
    movl $0, DESC + 20
    movl $512, DESC + 24
    movw $3, DESC + 28
    movw $2, DESC + 30
    movl $STAT, DESC + 32
    movl $0, DESC + 36
    movl $1, DESC + 40
    movw $2, DESC + 44
    movw $0, DESC + 46
    movw $0, AVAIL
    movw $0, AVAIL + 4
    movw $1, AVAIL + 2
    movl $0, 0x50(%ebx)

    xor %edi, %edi
1:  movl 0x60(%ebx), %eax
    movw USED + 2, %ax
    cmp $1, %ax
    je 2f
    inc %edi
    test $0xff, %edi
    jnz 1b
    mov $'t', %al
    mov $COM1, %dx
    out %al, %dx
    jmp 1b
2:  mov $done, %esi
    call puts
    movzbl STAT, %eax
    jmp exit_with
no_features:
    mov $0x55, %al
    jmp exit_with
msg: .asciz "reading sector 0\n"
done: .asciz "R\n"
