/* SPDX-License-Identifier: Apache-2.0
 * Ring-3 data-path guest of the guest-vs-host ratio benchmark
 * (tests/benches/ring3_ratio.rs). On PVM KVM ring-3 guest code runs
 * natively, so the loop measures the guest's real access to its NVDIMM.
 * 64-bit ELF without a PVH note. In ring 0: own page tables (first 1 GiB
 * and the first NVDIMM at 4 GiB identity-mapped with user-accessible
 * 2 MiB pages), own GDT with ring-3 segments, then iretq to ring 3 with
 * IOPL 3. In ring 3: reads the parameters the host left at PARAMS, touches
 * every 4 KiB page of the DIMM, runs ratio_loop in modes 0-4, stores the
 * cycle counts at RESULTS and writes 0x11 to the guest-exit port.
 *
 * PARAMS (0x200000): +0 DIMM bytes, +8 slot mask, +16 iterations for
 * modes 0-2, +24 iterations for modes 3-4. RESULTS (0x200100): magic
 * "R3RATIO1", then cycles of modes 0..4, then the CPL the loop ran at. */
.include "long64.S"
.set PARAMS, 0x200000
.set RESULTS, 0x200100
.set PML4, 0x310000
.set PDPT, 0x311000
.set PD_LOW, 0x312000
.set PD_DIMM, 0x313000
.set USTACK, 0x280000

.text
.code64
.globl _start
_start:
    mov $0x90000, %rsp
    /* PDs: 2 MiB pages, PS|US|RW|P = 0x87. */
    mov $PD_LOW, %rdi
    mov $0x87, %rax
    mov $512, %rcx
1:  mov %rax, (%rdi)
    add $0x200000, %rax
    add $8, %rdi
    loop 1b
    mov $PD_DIMM, %rdi
    mov $(NVDIMM | 0x87), %rax
    mov $512, %rcx
2:  mov %rax, (%rdi)
    add $0x200000, %rax
    add $8, %rdi
    loop 2b
    /* PDPT: 0-1 GiB and 4-5 GiB; PML4[0]. US|RW|P = 7. */
    mov $PDPT, %rdi
    xor %eax, %eax
    mov $512, %rcx
    rep stosq
    mov $PML4, %rdi
    mov $512, %rcx
    rep stosq
    movq $(PD_LOW | 7), PDPT
    movq $(PD_DIMM | 7), PDPT + 4 * 8
    movq $(PDPT | 7), PML4
    mov $PML4, %rax
    mov %rax, %cr3
    lgdt gdt_ptr(%rip)
    /* iretq frame: SS, RSP, RFLAGS (IOPL 3, IF off), CS, RIP. */
    pushq $(0x18 | 3)
    pushq $USTACK
    pushq $0x3002
    pushq $(0x20 | 3)
    lea ring3(%rip), %rax
    push %rax
    iretq

ring3:
    mov $(0x18 | 3), %ax
    mov %ax, %ds
    mov %ax, %es
    /* The privilege level the loop runs at, for the tests. */
    mov %cs, %rax
    and $3, %rax
    mov %rax, RESULTS + 48
    /* Touch every 4 KiB page of the DIMM once (both sides start warm). */
    mov $NVDIMM, %rdi
    mov PARAMS, %rcx
    shr $12, %rcx
3:  mov (%rdi), %rax
    mov %rax, (%rdi)
    add $4096, %rdi
    loop 3b
    xor %r13, %r13
4:  mov $NVDIMM, %rdi
    mov PARAMS + 8, %rsi
    mov PARAMS + 16, %rdx
    cmp $3, %r13
    jb 5f
    mov PARAMS + 24, %rdx
5:  mov %r13, %rcx
    call ratio_loop
    mov %rax, RESULTS + 8(, %r13, 8)
    inc %r13
    cmp $5, %r13
    jb 4b
    movabs $0x314F495441523352, %rax   /* "R3RATIO1" */
    mov %rax, RESULTS
    mov $0x11, %al
    mov $GUEST_EXIT, %dx
    out %al, %dx
6:  jmp 6b

.include "ratio_loops.inc"

.data
.align 16
gdt:
    .quad 0                          /* null */
    .quad 0x00af9a000000ffff         /* 0x08 kernel code 64 */
    .quad 0x00cf92000000ffff         /* 0x10 kernel data */
    .quad 0x00cff2000000ffff         /* 0x18 user data */
    .quad 0x00affa000000ffff         /* 0x20 user code 64 */
gdt_end:
gdt_ptr:
    .word gdt_end - gdt - 1
    .quad gdt
