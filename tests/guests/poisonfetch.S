/* SPDX-License-Identifier: Apache-2.0
 * An instruction fetch from a poisoned line (tests/tests/mce_semantics.rs):
 * a 64-bit ELF entered in long mode; the first NVDIMM is 16 MiB with a bad
 * block at offset 1 MiB (`badblocks=1048576+512,mce=on`); the host wrote
 * `ret` bytes (0xc3) over it in its file.
 *
 * The guest calls into the bad block. A fetch from poison is a machine
 * check at the fetched instruction, the interrupted RIP not restartable:
 * MCG_STATUS has MCIP and EIPV, not RIPV. Exits: 0x4d machine check at the
 * call's target with that MCG_STATUS; 0x7b MCG_STATUS other; 0x7c another
 * RIP; 0x7d the call returned (the fetch read the file's bytes).
 */
.include "long64.S"
.include "mc_idt.inc"

.set BAD, NVDIMM + 0x100000 + 64

.text
.code64
.globl _start
_start:
    mov $0x90000, %rsp
    MAP_HOLE_AND_FIRST_NVDIMM
    MC_IDT mc_handler
    mov $BAD, %rax
    call *%rax
    EXIT_WITH 0x7d

mc_handler:
    mov $BAD, %rax
    cmp (%rsp), %rax
    jne 1f
    mov $0x17a, %ecx                     /* MCG_STATUS */
    rdmsr
    and $7, %eax
    cmp $6, %eax                         /* MCIP | EIPV, no RIPV */
    jne 2f
    EXIT_WITH 0x4d
1:  EXIT_WITH 0x7c
2:  EXIT_WITH 0x7b

.data
MC_IDT_DATA
