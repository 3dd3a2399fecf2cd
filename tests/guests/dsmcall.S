/* SPDX-License-Identifier: Apache-2.0
 * One NVDIMM _DSM call for the second DIMM (NFIT handle 2): a query
 * (function 0, revision 1) put in the DSM page at 0xff000 and rung on the
 * doorbell port 0x510, as the SSDT's AML does. Then exit status 42. */
.include "common.S"
.set DSM_PAGE, 0xff000
.set DSM_DOORBELL, 0x510
.globl _start
_start:
    mov $0x90000, %esp
    mov $DSM_PAGE, %edi
    movl $2, (%edi)
    movl $1, 4(%edi)
    movl $0, 8(%edi)
    movl $0, 12(%edi)
    mov $DSM_PAGE, %eax
    mov $DSM_DOORBELL, %dx
    out %eax, %dx
    mov $msg, %esi
    call puts
    mov $42, %al
    jmp exit_with
msg: .asciz "dsm call done\n"
