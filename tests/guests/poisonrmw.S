/* SPDX-License-Identifier: Apache-2.0
 * A read-modify-write of a poisoned line (tests/tests/mce_semantics.rs): a
 * 64-bit ELF entered in long mode; the first NVDIMM is 16 MiB with a bad
 * block at offset 1 MiB (`badblocks=1048576+512,mce=on`), and the host
 * wrote "BADBYTES" at offset 1 MiB + 8 of its file.
 *
 * The guest adds 0x0101010101010101 to the quad at 1 MiB + 8 (`add` with a
 * memory destination: a load, then a store of the sum). The load is a
 * machine check at the instruction; the store never happens, on hardware
 * and here. Exits: 0x4d the machine check came at the `add`; 0x7c at
 * another RIP; 0x7d the `add` completed.
 */
.include "long64.S"
.include "mc_idt.inc"

.set BAD, NVDIMM + 0x100000 + 8

.text
.code64
.globl _start
_start:
    mov $0x90000, %rsp
    MAP_HOLE_AND_FIRST_NVDIMM
    MC_IDT mc_handler
    mov $BAD, %rdi
    movabs $0x0101010101010101, %rax
rmw:
    add %rax, (%rdi)
    EXIT_WITH 0x7d

mc_handler:
    lea rmw(%rip), %rax
    cmp (%rsp), %rax
    jne 1f
    EXIT_WITH 0x4d
1:  EXIT_WITH 0x7c

.data
MC_IDT_DATA
