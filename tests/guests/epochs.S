/* SPDX-License-Identifier: Apache-2.0
 * Flush-recording guest (tests/tests/record_flushes.rs): a 64-bit ELF
 * entered in long mode with pmemvm's identity map of the first 1 GiB and
 * of the first NVDIMM.
 *
 * The host writes a parameter block at offset 0 of the first NVDIMM's
 * backing file before the run (little-endian):
 *
 *   0x00  8  magic "EPOCHS01"
 *   0x08  4  number of steps
 *   0x10     the steps, 16 bytes each:
 *            8  DIMM offset (4-byte aligned, inside the first 1 GiB)
 *            4  value: the u32 stored there
 *            4  flags: bit 0 = write the DIMM's flush hint after the store
 *
 * Then it prints "epochs written" on COM1 and powers off (ACPI S5). A
 * wrong magic ends it with guest-exit byte 0x7e.
 */
.include "long64.S"

.text
.code64
.globl _start
_start:
    mov $0x90000, %rsp
    MAP_HOLE_AND_FIRST_NVDIMM

    mov $NVDIMM, %rbx
    movabs $0x31305348434f5045, %rax     /* "EPOCHS01" */
    cmp %rax, (%rbx)
    je 1f
    mov $0x7e, %al
    mov $GUEST_EXIT, %dx
    out %al, %dx
    jmp 9f
1:  mov 0x08(%rbx), %ecx
    lea 0x10(%rbx), %rsi
2:  jrcxz 4f
    mov (%rsi), %rdi
    mov 8(%rsi), %eax
    mov %eax, (%rbx, %rdi)
    testl $1, 12(%rsi)
    jz 3f
    mov $FLUSH_HINT, %rdx
    movl $1, (%rdx)
3:  add $16, %rsi
    dec %ecx
    jmp 2b

4:  lea msg(%rip), %rsi
5:  lodsb
    test %al, %al
    jz 6f
    mov $COM1, %dx
    out %al, %dx
    jmp 5b
6:  mov $SLEEP_CONTROL, %dx
    mov $((5 << 2) | 0x20), %al
    out %al, %dx
9:  cli
    hlt
    jmp 9b

msg: .asciz "epochs written\n"
