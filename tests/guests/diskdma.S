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

.set VIRTIO, 0xd0000000
.set DESC, 0x20000
.set AVAIL, 0x21000
.set USED, 0x22000
.set HDR, 0x23000
.set STAT, 0x23100

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

    /* the request: type IN, sector 0; status preset 0xee */
    movl $0, HDR
    movl $0, HDR + 4
    movl $0, HDR + 8
    movl $0, HDR + 12
    movb $0xee, STAT
    /* descriptor 0: the header, then 1 */
    movl $HDR, DESC
    movl $0, DESC + 4
    movl $16, DESC + 8
    movw $1, DESC + 12
    movw $1, DESC + 14
    /* descriptor 1: 512 device-writable bytes at 0x1_0000_1000, then 2 */
    movl $0x1000, DESC + 16
    movl $1, DESC + 20
    movl $512, DESC + 24
    movw $3, DESC + 28
    movw $2, DESC + 30
    /* descriptor 2: the status byte */
    movl $STAT, DESC + 32
    movl $0, DESC + 36
    movl $1, DESC + 40
    movw $2, DESC + 44
    movw $0, DESC + 46
    /* available ring: flags 0, entry 0 = chain 0, then idx 1 */
    movw $0, AVAIL
    movw $0, AVAIL + 4
    movw $1, AVAIL + 2
    movl $0, 0x50(%ebx)

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
