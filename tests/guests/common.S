/* SPDX-License-Identifier: Apache-2.0
 * Shared pieces of pmemvm's tiny test guests: a PVH entry note (Linux's
 * XEN_ELFNOTE_PHYS32_ENTRY, type 18) and small 32-bit helpers. The guests run
 * in 32-bit protected mode with paging off, as PVH enters them; they use no
 * int3/int n/xsave, so this host's PVM KVM can emulate them.
 */
.section .note.pvh,"a",@note
.align 4
.long 4
.long 4
.long 18
.asciz "Xen"
.long _start

.set COM1, 0x3f8
.set GUEST_EXIT, 0x501
.set SLEEP_CONTROL, 0x600
.set RESET_REG, 0x602
.set NVDIMM_BASE, 0x100000000
.set FLUSH_HINT, 0xfe000000

.text
.code32

/* puts: print the NUL-terminated string at %esi on COM1. */
puts:
1:  lodsb
    test %al, %al
    jz 2f
    mov $COM1, %dx
    out %al, %dx
    jmp 1b
2:  ret

/* exit_with: write %al to the guest-exit port, then stop. */
exit_with:
    mov $GUEST_EXIT, %dx
    out %al, %dx
3:  hlt
    jmp 3b
