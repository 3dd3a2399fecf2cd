/* SPDX-License-Identifier: Apache-2.0
 * A CXL Type-3 device as firmware leaves it (pmemvm --cxl-pmem 256M with
 * 64 MiB of RAM: the device at 0d:00.0, its register BAR at 0xe8000000,
 * its fixed memory window at 4 GiB), as a 64-bit ELF without a PVH note.
 * Through ports 0xCF8/0xCFC (how Linux reads a function's first 256
 * bytes) it checks the device's ids (0x34 if they do not answer there);
 * through ECAM it checks them again (0x31 if not), its component
 * registers in BAR0 (0x32 if not there), enables its memory (HDM global
 * enable, DVSEC Mem_Enable) and commits endpoint decoder 0 over the whole
 * window (0x33 if it does not read back committed). Then, at memory speed,
 * it checks the host's pattern at offset 4096 of the backing file, writes
 * "GUEST-WROTE-THIS" at offset 0, resets the decoder and writes
 * "AFTER-THE-RESET!" at offset 64, which must not reach the file; exit 0x11
 * when the pattern matched (0x22 when not). */
.include "long64.S"

.set ECAM_DEV, 0xe0d00000
.set BAR, 0xe8000000
.set DEC0, BAR + 0x1110

.text
.code64
.globl _start
_start:
    mov $0x90000, %rsp
    MAP_HOLE_AND_FIRST_NVDIMM

    /* Addresses above 2 GiB through registers (a 32-bit displacement is
     * sign-extended in long mode). */
    mov $ECAM_DEV, %r8
    mov $BAR, %r9
    mov $DEC0, %r10
    mov $0x800d0000, %eax
    mov $0xcf8, %dx
    out %eax, %dx
    mov $0xcfc, %dx
    in %dx, %eax
    cmp $0x0d938086, %eax
    mov $0x34, %al
    jne exit_with
    mov $0x31, %al
    cmpl $0x0d938086, (%r8)
    jne exit_with
    mov $0x32, %al
    movl 0x1000(%r9), %ebx
    cmpw $1, %bx
    jne exit_with
    /* HDM decoders on, DVSEC Mem_Enable. */
    movl $2, 0x1104(%r9)
    movw $4, 0x11c(%r8)
    /* Decoder 0: base 4 GiB, 256 MiB, commit (HDM-H target type). */
    movl $0, (%r10)
    movl $1, 4(%r10)
    movl $0x10000000, 8(%r10)
    movl $0, 12(%r10)
    movl $((1 << 9) | (1 << 12)), 16(%r10)
    mov $0x33, %al
    movl 16(%r10), %ebx
    test $(1 << 10), %ebx
    jz exit_with

    lea host_pat(%rip), %rsi
    mov $(NVDIMM + 4096), %rdi
    mov $16, %rcx
    repe cmpsb
    setne %r12b
    lea guest_pat(%rip), %rsi
    mov $NVDIMM, %rdi
    mov $16, %rcx
    rep movsb
    /* Reset the decoder: the window has nothing behind it again. */
    movl $0, 16(%r10)
    lea after_pat(%rip), %rsi
    mov $(NVDIMM + 64), %rdi
    mov $16, %rcx
1:  lodsb
    mov %al, (%rdi)
    inc %rdi
    loop 1b

    lea msg(%rip), %rsi
3:  lodsb
    test %al, %al
    jz 4f
    mov $COM1, %dx
    out %al, %dx
    jmp 3b
4:  mov $0x11, %al
    test %r12b, %r12b
    jz exit_with
    mov $0x22, %al
exit_with:
    mov $GUEST_EXIT, %dx
    out %al, %dx
6:  hlt
    jmp 6b
host_pat:  .ascii "HOST-PATTERN-123"
guest_pat: .ascii "GUEST-WROTE-THIS"
after_pat: .ascii "AFTER-THE-RESET!"
msg: .asciz "cxl test done\n"
