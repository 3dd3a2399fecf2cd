/* SPDX-License-Identifier: Apache-2.0
 * A guest that panics as Linux's pvpanic driver reports it: it reads the
 * pvpanic port (the events the device supports: "panicked", bit 0, or it
 * exits with 9), writes "panicked" there, and waits with interrupts off for
 * pmemvm to end it. Its data holds a VMCOREINFO note laid out as a Linux
 * kernel keeps it, for the dump to find. No stack: all vCPUs run this. */
.include "long64.S"
.set PVPANIC, 0x505

.text
.code64
.globl _start
.type _start, @function
_start:
    cli
    lock incq started(%rip)
    mov $PVPANIC, %dx
    in %dx, %al
    test $1, %al
    jz unsupported
    mov $1, %al
    out %al, %dx
1:  pause
    jmp 1b
unsupported:
    mov $9, %al
    mov $GUEST_EXIT, %dx
    out %al, %dx
2:  hlt
    jmp 2b

.data
.balign 8
.globl started
.type started, @object
started: .quad 0
.balign 4
.globl vmcoreinfo
.type vmcoreinfo, @object
vmcoreinfo:
    .long 11                     /* n_namesz: "VMCOREINFO" and its NUL */
    .long desc_end - desc        /* n_descsz */
    .long 0                      /* n_type */
    .ascii "VMCOREINFO\0\0"           /* the name, padded to 12 */
    .balign 4
desc:
    .ascii "OSRELEASE=pmemvm-tiny-panicker\nPAGESIZE=4096\n"
desc_end:
