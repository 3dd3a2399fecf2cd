/* SPDX-License-Identifier: Apache-2.0
 * Shared pieces of the 64-bit tiny guests (ELF without a PVH note, entered in
 * long mode with pmemvm's identity map of the first 1 GiB): constants, and a
 * macro that adds identity maps of 3-4 GiB (MMIO hole: flush hints, uncached)
 * and 4-5 GiB (the first NVDIMM) with 2 MiB pages to pmemvm's boot PDPT.
 * Page directories at 0x300000 and 0x301000.
 */
.set COM1, 0x3f8
.set GUEST_EXIT, 0x501
.set SLEEP_CONTROL, 0x600
.set RESET_REG, 0x602
.set I8042_CMD, 0x64
.set BOOT_PDPT, 0xa000
.set NVDIMM, 0x100000000
.set FLUSH_HINT, 0xfe000000

.macro MAP_HOLE_AND_FIRST_NVDIMM
    /* PD for 3-4 GiB identity, uncached (PCD|PWT|PS|RW|P), at 0x300000. */
    mov $0x300000, %rdi
    mov $(0xc0000000 | 0x9b), %rax
    mov $512, %rcx
101:
    mov %rax, (%rdi)
    add $0x200000, %rax
    add $8, %rdi
    loop 101b
    /* PD for 4-5 GiB identity (PS|RW|P), at 0x301000. */
    mov $0x301000, %rdi
    mov $(NVDIMM | 0x83), %rax
    mov $512, %rcx
102:
    mov %rax, (%rdi)
    add $0x200000, %rax
    add $8, %rdi
    loop 102b
    movq $(0x300000 | 3), BOOT_PDPT + 3 * 8
    movq $(0x301000 | 3), BOOT_PDPT + 4 * 8
    mov %cr3, %rax
    mov %rax, %cr3
.endm
