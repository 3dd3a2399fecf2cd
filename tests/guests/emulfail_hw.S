/* SPDX-License-Identifier: Apache-2.0
 * Loads an x87 extended real (fldt) from an address with no memory behind it
 * (0xd0000000: above the guest's RAM, below the flush hints, no device there).
 * On a hardware KVM the access is MMIO, so KVM's instruction emulator must
 * run the load, and it has no x87 loads: at CPL 0 that is a
 * KVM_EXIT_INTERNAL_ERROR (emulation failure) with the instruction in RAM,
 * bytes db 2d 00 00 00 d0. */
.include "common.S"
.globl _start
_start:
    mov $0x90000, %esp
    mov $msg, %esi
    call puts
    fninit
    fldt 0xd0000000
1:  hlt
    jmp 1b
msg: .asciz "about to load from MMIO with fldt\n"
