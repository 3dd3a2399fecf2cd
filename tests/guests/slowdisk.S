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

.include "virtio_disk.inc"
.set BUF, 0x24000

.globl _start
_start:
    mov $0x90000, %esp
    mov $msg, %esi
    call puts
    VIRTIO_DISK_SETUP no_features
    VIRTIO_DISK_READ0 BUF, 0

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
