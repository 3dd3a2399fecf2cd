/* SPDX-License-Identifier: Apache-2.0
 * A hostile disk driver: sets up pmemvm's first virtio-mmio disk as Linux's
 * driver does (VERSION_1 only, one queue of 16), then asks it to read sector 0
 * (512 bytes) into guest-physical 4 GiB + 4 KiB, where the first NVDIMM or
 * legacy range lies, and waits for the used ring. Exits with the request's
 * status byte (0 = OK, 1 = IOERR), 0x44 when the device never returned the
 * request, 0x45 when it returned it without a status (the byte still 0xee),
 * 0x55 when FEATURES_OK was refused. After a request that succeeded it
 * writes DIMM 0's flush hint (a flush, for `record=`). The guest itself never
 * touches the range (32-bit, paging off): only the device's DMA does. */
.include "common.S"

.include "virtio_disk.inc"

.globl _start
_start:
    mov $0x90000, %esp
    mov $msg, %esi
    call puts
    VIRTIO_DISK_SETUP no_features
    VIRTIO_DISK_READ0 0x1000, 1

    mov $50000000, %ecx
1:  movw USED + 2, %ax
    cmp $1, %ax
    je 2f
    loop 1b
    mov $0x44, %al
    jmp exit_with
2:  movzbl STAT, %eax
    cmp $0xee, %al
    jne 3f
    mov $0x45, %al
3:  test %al, %al
    jnz 4f
    movl $1, FLUSH_HINT
4:  jmp exit_with
no_features:
    mov $0x55, %al
    jmp exit_with
msg: .asciz "reading sector 0 into 4 GiB + 4 KiB\n"
