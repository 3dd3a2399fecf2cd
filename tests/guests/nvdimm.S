/* SPDX-License-Identifier: Apache-2.0
 * NVDIMM round trip, as a 64-bit ELF without a PVH note (so pmemvm enters it
 * in long mode with its identity map of the first 1 GiB, like a bzImage).
 * Maps 3-4 GiB (MMIO hole, uncached) and 4-5 GiB (the first NVDIMM) with
 * 2 MiB pages added to pmemvm's boot page tables, then: checks the 16 bytes
 * the host wrote at offset 4096 of the backing file ("HOST-PATTERN-123"),
 * writes "GUEST-WROTE-THIS" at offset 0 and 0xa5 over bytes 8192..12287,
 * writes DIMM 0's flush hint, and exits with 0x11 when the host pattern
 * matched (0x22 when not). */
.include "long64.S"

.text
.code64
.globl _start
_start:
    mov $0x90000, %rsp
    MAP_HOLE_AND_FIRST_NVDIMM

    lea host_pat(%rip), %rsi
    mov $(NVDIMM + 4096), %rdi
    mov $16, %rcx
    repe cmpsb
    setne %bl
    lea guest_pat(%rip), %rsi
    mov $NVDIMM, %rdi
    mov $16, %rcx
    rep movsb
    mov $(NVDIMM + 8192), %rdi
    mov $0xa5a5a5a5, %eax
    mov $1024, %rcx
    rep stosl
    mov $FLUSH_HINT, %rdi
    movl $1, (%rdi)

    lea msg(%rip), %rsi
3:  lodsb
    test %al, %al
    jz 4f
    mov $COM1, %dx
    out %al, %dx
    jmp 3b
4:  mov $0x11, %al
    test %bl, %bl
    jz 5f
    mov $0x22, %al
5:  mov $GUEST_EXIT, %dx
    out %al, %dx
6:  hlt
    jmp 6b
host_pat:  .ascii "HOST-PATTERN-123"
guest_pat: .ascii "GUEST-WROTE-THIS"
msg: .asciz "nvdimm test done\n"
