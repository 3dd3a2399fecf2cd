/* SPDX-License-Identifier: Apache-2.0
 * Machine check on a poisoned load (tests/tests/kvm_tiny.rs), as a 64-bit ELF
 * without a PVH note, entered in long mode. The first NVDIMM is 16 MiB with
 * its first bad block at offset 1 MiB (`badblocks=1048576+512`); the host
 * wrote "GOODBYTE" at offset 1 MiB + 1024 of its file. The guest installs a
 * #MC handler, sets CR4.MCE, then:
 *   1. loads the 8 bytes at 1 MiB + 1024 (same 4 KiB page, not bad);
 *   2. stores "STORED!!" at 1 MiB + 2048;
 *   3. loads the 8 bytes at 1 MiB + 8 (bad) at `poisoned_load`.
 * With mce=on step 3 is a machine check; the handler checks that it came at
 * `poisoned_load` (not after it), MCG_STATUS has MCIP|EIPV|RIPV, and bank 4
 * (AMD) or 9 (Intel) holds a valid error whose address is in the bad page;
 * then it exits with 0x4d ("M"). Other exits: 0x7d no machine check,
 * 0x7c wrong RIP, 0x7b wrong MCG_STATUS, 0x7a no valid bank, 0x79 wrong
 * address, 0x78 step 1 read the wrong bytes. */
.include "long64.S"
.include "mc_idt.inc"

.set BAD_PAGE, NVDIMM + 0x100000

.text
.code64
.globl _start
_start:
    mov $0x90000, %rsp
    MAP_HOLE_AND_FIRST_NVDIMM

    MC_IDT mc_handler

    lea msg_start(%rip), %rsi
    call puts
    /* 1. The good bytes of the poisoned page. */
    mov $(BAD_PAGE + 1024), %rdi
    mov (%rdi), %rax
    cmp good(%rip), %rax
    mov $0x78, %bl
    jne exit_bl
    /* 2. A store into it. */
    mov stored(%rip), %rax
    mov $(BAD_PAGE + 2048), %rdi
    mov %rax, (%rdi)
    /* 3. The bad bytes. */
    mov $(BAD_PAGE + 8), %rdi
    xor %eax, %eax
poisoned_load:
    mov (%rdi), %rax
    lea msg_none(%rip), %rsi
    call puts
    mov $0x7d, %bl
    jmp exit_bl

mc_handler:
    lea msg_mc(%rip), %rsi
    call puts
    lea poisoned_load(%rip), %rax
    cmp (%rsp), %rax
    mov $0x7c, %bl
    jne exit_bl
    mov $0x17a, %ecx                     /* MCG_STATUS */
    rdmsr
    and $7, %eax
    cmp $7, %eax
    mov $0x7b, %bl
    jne exit_bl
    mov $0x411, %ecx                     /* MC4_STATUS */
    rdmsr
    test $0x80000000, %edx
    jnz 1f
    mov $0x425, %ecx                     /* MC9_STATUS */
    rdmsr
    test $0x80000000, %edx
    mov $0x7a, %bl
    jz exit_bl
1:  inc %ecx                             /* MCi_ADDR */
    rdmsr
    shl $32, %rdx
    or %rdx, %rax
    and $~0xfff, %rax
    mov $BAD_PAGE, %rdx
    cmp %rdx, %rax
    mov $0x79, %bl
    jne exit_bl
    lea msg_ok(%rip), %rsi
    call puts
    mov $0x4d, %bl

exit_bl:
    mov %bl, %al
    mov $GUEST_EXIT, %dx
    out %al, %dx
2:  cli
    hlt
    jmp 2b

puts:
    lodsb
    test %al, %al
    jz 3f
    mov $COM1, %dx
    out %al, %dx
    jmp puts
3:  ret

good:   .ascii "GOODBYTE"
stored: .ascii "STORED!!"
msg_start: .asciz "poisonload: loading\n"
msg_none:  .asciz "poisonload: the load completed without a machine check\n"
msg_mc:    .asciz "poisonload: machine check\n"
msg_ok:    .asciz "poisonload: machine check at the load, bank and address right\n"

.data
MC_IDT_DATA
