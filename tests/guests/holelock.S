/* SPDX-License-Identifier: Apache-2.0
 * Locked instructions on a hole page's good bytes (tests/tests/mce_semantics.rs):
 * a 64-bit ELF entered in long mode; the first NVDIMM is 16 MiB with a bad
 * block at offset 1 MiB (`badblocks=1048576+512,mce=on`), so the page at
 * 1 MiB is a hole whose bytes past 512 are good.
 *
 * Both vCPUs (vCPU 1 through ap_start.inc) add 1 to the quad at 1 MiB + 1024
 * ROUNDS times each with a `lock cmpxchg` loop; every access is emulated by
 * KVM as MMIO. Then vCPU 0 prints "count=<hex>" and exits with 0x4d when the
 * quad is 2 * ROUNDS (no add lost), 0x7e when not, 0x7c when vCPU 1 did not
 * start.
 */
.include "long64.S"
.include "ap_start.inc"

.set ROUNDS, 3000
.set COUNTER, NVDIMM + 0x100000 + 1024
.set AP_STACK, 0x80000
.set AP_UP, 0x50000
.set AP_DONE, 0x50008

.text
.code64
.globl _start
_start:
    mov $0x90000, %rsp
    MAP_HOLE_AND_FIRST_NVDIMM
    movq $0, AP_DONE
    mov $COUNTER, %rdi
    movq $0, (%rdi)
    START_AP AP_UP, no_ap
    call add_rounds
1:  cmpq $0, AP_DONE
    pause
    je 1b
    mov $COUNTER, %rdi
    mov (%rdi), %r11
    lea msg(%rip), %rsi
    mov $COM1, %dx
2:  lodsb
    test %al, %al
    jz 3f
    out %al, %dx
    jmp 2b
3:  mov $60, %cl
4:  mov %r11, %rax
    shr %cl, %rax
    and $0xf, %al
    add $'0', %al
    cmp $'9', %al
    jbe 5f
    add $('a' - '9' - 1), %al
5:  out %al, %dx
    sub $4, %cl
    jns 4b
    mov $'\n', %al
    out %al, %dx
    mov $0x4d, %al
    cmp $(2 * ROUNDS), %r11
    je 6f
    mov $0x7e, %al
6:  mov $GUEST_EXIT, %dx
    out %al, %dx
9:  cli
    hlt
    jmp 9b

no_ap:
    mov $0x7c, %al
    jmp 6b

/* ROUNDS times: counter += 1 with lock cmpxchg. Clobbers rax, rdx, rdi, r9. */
add_rounds:
    mov $COUNTER, %rdi
    mov $ROUNDS, %r9
1:  mov (%rdi), %rax
2:  lea 1(%rax), %rdx
    lock cmpxchg %rdx, (%rdi)
    jnz 2b
    dec %r9
    jnz 1b
    ret

ap_main:
    mov $AP_STACK, %rsp
    movq $1, AP_UP
    call add_rounds
    movq $1, AP_DONE
1:  cli
    hlt
    jmp 1b

msg: .asciz "count="

AP_TRAMPOLINE_CODE
