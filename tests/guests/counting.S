/* SPDX-License-Identifier: Apache-2.0
 * A guest for the control socket: every vCPU adds 1 to `counter` (atomically)
 * in a loop with interrupts off, and never exits to the host — a dump shows
 * how far it got, a paused guest's counter stands still. No stack: all vCPUs
 * run this same code. */
.include "long64.S"

.text
.code64
.globl _start
.type _start, @function
_start:
    cli
count:
    lock incq counter(%rip)
    pause
    jmp count

.data
.balign 8
.globl counter
.type counter, @object
counter: .quad 0
