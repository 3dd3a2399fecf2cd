/* SPDX-License-Identifier: Apache-2.0
 * NVDIMM round trip, as a 64-bit ELF without a PVH note (so pmemvm enters it
 * in long mode with its identity map of the first 1 GiB, like a bzImage).
 * Maps 3-4 GiB (MMIO hole, uncached) and 4-5 GiB (the first NVDIMM) with
 * 2 MiB pages added to pmemvm's boot page tables, then: checks the 16 bytes
 * the host wrote at offset 4096 of the backing file ("HOST-PATTERN-123"),
 * writes "GUEST-WROTE-THIS" at offset 0 and 0xa5 over bytes 8192..12287,
 * writes DIMM 0's flush hint, and exits with 0x11 when the host pattern
 * matched (0x22 when not). */
.set COM1, 0x3f8
.set GUEST_EXIT, 0x501
.set BOOT_PDPT, 0xa000
.set NVDIMM, 0x100000000
.set FLUSH_HINT, 0xfe000000

.text
.code64
.globl _start
_start:
    mov $0x90000, %rsp
    /* PD for 3-4 GiB identity (PCD|PWT|PS|RW|P) at 0x300000. */
    mov $0x300000, %rdi
    mov $(0xc0000000 | 0x9b), %rax
    mov $512, %rcx
1:  mov %rax, (%rdi)
    add $0x200000, %rax
    add $8, %rdi
    loop 1b
    /* PD for 4-5 GiB identity (PS|RW|P) at 0x301000. */
    mov $0x301000, %rdi
    mov $(NVDIMM | 0x83), %rax
    mov $512, %rcx
2:  mov %rax, (%rdi)
    add $0x200000, %rax
    add $8, %rdi
    loop 2b
    movq $(0x300000 | 3), BOOT_PDPT + 3 * 8
    movq $(0x301000 | 3), BOOT_PDPT + 4 * 8
    mov %cr3, %rax
    mov %rax, %cr3

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
