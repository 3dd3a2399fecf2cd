/* SPDX-License-Identifier: Apache-2.0
 * Durability guest (tests/tests/durability.rs): a 64-bit ELF without a PVH
 * note, entered in long mode with pmemvm's identity map of the first 1 GiB.
 *
 * The host writes a parameter block at offset 0 of the first NVDIMM's
 * backing file before the run (all fields little-endian):
 *
 *   0x00  8  magic "DURABLE1"
 *   0x08  4  how to end: 0 ACPI S5 power-off, 1 ACPI reset register,
 *            2 triple fault, 3 guest-exit port, 4 halt forever (cli; hlt),
 *            5 i8042 reset
 *   0x0c  4  seed
 *   0x10  8  first DIMM offset to write (multiple of the stride)
 *   0x18  8  bytes to cover (multiple of the stride)
 *   0x20  8  stride in bytes (4: every word; 4096: one word per page)
 *   0x28  4  flags: bit 0 = write the DIMM's flush hint afterwards
 *   0x2c  4  byte for the guest-exit port (mode 3)
 *
 * The u32 at every stride step, DIMM offset o, becomes seed + o / 4 (a
 * counter pattern). The guest then prints "pattern written" on COM1 and
 * ends the VM as asked. A wrong magic ends it with guest-exit byte 0x7e.
 */
.include "long64.S"

.text
.code64
.globl _start
_start:
    mov $0x90000, %rsp
    MAP_HOLE_AND_FIRST_NVDIMM

    mov $NVDIMM, %rbx
    movabs $0x31454c4241525544, %rax     /* "DURABLE1" */
    cmp %rax, (%rbx)
    je 3f
    mov $0x7e, %al
    jmp guest_exit
3:  mov 0x10(%rbx), %rdi                 /* offset */
    mov 0x18(%rbx), %rdx                 /* length */
    mov 0x20(%rbx), %r8                  /* stride */
    mov 0x0c(%rbx), %r9d                 /* seed */
    add %rdi, %rdx                       /* end offset */
    cmp $4, %r8
    jne 5f
    /* Every word: stosl with a running counter. */
    mov %rdx, %rcx
    sub %rdi, %rcx
    shr $2, %rcx
    mov %rdi, %rax
    shr $2, %rax
    add %r9d, %eax
    add %rbx, %rdi
    jrcxz 7f
4:  stosl
    inc %eax
    loop 4b
    jmp 7f
    /* One word every stride bytes. */
5:  cmp %rdx, %rdi
    jae 7f
    mov %rdi, %rax
    shr $2, %rax
    add %r9d, %eax
    mov %eax, (%rbx, %rdi)
    add %r8, %rdi
    jmp 5b

7:  testl $1, 0x28(%rbx)
    jz 8f
    mov $FLUSH_HINT, %rdi
    movl $1, (%rdi)
8:  lea msg(%rip), %rsi
9:  lodsb
    test %al, %al
    jz 10f
    mov $COM1, %dx
    out %al, %dx
    jmp 9b

10: mov 0x08(%rbx), %eax
    cmp $0, %eax
    je power_off
    cmp $1, %eax
    je reset
    cmp $2, %eax
    je triple_fault
    cmp $3, %eax
    je exit_port
    cmp $4, %eax
    je halt_forever
    cmp $5, %eax
    je i8042_reset
    mov $0x7f, %al
    jmp guest_exit

power_off:
    mov $SLEEP_CONTROL, %dx
    mov $((5 << 2) | 0x20), %al
    out %al, %dx
    jmp halt_forever
reset:
    mov $RESET_REG, %dx
    mov $1, %al
    out %al, %dx
    jmp halt_forever
i8042_reset:
    mov $I8042_CMD, %dx
    mov $0xfe, %al
    out %al, %dx
    jmp halt_forever
triple_fault:
    /* An empty IDT, then a non-canonical load: #GP cannot be delivered,
     * nor the #DF that follows, so the vCPU shuts down. */
    lidt idtr(%rip)
    movabs $0x8000000000000000, %rax
    mov (%rax), %rax
    jmp halt_forever
exit_port:
    mov 0x2c(%rbx), %eax
guest_exit:
    mov $GUEST_EXIT, %dx
    out %al, %dx
halt_forever:
    cli
11: hlt
    jmp 11b

msg: .asciz "pattern written\n"
.align 8
idtr: .word 0
      .quad 0
