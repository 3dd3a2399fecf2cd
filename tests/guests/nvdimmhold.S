/* SPDX-License-Identifier: Apache-2.0
 * Touches the first 4 MiB of each of the first four NVDIMMs (at 4, 5, 6
 * and 7 GiB, as pmemvm places DIMMs of up to 1 GiB) with one write per 4 KiB
 * page, prints "touched" on COM1 and halts for good, so a test can read
 * pmemvm's /proc/PID/smaps, numa_maps and thread affinities while the guest
 * memory is mapped. 64-bit ELF without a PVH note (entered in long mode
 * with pmemvm's identity map of the first 1 GiB).
 * Page directories at 0x300000 (4 GiB) to 0x303000 (7 GiB). */
.include "long64.S"

.text
.code64
.globl _start
_start:
    mov $0x90000, %rsp
    /* Four PDs: 2 MiB pages (PS|RW|P) identity-mapping 4-8 GiB. */
    mov $0x300000, %rdi
    mov $(NVDIMM | 0x83), %rax
    mov $(4 * 512), %rcx
1:  mov %rax, (%rdi)
    add $0x200000, %rax
    add $8, %rdi
    loop 1b
    movq $(0x300000 | 3), BOOT_PDPT + 4 * 8
    movq $(0x301000 | 3), BOOT_PDPT + 5 * 8
    movq $(0x302000 | 3), BOOT_PDPT + 6 * 8
    movq $(0x303000 | 3), BOOT_PDPT + 7 * 8
    mov %cr3, %rax
    mov %rax, %cr3

    mov $NVDIMM, %rbx               /* DIMM base: 4, 5, 6, 7 GiB */
    mov $4, %r8
2:  mov %rbx, %rdi
    mov $1024, %rcx                 /* 4 MiB / 4 KiB */
3:  movb $0x5a, (%rdi)
    add $4096, %rdi
    loop 3b
    add $0x40000000, %rbx
    dec %r8
    jnz 2b

    lea msg(%rip), %rsi
4:  lodsb
    test %al, %al
    jz 5f
    mov $COM1, %dx
    out %al, %dx
    jmp 4b
5:  cli
6:  hlt
    jmp 6b
msg: .asciz "touched\n"
